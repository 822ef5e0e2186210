"""`sim calibrate` recovers known parameters from synthetic requests, flags what the data cannot pin down, and
`sim run --uncertainty` samples the fitted distribution."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from test_moe_serve import moe_raw

from sim.calibrate import Observation, calibrate, simulate
from sim.cli import main
from sim.scenario import load_scenario

ENGINE = "machines.server.engine."


def write_scenario(folder, dense_s: float, prefill_tok_s: float, calibrations=()) -> str:
    raw = moe_raw()
    engine = raw["machines"]["server"]["engine"]
    engine["prefill_tok_s"] = prefill_tok_s
    engine["step"]["dense_s"] = dense_s
    raw["calibrate"] = {"free": {ENGINE + "step.dense_s": {"lo": 1e-4, "hi": 0.1},
                                 ENGINE + "prefill_tok_s": {"lo": 50, "hi": 50000},
                                 ENGINE + "power.idle_w": {"lo": 1, "hi": 100}}}
    raw["calibrations"] = list(calibrations)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Requests 'measured' on an engine with dense_s 3 ms and 800 prompt tok/s (the scenario says 1 ms, 500)."""
    folder = tmp_path_factory.mktemp("cal")
    truth = load_scenario(write_scenario(folder, 3e-3, 800.0))[0]
    rng = np.random.default_rng(5)
    obs = [Observation("x", int(p), 0, int(o), float("nan"), {}) for p, o in
           zip(rng.integers(100, 2000, 40), rng.integers(40, 300, 40), strict=True)]
    sim = simulate(truth, obs, seed=123)
    table = folder / "requests.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt_tokens", "cached_tokens", "output_tokens", "prefill_tok_s", "decode_tok_s"])
        for o, s in zip(obs, sim, strict=True):
            w.writerow([o.prompt_tokens, 0, o.output_tokens, s["prefill_tok_s"], s["decode_tok_s"]])
    return folder, write_scenario(folder, 1e-3, 500.0), str(table)


def test_calibrate_recovers_known_parameters_and_flags_what_it_cannot_see(synthetic):
    folder, scenario, table = synthetic
    res = calibrate(scenario, [], [table], seed=0)
    assert res.parameters[ENGINE + "step.dense_s"] == pytest.approx(3e-3, rel=0.05)
    assert res.parameters[ENGINE + "prefill_tok_s"] == pytest.approx(800, rel=0.02)
    assert res.log_sd[ENGINE + "step.dense_s"] < 0.05
    assert any("power.idle_w" in w and "do not depend" in w for w in res.warnings)  # no observable sees it
    assert len(res.residuals) == 80


def test_calibrate_cli_writes_calibration_report_and_plot_and_uncertainty_samples_it(synthetic):
    folder, scenario, table = synthetic
    out = folder / "fit.yaml"
    r = CliRunner().invoke(main, ["calibrate", "--scenario", scenario, "--table", table, "--out", str(out)])
    assert r.exit_code == 0, r.output
    cal = yaml.safe_load(out.read_text())
    assert len(cal["log_cov"]) == 3 and (folder / "fit_report.md").exists() and (folder / "fit_plot.png").exists()
    assert "sim calibrate --scenario" in out.read_text().splitlines()[1]
    # the scenario then uses the calibration; --uncertainty draws from its covariance
    fitted = write_scenario(folder, 1e-3, 500.0, calibrations=["fit.yaml"])
    raw = yaml.safe_load(open(fitted))
    for key in ("prefill_tok_s", "step"):
        raw["machines"]["server"]["engine"].pop(key) if key == "prefill_tok_s" else \
            raw["machines"]["server"]["engine"]["step"].pop("dense_s")
    raw["machines"]["server"]["engine"]["power"].pop("idle_w")
    open(fitted, "w").write(yaml.safe_dump(raw))
    r = CliRunner().invoke(main, ["run", fitted, "--uncertainty", "6", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    d = data["metrics"]["decode_tok_s"]
    assert d["p5"] <= d["median"] <= d["p95"] and d["p5"] < d["p95"]
    plain = CliRunner().invoke(main, ["run", write_scenario(folder, 1e-3, 500.0), "--uncertainty", "3"])
    assert plain.exit_code == 2 and "sim calibrate" in plain.output  # nothing to draw from: one-line error


def test_bad_calibration_inputs_are_one_line_errors(synthetic, tmp_path):
    from sim.errors import ScenarioError
    from sim.uncertainty import calibrated_parameters

    folder, scenario, table = synthetic
    empty = tmp_path / "empty.csv"
    empty.write_text("prompt_tokens,output_tokens\n100,10\n")
    with pytest.raises(ScenarioError, match="something measured"):
        calibrate(scenario, [], [str(empty)])
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_tokens,cached_tokens,output_tokens,decode_tok_s\n10,20,5,100\n")
    with pytest.raises(ScenarioError, match="cached_tokens"):
        calibrate(scenario, [], [str(bad)])
    raw = yaml.safe_load(open(scenario))
    raw["calibrate"]["free"] = {"machines.server.engine.step": {"lo": 1e-3, "hi": 1.0}}
    odd = tmp_path / "odd.yaml"
    odd.write_text(yaml.safe_dump(raw))
    with pytest.raises(ScenarioError, match="positive number"):
        calibrate(str(odd), [], [table])
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"parameters": {ENGINE + "step.dense_s": 1e-3}, "log_cov": [[0.1], [0.2]]}))
    raw = yaml.safe_load(open(scenario))
    raw["calibrations"] = [str(cal)]
    raw["machines"]["server"]["engine"]["step"].pop("dense_s")
    uses = tmp_path / "uses.yaml"
    uses.write_text(yaml.safe_dump(raw))
    with pytest.raises(ScenarioError, match="log_cov"):
        calibrated_parameters(str(uses), [])
    cal.write_text(yaml.safe_dump({"parameters": {ENGINE + "step.dense_s": 1e-3}, "log_cov": [[-0.1]]}))
    with pytest.raises(ScenarioError, match="semi-definite"):
        calibrated_parameters(str(uses), [])
    cal.write_text(yaml.safe_dump({"parameters": {ENGINE + "step.dense_s": 1e-3}, "log_cov": [[0.01]]}))
    names, mean, _, held = calibrated_parameters(str(uses), [])
    assert names == [ENGINE + "step.dense_s"] and held == [] and mean[0] == pytest.approx(np.log(1e-3))
    with pytest.raises(ScenarioError, match="to draw"):  # a value given with --set is not drawn: nothing left
        calibrated_parameters(str(uses), [f"{ENGINE}step.dense_s=0.002"])
