"""The MoE engine's parameters from a model file: the dense weights' own count, not their bytes at the experts' bits
(gpt-oss: BF16 attention beside MXFP4 experts), and an Unsloth mix sized by the file a scenario names."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from conftest import ROOT

from sim.cli import main
from sim.config.load import load_scenario
from sim.config.yaml_io import dump_yaml, read_yaml
from sim.core.errors import ScenarioError
from sim.modelfiles import read_model_file
from sim.moe.setup import setup_engine

HOME = os.path.join(ROOT, "scenarios", "rtx4090_qwen3_30b.yaml")
MODELS = os.path.join(ROOT, "calibration", "models")


def scenario_with(tmp_path, model: str, quant: str | None, **extra) -> str:
    """The shipped RTX 4090 scenario serving ``model`` (a calibration/models config) at ``quant``."""
    raw = read_yaml(HOME)
    spec = {"file": os.path.join(MODELS, model), **extra}
    if quant is not None:
        spec["quant"] = quant
    raw["models"]["qwen3_30b"] = spec
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml(raw))
    return str(path)


def test_gpt_oss_dense_parameters_are_what_sim_model_prints(tmp_path):
    """gpt-oss-20b's checkpoint: experts MXFP4 (4.25 bits), the rest BF16. Converting the dense bytes at the experts'
    bits counted 3.8x its dense parameters, and so 3.8x the dense FLOPs."""
    g = read_model_file(os.path.join(MODELS, "gpt-oss-20b.json"))
    scn = load_scenario(scenario_with(tmp_path, "gpt-oss-20b.json", None), [])[0]
    eng = setup_engine(scn, scn.serve.machine)
    assert eng.specs.dense_params == pytest.approx(g.dense_params, rel=1e-5)
    out = CliRunner().invoke(main, ["model", os.path.join(MODELS, "gpt-oss-20b.json")], catch_exceptions=False)
    dense_line = next(line for line in out.stdout.splitlines() if line.strip().startswith("dense weights"))
    printed = float(dense_line.split("(")[1].split(" B parameters")[0])
    assert eng.specs.dense_params / 1e9 == pytest.approx(printed, rel=1e-3)
    assert g.bits_per_weight_dense == 16 and g.bits_per_weight_experts == pytest.approx(4.25, abs=0.01)
    # the experts' parameters still from their bytes at their own bits
    assert eng.specs.expert_params == pytest.approx(g.expert_params, rel=1e-3)


def test_an_unsloth_mix_needs_the_file_size_and_is_scaled_to_it(tmp_path):
    with pytest.raises(ScenarioError, match="weights_gib"):
        load_scenario(scenario_with(tmp_path, "qwen3-30b-a3b.json", "UD-Q4_K_XL"), [])
    scn = load_scenario(scenario_with(tmp_path, "qwen3-30b-a3b.json", "UD-Q4_K_XL", weights_gib=16.49), [])[0]
    moe = scn.models["qwen3_30b"].moe
    g = read_model_file(os.path.join(MODELS, "qwen3-30b-a3b.json"), "UD-Q4_K_XL", weights_bytes=16.49 * 2**30)
    assert g.weights_bytes == pytest.approx(16.49 * 2**30) and g.bytes_from == "scaled to file size"
    assert moe.expert_mib == pytest.approx(g.expert_bytes / 2**20, rel=1e-5)
    with pytest.raises(ScenarioError, match="Unsloth"):
        read_model_file(os.path.join(MODELS, "qwen3-30b-a3b.json"), "UD-Q4_K_XL")
    r = CliRunner().invoke(main, ["model", os.path.join(MODELS, "qwen3-30b-a3b.json"), "--quant", "UD-Q4_K_XL",
                                  "--weights-gib", "16.49"])
    assert r.exit_code == 0, r.output
    assert "scaled" in r.stdout
