"""Unified-memory machines (GB10, Strix Halo, Apple M) as engine hosts, and llama-batched-bench's B sequences.

Scenarios are written from catalog names and a model's config.json only; every expectation is a property of the
mechanism (what the GPU may allocate of the pool, how a batched step's time grows), not a fitted number."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.unified import gpu_memory_gib, platform_rule, pool_gib
from sim.core.errors import ScenarioError
from sim.llamacpp.batched import n_kv_required, run_batched
from sim.llamacpp.bench import run_bench
from sim.llamacpp.ledger import CompiledLedgers, Ledger
from sim.llamacpp.machine import MachineSpec, build_scenario, scenario_dict

QWEN3_30B = "calibration/models/qwen3-30b-a3b.json"
QWEN25_7B = "calibration/models/qwen2.5-7b.json"


def _scenario(gpu: str, host: str, model: str, quant: str, ram: float | None = None, gpu_gib: float | None = None,
              **settings):
    spec = MachineSpec(gpu=gpu, host=host, host_fields={"ram_gib": ram} if ram else {})
    raw = scenario_dict(spec, model, quant, {"n_gpu_layers": 99, "flash_attn": True} | settings)
    if gpu_gib is not None:
        raw["machines"]["box"]["unified_memory_gib"] = gpu_gib
    return build_scenario(raw, "t.yaml")


def test_a_catalog_unified_chip_hosts_an_engine_without_a_slot():
    scn = _scenario("gb10", "grace_gb10", QWEN3_30B, "Q4_K_M", ram=128)
    m = scn.machines["box"]
    assert m.kind == "unified" and m.gpus["gpu0"].slot_gen is None
    assert "machines.box.kind" in scn._defaults
    rows = run_bench(scn, "box", n_prompt=[512], n_gen=[128], n_depth=[0])
    assert all(not r.error and r.tok_s > 0 for r in rows)


def test_the_gpu_share_of_the_pool_follows_each_platform():
    spark = _scenario("gb10", "grace_gb10", QWEN3_30B, "Q4_K_M", ram=128)
    assert pool_gib(spark, spark.machines["box"]) == 128
    assert gpu_memory_gib(spark, spark.machines["box"]) == pytest.approx(128 * 119.7 / 128 - 2.0)
    strix = _scenario("radeon_8060s", "ryzen_ai_max_395", QWEN3_30B, "Q4_K_M", ram=128)
    assert gpu_memory_gib(strix, strix.machines["box"]) == pytest.approx(0.5 + 0.5 * 127.5)  # carve-out + GTT
    raised = _scenario("radeon_8060s", "ryzen_ai_max_395", QWEN3_30B, "Q4_K_M", ram=128, gpu_gib=120)
    assert gpu_memory_gib(raised, raised.machines["box"]) == 120
    small, big = platform_rule("apple", "macos", 32)[0], platform_rule("apple", "macos", 64)[0]
    assert small == pytest.approx(32 * 2 / 3) and big == pytest.approx(48)


def test_a_model_beyond_the_gpu_share_does_not_load_until_the_share_is_raised():
    """Qwen3-235B at Q3_K_M (about 100 GiB) on a 128 GB Strix Halo: amdgpu's default GTT (half) cannot hold it."""
    model = "calibration/models/qwen3-235b-a22b.json"
    default = _scenario("radeon_8060s", "ryzen_ai_max_395", model, "Q3_K_M", ram=128, backend="vulkan")
    assert "cannot load" in run_bench(default, "box", n_prompt=[0], n_gen=[32], n_depth=[0])[0].error
    raised = _scenario("radeon_8060s", "ryzen_ai_max_395", model, "Q3_K_M", ram=128, gpu_gib=124, backend="vulkan")
    assert not run_bench(raised, "box", n_prompt=[0], n_gen=[32], n_depth=[0])[0].error


def test_a_discrete_card_still_needs_its_slot():
    raw = scenario_dict(MachineSpec(gpu="rtx3090", host="ryzen5_5600x"), QWEN25_7B, "Q4_K_M", {"n_gpu_layers": 99})
    raw["machines"]["box"]["gpus"]["gpu0"]["slot_gen"] = None
    with pytest.raises(ScenarioError, match="gpus.gpu0.slot_gen"):
        build_scenario(raw, "t.yaml")


def test_a_unified_chip_in_a_machine_declared_discrete_is_refused():
    raw = scenario_dict(MachineSpec(gpu="gb10", host="grace_gb10"), QWEN25_7B, "Q4_K_M", {"n_gpu_layers": 99})
    raw["machines"]["box"]["kind"] = "discrete"
    with pytest.raises(ScenarioError, match="machines.box.kind"):
        build_scenario(raw, "t.yaml")


def _batched(model: str, quant: str, pp: list[int], pl: list[int], hbm: float | None = None):
    scn = _scenario("gb10", "grace_gb10", model, quant, ram=128, ctx_size=131072, batch_size=2048, ubatch_size=2048,
                    mmap=False)
    if hbm is not None:
        scn.gpus["gb10"] = scn.gpus["gb10"].model_copy(update={"hbm_gbps": hbm})
    return run_batched(scn, "box", scn.machines["box"].engine.llamacpp, pp, [32], pl)


def test_batched_bench_aggregate_decode_grows_with_b_then_flattens_and_falls_with_pp():
    rows = _batched(QWEN25_7B, "Q8_0", [512, 8192], [1, 2, 4, 8])
    s_tg = {(r.pp, r.b): r.s_tg_tok_s for r in rows}
    for pp in (512, 8192):
        rates = [s_tg[(pp, b)] for b in (1, 2, 4, 8)]
        assert rates == sorted(rates)
        gains = [b / a for a, b in zip(rates, rates[1:], strict=False)]
        assert gains[0] > gains[-1] and gains[-1] < 2.0  # weights shared by more sequences, then caches dominate
    assert all(s_tg[(8192, b)] < s_tg[(512, b)] for b in (1, 2, 4, 8))  # longer prompts: more cache per step
    assert all(r.n_kv == r.b * (r.pp + r.tg) and math.isclose(r.t_s, r.t_pp_s + r.t_tg_s) for r in rows)


def test_batched_bench_skips_a_test_beyond_its_cells_and_counts_shared_prompts():
    assert n_kv_required(512, 32, 4, pp_shared=False) == 4 * 544
    assert n_kv_required(512, 32, 4, pp_shared=True) == 512 + 4 * 32
    rows = _batched(QWEN25_7B, "Q8_0", [8192], [4, 8, 16])  # 16 x 8224 > 131072 cells
    assert [r.b for r in rows] == [4, 8]


def test_moe_batched_decode_reads_the_union_of_the_experts_its_tokens_chose():
    """Qwen3-30B-A3B: a second sequence adds most of its own experts' bytes, so B=2 gains far less than a dense
    model's near doubling."""
    moe = {r.b: r.s_tg_tok_s for r in _batched(QWEN3_30B, "Q4_K_M", [512], [1, 2])}
    dense = {r.b: r.s_tg_tok_s for r in _batched(QWEN25_7B, "Q8_0", [512], [1, 2])}
    assert moe[2] / moe[1] < dense[2] / dense[1]
    assert dense[2] / dense[1] > 1.7


@settings(max_examples=8, deadline=None)
@given(st.floats(min_value=100.0, max_value=1000.0))
def test_more_bandwidth_never_slows_a_batched_step(hbm):
    slow = _batched(QWEN25_7B, "Q8_0", [512], [1, 16], hbm=hbm)
    fast = _batched(QWEN25_7B, "Q8_0", [512], [1, 16], hbm=hbm * 1.5)
    for a, b in zip(slow, fast, strict=True):
        assert b.s_tg_tok_s >= a.s_tg_tok_s * (1 - 1e-9) and b.s_pp_tok_s >= a.s_pp_tok_s * (1 - 1e-9)


def test_a_channel_multiplier_scales_the_rate_in_the_ledger_and_its_compiled_form():
    lg = Ledger()
    lg.term("gpu:x", [(1e12, ("eff", 1e12, None, "share"))])
    lg.term("gpu:y", [(2e12, ("eff", 1e12, "rows", "share"))])
    values = {"eff": 0.5, "share": 0.25, "rows": 2.0}
    assert lg.seconds(values) == pytest.approx(1 / (0.5 * 0.25) + 2 * 2.0 / (0.5 * 0.25))
    compiled = CompiledLedgers.of([lg])
    import numpy as np

    vec = np.array([values[n] for n in compiled.names])
    seconds, grad = compiled.seconds_and_gradient(vec)
    assert seconds[0] == pytest.approx(lg.seconds(values))
    by_name = dict(zip(compiled.names, grad[0], strict=True))
    assert by_name["share"] == pytest.approx(-seconds[0])  # d seconds / d log(share)


def test_the_routing_law_of_a_batched_step_repeats_the_fitted_routing_file():
    from sim.config.yaml_io import read_yaml
    from sim.llamacpp.routing import DRIFT_WEIGHT, MEASURED_EXPONENT, batch_inclusion

    doc = read_yaml("calibration/routing.yaml")["parameters"]
    assert MEASURED_EXPONENT == {"qwen3-30b-a3b": doc["exponent.Qwen3-30B-A3B"]["value"],
                                 "gpt-oss-20b": doc["exponent.gpt-oss-20b"]["value"]}
    assert DRIFT_WEIGHT == doc["drift_weight"]["value"]
    pi = batch_inclusion(128, 8, 1.4, DRIFT_WEIGHT)
    assert sum(pi) == pytest.approx(8.0, rel=1e-6) and max(pi) <= 1.0
    union = [sum(1 - (1 - p) ** b for p in pi) for b in (1, 8, 32)]
    uniform = [128 * (1 - (1 - 8 / 128) ** b) for b in (1, 8, 32)]
    assert union[0] == pytest.approx(8.0) and all(u < v for u, v in zip(union[1:], uniform[1:], strict=True))


def _advise(*args):
    from click.testing import CliRunner

    from sim.cli import main

    return CliRunner().invoke(main, ["advise", *args], catch_exceptions=False)


def test_advise_on_a_64_gb_mac_says_how_to_give_a_120b_model_the_gpu_memory_it_needs():
    r = _advise("--gpu", "m2_max", "--host", "apple_m2_max", "--ram-gib", "64", "--model",
                "calibration/models/gpt-oss-120b.json", "--quant", "MXFP4_MOE", "--model-gib", "59.02", "--top", "1")
    assert r.exit_code == 0, r.output
    assert "macos" in r.output and "the GPU may allocate 48.0 GiB" in r.output
    assert "sudo sysctl iogpu.wired_limit_mb=" in r.output


def test_advise_on_a_spark_searches_only_what_linux_gives_its_gpu():
    r = _advise("--gpu", "gb10", "--host", "grace_gb10", "--ram-gib", "128", "--model",
                "calibration/models/qwen3-30b-a3b.json", "--quant", "Q4_K_M", "--top", "1", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["unified"]["default_gib"] == pytest.approx(117.7) and out["unified"]["raised"] is False
    assert out["best"]["tg"][0]["gpu_limit"] == ""


def test_gpu_gib_is_only_for_a_unified_chip():
    r = _advise("--gpu", "rtx3090", "--host", "ryzen5_5600x", "--model", QWEN25_7B, "--quant", "Q4_K_M",
                "--gpu-gib", "20")
    assert r.exit_code == 2 and "--gpu-gib" in r.output and "unified-memory chip" in r.output


def test_a_hybrid_models_pool_sets_aside_each_sequences_linear_attention_state():
    """Qwen3.5-27B keeps 48 Gated DeltaNet layers' state per sequence: the batching engine's KV pool holds fewer
    tokens the more sequences it may batch, and a decode step reads and writes the state."""
    from sim.batching.cost import StepCost
    from sim.batching.pool import kv_pool
    from sim.config.engine import Engine
    from sim.modelfiles import dense_fields, read_model_file

    fields = dense_fields(read_model_file("calibration/models/qwen3.5-27b.json", "BF16"))["dense"]
    state = fields["state_kib_per_sequence"]
    assert state == pytest.approx(48 * 3.117 * 1024, rel=1e-3)
    assert "state_kib_per_sequence" not in dense_fields(read_model_file(QWEN25_7B, "BF16"))["dense"]

    def tokens(seqs: int, state_kib: float) -> int:
        e = Engine(model="m", gpu="g", parallel=seqs, runtime_gib=1.0)
        return kv_pool("e", e, vram_gib=117.7, tenants_gib=0, weights_gib=50.1, kv_kib_per_token=64.0,
                       state_kib_per_sequence=state_kib).tokens

    assert tokens(64, 0.0) == tokens(1, 0.0)
    gap = (tokens(1, state) - tokens(64, state)) * 64.0
    assert gap == pytest.approx(63 * state, rel=1e-3)  # each extra sequence's state, in tokens of KV
    with pytest.raises(Exception, match="per-sequence states"):
        tokens(256, state * 4)
    kw = dict(weights_bytes=50e9, kv_kib_per_token=64.0, params_b=26.9, layers=64, hidden=5120, hbm_gbps=273,
              tflops=62.5, memory_efficiency=0.8, compute_efficiency=0.5, overhead_s=1e-3)
    plain, hybrid = StepCost.build(**kw), StepCost.build(**kw, state_kib_per_sequence=state)
    assert hybrid.run_s(8, 1000, 10) - plain.run_s(8, 1000, 10) == pytest.approx(
        10 * 8 * 2 * state * 1024 / (0.8 * 273e9), rel=1e-9)


def test_the_moe_engine_and_the_loaders_see_the_gpu_share_of_a_unified_pool():
    import sim
    from sim.lab.resources import memory_targets

    sets = ["machines.home_box.gpus.gpu0.type=gb10", "machines.home_box.kind=unified",
            "machines.home_box.host.type=grace_gb10", "machines.home_box.host.ram_gib=128",
            "machines.home_box.gpus.gpu0.reserved_gib=0", "machines.home_box.engine.power.busy_w=140"]
    run = sim.load("scenarios/rtx4090_qwen3_30b.yaml", sets)
    scn = run.config
    (target,) = memory_targets(scn, scn.machines["home_box"])
    assert target.link_gbps is None and target.capacity_bytes == pytest.approx(117.7 * 2**30)
    from sim.moe.setup import setup_engine

    eng = setup_engine(scn, "home_box")
    assert eng.vram_gib == pytest.approx(117.7) and eng.coverage == 1.0  # every expert fits: no PCIe spill


@pytest.mark.parametrize("name", ["dgx_spark_gpt_oss_120b", "strix_halo_qwen3_30b", "dgx_spark_vllm_qwen3_6"])
def test_the_shipped_unified_scenarios_run_from_catalog_names(name):
    from click.testing import CliRunner

    from sim.cli import main

    r = CliRunner().invoke(main, ["run", f"scenarios/{name}.yaml", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    metrics = json.loads(r.output)["metrics"]
    assert metrics  # a bench table or a served workload, every figure finite
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))


def test_the_readme_batched_bench_line_runs():
    from click.testing import CliRunner

    from sim.cli import main

    line = "llama-batched-bench -m m.gguf -c 65536 -b 2048 -ub 2048 -npp 512,4096 -ntg 32 -npl 1,8,32"
    r = CliRunner().invoke(main, ["llama", line, "--gpu", "gb10", "--host", "grace_gb10", "--model", QWEN3_30B,
                                  "--quant", "Q8_0", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [(x["pp"], x["b"]) for x in rows] == [(512, 1), (512, 8), (512, 32), (4096, 1), (4096, 8)]
    assert all(x["s_tg_tok_s"] > 0 for x in rows)


def test_advise_ranks_several_quants_of_a_config_together_and_names_each_file():
    r = _advise("--gpu", "gb10", "--host", "grace_gb10", "--ram-gib", "128", "--model", QWEN25_7B,
                "--quant", "Q4_K_M,Q8_0", "--ubatch", "512", "--kv", "f16", "--top", "2", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    tg = out["best"]["tg"]
    assert {c["quant"] for c in tg} <= {"Q4_K_M", "Q8_0"} and tg[0]["quant"] == "Q4_K_M"  # fewer bytes, faster
    assert [c["tg_tok_s"] for c in tg] == sorted((c["tg_tok_s"] for c in tg), reverse=True)
    text = _advise("--gpu", "gb10", "--host", "grace_gb10", "--model", QWEN25_7B, "--quant", "Q4_K_M,Q8_0",
                   "--ubatch", "512", "--kv", "f16", "--top", "1").output
    assert "qwen2.5-7b-Q4_K_M.gguf" in text and "quality is not modelled" in text
    bad = _advise("--gpu", "gb10", "--host", "grace_gb10", "--model", QWEN25_7B, "--quant", "Q4_K_M,Q8_0",
                  "--anchor", "n_cpu_moe=0:tg=30")
    assert bad.exit_code == 2 and "--anchor" in bad.output
