"""Bounded llama-bench work: a sweep's simulated tests are capped (sim.config.llamacpp.MAX_BENCH_TESTS) so the largest
accepted run takes seconds, and ``sim fit-offload --bench`` fits repeated identical tests as one observation, at most
sim.calibration.own_runs.MAX_RUNS distinct ones, and warns of a parameter that ends at its bound."""

from __future__ import annotations

import os
import shutil

from click.testing import CliRunner

from sim.calibration import own_runs as own
from sim.cli.app import main
from sim.config.yaml_io import parse_yaml
from tests.bounded import run_bounded

QWEN = ["--model", "calibration/models/qwen3-30b-a3b.json", "--quant", "Q4_K_M", "--gpu", "rtx4090",
        "--host", "ryzen9_7950x"]
MODEL = "| qwen3moe 30B.A3B Q4_K - Medium | 17.28 GiB | 30.53 B | CUDA | 99 "
HEADER = ("| model | size | params | backend | ngl | n_cpu_moe | test | t/s |\n"
          "| --- | ---: | ---: | --- | --: | --: | --: | --: |\n")


def _scenario(tmp_path) -> str:
    scenario = tmp_path / "box.yaml"
    shutil.copy("scenarios/llamacpp_3070ti.yaml", scenario)
    text = scenario.read_text().replace("../calibration/models/", os.path.abspath("calibration/models") + "/")
    scenario.write_text(text)
    return str(scenario)


def test_a_4096_value_llama_bench_sweep_is_refused_in_one_line_quickly() -> None:
    r = run_bounded(["llama", "llama-bench -m x.gguf -ncmoe 0-4095", *QWEN], timeout_s=30, memory_mib=2048)
    assert r.one_line_error(), r.stderr[-600:]
    assert "8,192 tests" in r.stderr and "at most 512" in r.stderr and "split" in r.stderr
    assert r.seconds < 5 and r.peak_mib < 200


def test_sweeps_times_lengths_and_scenario_lists_share_the_cap() -> None:
    runner = CliRunner()
    r = runner.invoke(main, ["llama", "llama-bench -m x.gguf -ncmoe 0-99 -n 0-47", *QWEN])
    assert r.exit_code == 2 and "at most 512" in r.output and "split" in r.output
    depths = "[" + ",".join(str(i) for i in range(257)) + "]"  # (pp512 + tg128) x 257 depths = 514 tests
    r = runner.invoke(main, ["run", "scenarios/llamacpp_3070ti.yaml", "--set", f"bench.n_depth={depths}"])
    assert r.exit_code == 2 and "514 tests" in r.output and "512" in r.output


def test_fit_offload_merges_300_repeated_rows_into_one_observation(tmp_path) -> None:
    runs = tmp_path / "runs.md"
    runs.write_text(HEADER + f"{MODEL}| 20 | pp512 | 1234.56 ± 12.34 |\n" * 300)
    out = tmp_path / "cal.yaml"
    r = run_bounded(["fit-offload", "--scenario", _scenario(tmp_path), "--bench", str(runs), "--out", str(out),
                     "--max-evaluations", "2"], timeout_s=30, memory_mib=2048)
    assert r.code == 0, r.stderr[-600:]
    assert "300 identical tests merged into one (their mean rate, 1234.56 tok/s)" in r.stderr
    assert r.stdout.count("pp512 ") == 1 and r.seconds < 5 and r.peak_mib < 200
    params = parse_yaml(out.read_text())["parameters"]
    assert params["machines.box.engine.llamacpp.costs.matrix_efficiency"] < 1.3  # 1.40 with 300 copies fitted


def test_fit_offload_refuses_more_distinct_runs_than_the_cap(tmp_path) -> None:
    runs = tmp_path / "runs.md"
    runs.write_text(HEADER + "".join(f"{MODEL}| 33 | tg{n} | 30.00 ± 0.50 |\n" for n in range(1, own.MAX_RUNS + 2)))
    r = CliRunner().invoke(main, ["fit-offload", "--scenario", _scenario(tmp_path), "--bench", str(runs),
                                  "--out", str(tmp_path / "cal.yaml")])
    assert r.exit_code == 2 and "65 distinct pp and tg tests: expected at most 64" in r.output
    assert "split the file" in r.output and not (tmp_path / "cal.yaml").exists()


def test_merge_keeps_distinct_tests_and_averages_repeats() -> None:
    runs = [own.OwnRun(1, "pp", 512, 0, 100.0, None), own.OwnRun(2, "pp", 512, 0, 200.0, None),
            own.OwnRun(3, "pp", 512, 4096, 90.0, None), own.OwnRun(4, "tg", 512, 0, 30.0, None)]
    merged, notes = own.merge_repeats(runs)
    assert merged == [own.OwnRun(1, "pp", 512, 0, 150.0, None), *runs[2:]]
    assert notes == ["line 1: pp512: 2 identical tests merged into one (their mean rate, 150.00 tok/s)"]


def test_a_parameter_at_its_bound_is_warned_of() -> None:
    from sim.llamacpp.params import bounds

    name = "link_share.windows"
    lo, hi = bounds(name)

    class Fitted:
        def __init__(self, value: float) -> None:
            self.value = value

        def lookup(self) -> dict[str, float]:
            return {name: self.value}

    assert own.at_bounds(Fitted(hi), [name])[0].startswith(f"{name} ended at {hi:.4g}, at its upper bound")
    assert own.at_bounds(Fitted(hi * 0.995), [name]) and not own.at_bounds(Fitted((lo + hi) / 2), [name])
