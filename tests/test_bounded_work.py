"""Bounded input and bounded work: values so large or small that the arithmetic would overflow, geometry no model
can have, workloads and sweeps that would run for weeks or fill memory, bucket edges no share can fall between.
Each is refused as one line (exit 2) before anything runs, within a time (s) and peak-memory (MiB) bound that the
assert messages report; each runs through ``python -m sim`` in a capped child (tests.bounded)."""

from __future__ import annotations

import json
import os

import pytest

from sim.serving.metrics import share
from tests.bounded import ROOT, Outcome, run_bounded

GEN3 = "scenarios/gen3_5090.yaml"
A100 = "scenarios/a100_llama2_7b.yaml"
VISION = "scenarios/basalt_2gpu_vision.yaml"
SECONDS = 30.0  # a refused input answers in well under this (s): it is refused before anything runs
PEAK_MIB = 1024.0  # ... and without holding more than this (MiB)


def _refused(args: list[str], *needles: str, seconds: float = SECONDS, peak_mib: float = PEAK_MIB) -> Outcome:
    """Run ``sim ARGS`` bounded; it must exit 2 with one ``sim: error:`` line holding every needle, in time."""
    r = run_bounded(args, timeout_s=max(seconds * 2, 60.0), memory_mib=3072)
    report = f"exit {r.code} in {r.seconds:.2f} s, peak {r.peak_mib:.0f} MiB: {r.stderr.strip()[-600:]}"
    assert r.one_line_error(), report
    for needle in needles:
        assert needle in r.stderr, f"{needle!r} not in the error; {report}"
    assert r.seconds < seconds, f"took too long; {report}"
    assert r.peak_mib < peak_mib, f"held too much memory; {report}"
    return r


@pytest.mark.parametrize(("scenario", "path", "value", "bound"), [
    (GEN3, "gpus.rtx5090.vram_gib", "1e300", "less than or equal to 1000000"),  # NaN in the slot arithmetic
    (GEN3, "gpus.rtx5090.vram_gib", "1e309", "vram_gib"),  # YAML infinity
    (GEN3, "models.moe125b.moe.expert_mib", "1e-320", "greater than or equal to 0.000001"),  # infinite slots
    (GEN3, "machines.strata_box.gpus.gpu0.measured_link_gbps", "1e-320", "greater than or equal"),  # infinite reads
    (GEN3, "machines.strata_box.engine.prefill_tok_s", "1e-320", "greater than or equal"),
    (GEN3, "machines.strata_box.engine.step.link_share", "1e-320", "greater than or equal"),
    (VISION, "machines.basalt_box.gpus.gpu1.reserved_gib", "1e300", "less than or equal"),
    (VISION, "machines.basalt_box.engine.peers.gpu1.overhead_gib", "1e300", "less than or equal"),
    (VISION, "machines.basalt_box.engine.peers.gpu1.paging_gbps", "1e-320", "greater than or equal"),
    (VISION, "machines.basalt_box.engine.prefill.stream_gbps", "1e-320", "greater than or equal"),
    (A100, "gpus.a100_80gb.hbm_gbps", "1e-320", "greater than or equal"),
    (A100, "gpus.a100_80gb.tflops", "1e-320", "greater than or equal"),
    (A100, "machines.a100_box.engine.iteration.memory_efficiency", "1e-320", "greater than or equal"),
    (A100, "machines.a100_box.engine.iteration.compute_efficiency", "1e-320", "greater than or equal"),
    (A100, "serve.workload.rate_per_s", "1e-320", "greater than or equal"),
    (A100, "models.llama2_7b.dense.kv_kib_per_token", "1e-320", "greater than or equal to 0.000001"),
    (A100, "models.llama2_7b.dense.kv_kib_per_token", "1e-300", "greater than or equal to 0.000001"),
    ("scenarios/home_lab.yaml", "disks.mac_ssd.read_gbps", "1e-320", "greater than or equal"),
    ("scenarios/home_lab.yaml", "pcie.efficiency", "1e-320", "greater than or equal"),
])
def test_extreme_values_are_one_line_errors(scenario: str, path: str, value: str, bound: str) -> None:
    """A number beyond the field's physical bound (which the message names) is bad input, not exit 70."""
    _refused(["run", scenario, "--set", f"{path}={value}"], path, bound)


def test_an_expert_larger_than_the_model_is_an_error() -> None:
    """One expert of 100,000 MiB in a model of 17 GiB ran and reported 0.0 tok/s."""
    _refused(["run", GEN3, "--set", "models.moe125b.moe.expert_mib=100000", "--set", "models.moe125b.weights_gib=17"],
             "models.moe125b.moe.expert_mib", "larger than all the weights")


def test_experts_far_beyond_the_weights_are_an_error() -> None:
    _refused(["run", GEN3, "--set", "models.moe125b.moe.expert_mib=200"], "models.moe125b.moe.expert_mib",
             "100 x weights_gib")


def test_shares_are_clamped_float_rounding() -> None:
    assert share(1.0000000000000002, 1.0) == 1.0
    assert share(0.25, 1.0) == 0.25
    assert share(-1e-17, 1.0) == 0.0
    assert share(1.0, 0.0) != share(1.0, 0.0)  # NaN: no whole to share


def test_no_share_above_one() -> None:
    """basalt_2gpu_vision reported a GPU busy share of 1.0000000000000002."""
    r = run_bounded(["run", VISION, "--json"], timeout_s=120)
    assert r.code == 0, r.stderr
    shares = {k: v for k, v in json.loads(r.stdout)["metrics"].items() if k.endswith("_share")}
    assert all(v <= 1 for v in shares.values()), {k: v for k, v in shares.items() if v > 1}


def test_weeks_of_work_are_refused() -> None:
    """A million requests of ten million tokens each was accepted (weeks of wall time)."""
    _refused(["run", GEN3, "--set", "serve.requests=1000000", "--set", "serve.output_tokens_min=10000000",
              "--set", "serve.output_tokens_max=10000000"], "serve.requests", "serve.max_total_tokens (10,000,000,000)")


def test_the_work_limit_is_a_scenario_key() -> None:
    """serve.max_total_tokens sets the limit: 200 requests of 26 + 260 tokens are 57,200 tokens."""
    _refused(["run", GEN3, "--set", "serve.max_total_tokens=50000"], "= 57,200", "serve.max_total_tokens (50,000)")
    r = run_bounded(["run", GEN3, "--set", "serve.max_total_tokens=60000", "--set", "serve.requests=5"],
                    timeout_s=120)
    assert r.code == 0, f"exit {r.code} in {r.seconds:.2f} s: {r.stderr}"


def test_a_sweep_of_a_million_runs_is_refused(tmp_path) -> None:
    """Three axes of 100 values (a million points) grew memory at 58 MB/s until MemoryError."""
    axes = [f"--axis=machines.strata_box.gpus.gpu0.reserved_gib=0..{99 / 10:g}:0.1",
            "--axis=serve.requests=1..100:1", "--axis=serve.prompt_tokens=1..100:1"]
    _refused(["sweep", GEN3, *axes, "--out", str(tmp_path / "o")], "1,000,000 points", "limit of 100,000 runs",
             "--max-runs", peak_mib=512)


def test_max_runs_counts_seeds_and_sets_the_limit(tmp_path) -> None:
    _refused(["sweep", GEN3, "--axis", "serve.requests=1,2,3", "--seeds", "2", "--max-runs", "5", "--out",
              str(tmp_path / "o")], "3 points x 2 seeds = 6 runs", "limit of 5 runs")


@pytest.mark.parametrize(("row", "replacement", "where"), [
    ("pcie_spill,0.5,3,137.7", "pcie_spill,-1,3,137.7", "row 3.low_pct: bad value -1"),
    ("pcie_spill,0.5,3,137.7", "pcie_spill,3,0.5,137.7", "row 3.high_pct: bad value 0.5"),
    ("pcie_spill,0.5,3,137.7", "pcie_spill,0.5,300,137.7", "row 3.high_pct: bad value 300"),
])
def test_bad_bucket_edges_name_file_row_and_column(tmp_path, row: str, replacement: str, where: str) -> None:
    """A negative bucket edge was accepted and its bucket simulated as NaN with a warning."""
    with open(os.path.join(ROOT, "calibration", "strata_spill_buckets.csv"), encoding="utf-8") as f:
        text = f.read()
    assert row in text
    table = tmp_path / "strata_spill_buckets.csv"
    table.write_text(text.replace(row, replacement), encoding="utf-8")
    _refused(["calibrate", GEN3, "--table", str(table), "--out", str(tmp_path / "out")], str(table), where,
             seconds=45)
