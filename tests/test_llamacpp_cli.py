"""sim advise, sim llama (a pasted command line), sim logs of llama-bench output, sim fit-offload (public and own
runs), and sim validate's offload cells."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.config.yaml_io import parse_yaml

QWEN = "calibration/models/qwen3-30b-a3b.json"
OSS120 = "calibration/models/gpt-oss-120b.json"
MACHINE = ["--gpu", "rtx3070ti", "--host", "ryzen5_5600x", "--os", "windows"]


def invoke(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def advice_8gb():
    start = time.perf_counter()
    result = invoke("advise", "--model", QWEN, "--quant", "Q4_K_M", "--model-gib", "17.28", *MACHINE, "--json")
    return result, time.perf_counter() - start


def test_advise_ranks_placements_for_decode_prefill_and_a_mix(advice_8gb):
    result, seconds = advice_8gb
    assert result.exit_code == 0, result.output
    assert seconds < 10
    doc = json.loads(result.output)
    assert doc["loading"] > 10 and doc["searched"] > doc["loading"]
    best = doc["best"]["tg"][0]
    assert 25 <= best["cpu_expert_layers"] <= 36  # 8 GB under Windows: about 17 expert layers fit
    assert best["tg_band"][0] < best["tg_tok_s"] < best["tg_band"][1]
    assert best["vram_gib"] <= 8 and best["ram_gib"] > 9
    assert ("--n-cpu-moe" in best["flags"] or "-ot " in best["flags"]) and best["flags"].startswith("-ngl 99")
    rates = [float(f"{c['tg_tok_s']:.3g}") for c in doc["best"]["tg"]]  # ranked to three digits, then f16 KV
    assert rates == sorted(rates, reverse=True)
    assert {c["settings"]["n_cpu_moe"] for c in doc["best"]["tg"]} == {c["settings"]["n_cpu_moe"] for c in
                                                                       doc["best"]["tg"]}  # one per placement
    assert len({(c["settings"]["n_gpu_layers"], c["settings"]["n_cpu_moe"], tuple(c["settings"]["override_tensor"]))
                for c in doc["best"]["tg"]}) == 3


def test_advise_text_gives_the_command_to_paste_and_an_anchor_scales_it():
    result = invoke("advise", "--model", OSS120, "--quant", "MXFP4_MOE", "--gpu", "rtx4090", "--host",
                    "ryzen9_7950x", "--ram-gib", "96", "--top", "1")
    assert result.exit_code == 0, result.output
    assert "best for decode (tg128):" in result.output and "llama-server -m gpt-oss-120b.gguf -ngl 99" in result.output
    assert all(len(line) <= 120 for line in result.output.splitlines())
    plain = json.loads(invoke("advise", "--model", OSS120, "--quant", "MXFP4_MOE", "--gpu", "rtx4090", "--host",
                              "ryzen9_7950x", "--ram-gib", "96", "--top", "3", "--json").stdout)
    grid = [c for c in plain["best"]["tg"] if not c["settings"]["override_tensor"]]  # an --n-cpu-moe placement
    ncmoe = grid[0]["settings"]["n_cpu_moe"]
    anchored = json.loads(invoke("advise", "--model", OSS120, "--quant", "MXFP4_MOE", "--gpu", "rtx4090", "--host",
                                 "ryzen9_7950x", "--ram-gib", "96", "--top", "3", "--json", "--anchor",
                                 f"n_cpu_moe={ncmoe}:tg=10").stdout)
    at = [c for c in anchored["best"]["tg"] if c["settings"]["n_cpu_moe"] == ncmoe and not
          c["settings"]["override_tensor"]]
    assert at and at[0]["tg_tok_s"] == pytest.approx(10.0, rel=1e-6)
    assert anchored["anchor"]["tg"] < 1


def test_advise_errors_are_one_line():
    for args, needle in ((["--model", QWEN, "--gpu", "rtx3070ti"], "--host"),
                         (["--model", QWEN, "--quant", "Q4_K_M", *MACHINE, "--kv", "q3_x"], "--kv"),
                         (["--model", QWEN, "--quant", "Q4_K_M", *MACHINE, "--anchor", "bogus"], "--anchor"),
                         (["--model", QWEN, "--quant", "Q4_K_M", "--gpu", "rtx9999", "--host", "ryzen5_5600x"],
                          "rtx9999")):
        r = invoke("advise", *args)
        assert r.exit_code == 2 and "Traceback" not in r.output and needle in r.output, r.output
    r = invoke("advise", "--model", OSS120, "--quant", "MXFP4_MOE", "--gpu", "rtx3070ti", "--host", "ryzen5_5600x",
               "--ram-gib", "32")
    assert r.exit_code == 1 and "no placement of the model loads" in r.output


def test_a_pasted_llama_bench_line_runs_each_swept_value(tmp_path):
    line = ("./build/bin/llama-bench -m Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99 -ncmoe 28,33 -p 128 -n 32 -t 6 "
            "-fa 1 --temp 0.7")
    r = invoke("llama", line, "--model", QWEN, "--quant", "Q4_K_M", "--model-gib", "17.28", *MACHINE, "--json")
    assert r.exit_code == 0, r.output
    docs = json.loads(r.output.split("\n", 1)[1] if r.output.startswith("sim: note") else r.output)
    assert [d["sweep"]["n_cpu_moe"] for d in docs] == [28, 33]
    assert all({"prefill_tok_s", "decode_tok_s"} <= set(d["metrics"]) for d in docs)
    out = tmp_path / "mine.yaml"
    r = invoke("llama", line, "--model", QWEN, "--quant", "Q4_K_M", *MACHINE, "--write", str(out))
    assert r.exit_code == 0, r.output
    raw = parse_yaml(out.read_text())
    lc = raw["machines"]["box"]["engine"]["llamacpp"]
    assert lc["n_gpu_layers"] == 99 and lc["threads"] == 6 and lc["flash_attn"] is True
    assert raw["bench"]["n_prompt"] == [128] and raw["bench"]["n_gen"] == [32]
    assert invoke("run", str(out)).exit_code == 0


def test_llama_auto_ngl_fits_like_llama_cpps_fit():
    r = invoke("llama", "llama-server -m x.gguf -ngl auto -c 8192", "--model", QWEN, "--quant", "Q4_K_M",
               "--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert 0 < doc["metrics"]["decode_tok_s"]
    r = invoke("llama", "llama-server -m missing.gguf", "--gpu", "rtx4090", "--host", "ryzen9_7950x")
    assert r.exit_code == 2 and "missing.gguf" in r.output and "--model" in r.output


def test_logs_reads_llama_bench_outputs_and_fit_offload_fits_to_them(tmp_path):
    r = invoke("logs", "tests/data/llamacpp/synthetic_bench.csv")
    assert r.exit_code == 0 and "llama-bench output (csv)" in r.output and "pp512" in r.output
    r = invoke("logs", "tests/data/llamacpp/synthetic_bench.json", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["rows"]
    scenario = tmp_path / "box.yaml"
    shutil.copy("scenarios/llamacpp_3070ti.yaml", scenario)
    text = scenario.read_text().replace("../calibration/models/", os.path.abspath("calibration/models") + "/")
    scenario.write_text(text)
    runs = tmp_path / "runs.md"
    model = "| qwen3moe 30B.A3B Q4_K - Medium | 17.28 GiB | 30.53 B | CUDA | 99 "
    runs.write_text("| model | size | params | backend | ngl | n_cpu_moe | test | t/s |\n"
                    "| --- | ---: | ---: | --- | --: | --: | --: | --: |\n"
                    f"{model}| 33 | pp512 | 160.00 ± 3.00 |\n{model}| 33 | tg128 | 34.00 ± 0.50 |\n"
                    f"{model}| 40 | tg128 | 28.00 ± 0.50 |\n")
    out = tmp_path / "cal.yaml"
    r = invoke("fit-offload", "--scenario", str(scenario), "--bench", str(runs), "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = parse_yaml(out.read_text())
    keys = set(doc["parameters"])
    assert "machines.box.engine.llamacpp.costs.cpu_memory_efficiency" in keys
    # the scenario reads it back and lands closer to the runs
    text = scenario.read_text() + f"calibrations: [{out.name}]\n"
    scenario.write_text(text)
    before = json.loads(invoke("run", "scenarios/llamacpp_3070ti.yaml", "--json").output)["metrics"]
    after = json.loads(invoke("run", str(scenario), "--json").output)["metrics"]
    assert after["bench.tg128.tok_s"] != before["bench.tg128.tok_s"]
    r = invoke("fit-offload", "--bench", str(runs))
    assert r.exit_code == 2 and "--scenario" in r.output


@pytest.mark.parametrize("model, quant, machine", [
    (QWEN, "Q4_K_M", ["--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x"]),
    (QWEN, "Q4_K_M", MACHINE),
    (OSS120, "MXFP4_MOE", ["--gpu", "rtx4090", "--host", "ryzen9_7950x", "--ram-gib", "96"]),
])
def test_every_placement_advise_recommends_loads_in_sim_llama(model, quant, machine):
    r = invoke("advise", "--model", model, "--quant", quant, *machine, "--json", "--top", "3")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    commands = {"llama-server -m model.gguf " + c["flags"] for key in ("tg", "pp", "mix") for c in doc["best"][key]}
    assert commands
    for command in sorted(commands):
        run = invoke("llama", command, "--model", model, "--quant", quant, *machine, "--json")
        assert run.exit_code == 0, (command, run.output[-500:])
        rows = json.loads(run.stdout)["bench"]
        assert all(not row.get("error") for row in rows), (command, rows)


def test_validate_claims_the_in_sample_fit_of_every_llama_bench_table():
    r = invoke("validate", "--only", "offload", "--json")
    assert r.exit_code == 0, r.output
    cells = json.loads(r.output)["cells"]
    claimed = [c for c in cells if c["status"] != "info"]
    assert [c["cell"].split(" (")[0] for c in claimed] == ["tg_tok_s in-sample median |error|",
                                                           "pp_tok_s in-sample median |error|",
                                                           "vram_gib in-sample median |error| in GiB",
                                                           "btg_tok_s in-sample median |error|",
                                                           "bpp_tok_s in-sample median |error|"]
    assert all(c["status"] == "ok" for c in claimed)
    assert [c["tolerance"] for c in claimed] == [0.15, 0.25, 0.5, 0.25, 0.25]
