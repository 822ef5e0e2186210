"""A dense engine's costs that travel: profiled operator tables, tensor parallelism, efficiencies by GPU family."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from sim.batching.cost import StepCost
from sim.batching.families import ATTENTION, FAMILIES, iteration_costs
from sim.cli import main
from sim.config.load import load_scenario
from sim.core.errors import ScenarioError
from sim.dense.setup import setup_dense
from sim.formats.operator_profiles import operator_table
from sim.runner import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
L3 = os.path.join(ROOT, "calibration", "vidur_a100", "llama3_8b_mlp_ops.csv")
L2 = os.path.join(ROOT, "calibration", "vidur_a100", "llama2_7b_tp1_mlp_ops.csv")
A100 = os.path.join(ROOT, "scenarios", "a100_llama3_8b.yaml")
TWO_CARDS = ["machines.a100_box.gpus.gpu1={type: a100_80gb_sxm, slot_gen: 4, slot_lanes: 16}"]


def _table(tmp_path, text: str) -> str:
    path = tmp_path / "ops.csv"
    path.write_text(text)
    return str(path)


def test_table_interpolates_averages_and_extrapolates(tmp_path):
    path = _table(tmp_path, "num_tokens,a_median_ms,b_median_ms\n1,0.1,0.1\n8,0.3,0.1\n8,0.5,0.1\n16,1.0,0.6\n")
    t = operator_table(path)
    assert t.layer_s(0.5) == pytest.approx(0.2e-3)  # below the first row: its time
    assert t.layer_s(8) == pytest.approx(0.5e-3)  # repeated rows averaged: (0.4 + 0.6) / 2
    assert t.layer_s(12) == pytest.approx(1.05e-3)  # halfway from 0.5 to 1.6 ms
    assert t.layer_s(32) == pytest.approx(3.2e-3)  # beyond the last row: proportional to the tokens


def test_shipped_tables_by_tensor_parallel_degree():
    one, two = operator_table(L3, 1), operator_table(L3, 2)
    assert len(one.tokens) == 451 and one.tokens[0] == 1 and one.tokens[-1] == 32768
    assert two.layer_s(4096) < one.layer_s(4096)  # half the weights per card: less time
    assert operator_table(L2).layer_s(1) == pytest.approx(0.29e-3, rel=0.05)  # the README's one-token block
    with pytest.raises(ScenarioError, match="tensor parallel 3"):
        operator_table(L3, 3)


@pytest.mark.parametrize("text, problem", [
    ("num_tokens,a_ms\n1,0.1\n", "expected columns"),
    ("num_tokens,a_median_ms\n1,-0.1\n", "bad value"),
    ("num_tokens,a_median_ms\n0,0.1\n", "bad value"),
    ("num_tokens,a_median_ms\n1,nan\n", "bad value"),
    ("num_tokens,a_median_ms\n1,1e300\n", "bad value"),
    ("num_tokens,a_median_ms\n1,0\n", "sum to 0 ms"),
])
def test_bad_tables_are_one_line_errors(tmp_path, text, problem):
    with pytest.raises(ScenarioError, match=problem) as err:
        operator_table(_table(tmp_path, text))
    assert "\n" not in str(err.value)


def test_table_replaces_the_linear_roofline():
    t = operator_table(L2)
    base = dict(weights_bytes=12.55 * 2**30, kv_kib_per_token=512, params_b=6.74, layers=32, hidden=4096,
                hbm_gbps=2039, tflops=312, memory_efficiency=0.674, compute_efficiency=0.696, overhead_s=0.0)
    roof, profiled = StepCost.build(**base), StepCost.build(**base, linear_table=t)
    assert profiled.linear_s(512) == pytest.approx(32 * t.layer_s(512))
    assert profiled.decode_attention_s_per_token == roof.decode_attention_s_per_token  # attention: still specs


def test_tensor_parallel_splits_weights_and_kv_and_adds_all_reduces():
    base = dict(weights_bytes=16e9, kv_kib_per_token=128, params_b=8, layers=32, hidden=4096, hbm_gbps=2039,
                tflops=312, memory_efficiency=0.6, compute_efficiency=0.7, overhead_s=0.0)
    one = StepCost.build(**base)
    two = StepCost.build(**base, tensor_parallel=2, allreduce_gbps=25.0, allreduce_latency_s=2e-5)
    assert two.weights_s == pytest.approx(one.weights_s / 2) and two.kv_s_per_token == pytest.approx(
        one.kv_s_per_token / 2)
    assert two.allreduce_fixed_s == pytest.approx(2 * 32 * 2e-5)
    assert two.allreduce_token_s == pytest.approx(2 * 32 * 4096 * 2 / 25e9)
    faster = StepCost.build(**base, tensor_parallel=2, allreduce_gbps=250.0, allreduce_latency_s=2e-5)
    assert faster.linear_s(64) < two.linear_s(64)  # more link bandwidth never slower


def test_two_cards_hold_more_kv_and_serve_faster():
    one, _ = load_scenario(A100, ["serve.requests=300", "serve.workload.rate_per_s=8"])
    two, _ = load_scenario(A100, [*TWO_CARDS, "machines.a100_box.engine.tensor_parallel=2", "serve.requests=300",
                                  "serve.workload.rate_per_s=8"])
    s1, s2 = setup_dense(one, "a100_box"), setup_dense(two, "a100_box")
    assert s2.kv_pool_tokens > 2 * s1.kv_pool_tokens  # each card holds half of every token and half the weights
    r1, r2 = run(one, 0).metrics, run(two, 0).metrics
    assert r2["tpot_p50_s"] < r1["tpot_p50_s"]
    assert "vram.gpu1.used_mib" in r2


def test_tensor_parallel_needs_enough_cards_of_one_type():
    with pytest.raises(ScenarioError, match="lists 1 GPU"):
        setup_dense(load_scenario(A100, ["machines.a100_box.engine.tensor_parallel=2"])[0], "a100_box")
    mixed = ["machines.a100_box.gpus.gpu1={type: h100_sxm, slot_gen: 5, slot_lanes: 16}",
             "machines.a100_box.engine.tensor_parallel=2"]
    with pytest.raises(ScenarioError, match="one type"):
        setup_dense(load_scenario(A100, mixed)[0], "a100_box")


def test_family_defaults_fill_what_the_scenario_leaves_out():
    c = iteration_costs(None, None, None, "ampere", "vllm")
    assert (c.memory_efficiency, c.compute_efficiency, c.overhead_s) == (*FAMILIES["ampere"][:2], 1e-3)
    assert (c.kv_read_efficiency, c.attention_call_s) == ATTENTION["ampere"][:2]
    assert len(c.sources) == 5 and all("ampere" in s or "vllm" in s for s in c.sources)
    given = iteration_costs(0.5, 0.6, 0.002, "hopper")
    assert (given.memory_efficiency, given.compute_efficiency, given.overhead_s) == (0.5, 0.6, 0.002)
    assert given.sources == ("KV reads at memory_efficiency, no attention ramp: no attention kernel timings for this "
                             "family",)
    assert iteration_costs(0.5, 0.6, 0.002, "hopper", kv_read_efficiency=0.9, attention_call_s=0.0).sources == ()
    carried = iteration_costs(None, 0.6, 0.0, "blackwell")
    assert carried.memory_efficiency == FAMILIES["hopper"][0] and "carried over" in carried.sources[0]
    assert carried.kv_read_efficiency is None and carried.attention_call_s == 0.0  # no attention timings: none


def test_a_dense_scenario_without_costs_runs_and_says_where_they_came_from():
    res = CliRunner().invoke(main, ["run", A100, "--set", "serve.requests=50"])
    assert res.exit_code == 0, res.output
    assert "ampere" in res.output and "assumed" in res.output and "profiled operators" in res.output


def test_attention_kernel_reads_at_its_own_efficiency_after_a_ramp_per_layer():
    base = dict(weights_bytes=12.55 * 2**30, kv_kib_per_token=512, params_b=6.74, layers=32, hidden=4096,
                hbm_gbps=2039, tflops=312, memory_efficiency=0.674, compute_efficiency=0.696, overhead_s=0.001)
    plain = StepCost.build(**base)
    kernel = StepCost.build(**base, kv_read_efficiency=0.885, attention_call_s=4.24e-5)
    assert kernel.kv_s_per_token == pytest.approx(plain.kv_s_per_token * 0.674 / 0.885)
    assert kernel.attention_fixed_s == pytest.approx(32 * 4.24e-5)
    for k, context in ((1, 300.0), (30, 90_000.0)):
        one, _ = kernel.iteration_s(k, context)
        assert kernel.run_s(k, context, 1) == pytest.approx(one)  # the closed form carries the ramp too
        assert one == pytest.approx(plain.iteration_s(k, context)[0] + kernel.attention_fixed_s
                                    - (plain.kv_s_per_token - kernel.kv_s_per_token) * context)


def test_attention_fit_reproduces_the_shipped_ampere_values():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fit_attention", os.path.join(ROOT, "benchmarks",
                                                                                 "fit_attention_kernels.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.fit()
    assert (out["kv_read_efficiency"], out["attention_call_s"]) == pytest.approx(ATTENTION["ampere"][:2], rel=1e-3)
    assert out["batched_median_error"] < 0.06


def test_vidur_reference_workload_within_its_targets():
    """Vidur's 10,000 requests at 1, 2 and 3 requests/s (benchmarks/vidur_compare.py, about 3 s): throughput, TTFT p50
    and p99, TPOT p50 and p99 within 15% of Vidur's attention-refitted runs, the saturating rate within 10%."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "vidur_compare.py"), "--json"],
                         capture_output=True, text=True, check=True, cwd=os.path.join(ROOT, "benchmarks"))
    checks = json.loads(out.stdout)["targets"]
    assert len(checks) == 16
    assert [c for c in checks if not c["met"]] == []


def test_shipped_profiles_are_found_for_their_card_and_geometry():
    from sim.config.operator_profiles import profile_for

    assert profile_for("a100_80gb_sxm", 32, 4096, 128.0).endswith("llama3_8b_mlp_ops.csv")
    assert profile_for("a100_80gb_sxm", 32, 4096, 128.0, tensor_parallel=4) is not None
    assert profile_for("a100_80gb_sxm", 32, 4096, 512.0, tensor_parallel=2) is None  # Llama-2-7B: TP 1 only
    assert profile_for("rtx4090", 32, 4096, 128.0) is None and profile_for("a100_80gb_sxm", 40, 5120, 160.0) is None
