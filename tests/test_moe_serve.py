"""Decode step-time mechanism and single-stream MoE serving on small synthetic engines (issue 3, in progress:
the mechanism is tested here; its calibration to the Strata tables is not done yet)."""

import numpy as np
import pytest
from conftest import tiny_scenario

from sim.moe_serve import serve, serve_metrics, setup_engine
from sim.scenario import set_dotted, validate
from sim.stepcost import StepParams, expected_tokens_per_step, step_times, tokens_per_step

P = StepParams(dense_s=4.8e-3, gpu_expert_s=2e-6, cpu_expert_s=20e-6, pcie_latency_s=50e-6, graph_break_s=2e-3,
               host_s=0.0, link_gbps=13.9, expert_bytes=1.382e6)
GPU_LAYER = 4.8e-3 / 48 + 40 * 2e-6  # 180 us of GPU work per layer with 40 resident experts


def one_step(resident, missed, layers=48):
    return step_times(np.full((1, layers), resident), np.full((1, layers), missed), P)


def test_fully_resident_step_costs_compute_only():
    t = one_step(resident=40, missed=0)
    assert t.total_s[0] == pytest.approx(48 * GPU_LAYER)
    assert t.stall_s[0] == 0 and t.break_s[0] == 0 and t.pcie_reads[0] == 0


def test_misses_within_the_cpu_window_cost_nothing():
    assert int(GPU_LAYER / 20e-6 + 1e-9) == 9  # the CPU finishes 9 missed experts while the GPU works
    t = one_step(resident=40, missed=9)
    assert t.pcie_reads[0] == 0 and t.total_s[0] == pytest.approx(one_step(40, 0).total_s[0])


def test_first_pcie_read_costs_a_graph_break_then_a_plateau_then_transfer_bound():
    base = one_step(40, 0).total_s[0]
    one = step_times(np.full((1, 48), 40), np.array([[10] + [0] * 47]), P)  # one read in one layer
    many = one_step(40, 10)  # one read in every layer, hidden under compute
    heavy = one_step(40, 40)  # 31 reads per layer: 3.1 ms per layer, far beyond the 180 us window
    assert one.total_s[0] - base == pytest.approx(2e-3)  # the cliff: the break; the transfer hides under compute
    assert many.total_s[0] - one.total_s[0] < 0.1 * (one.total_s[0] - base)  # the plateau
    assert heavy.stall_s[0] > 10 * heavy.break_s[0]  # transfer-dominated: the second cliff
    reads = 40 - int(GPU_LAYER / 20e-6 + 1e-9)
    assert heavy.stall_s[0] == pytest.approx(48 * (50e-6 + reads * 1.382e6 / 13.9e9 - GPU_LAYER))


def test_tokens_per_step_follow_the_acceptance():
    made = tokens_per_step(4, 0.64, 200000, np.random.default_rng(0))
    assert made.min() == 1 and made.max() == 5
    assert made.mean() == pytest.approx(expected_tokens_per_step(4, 0.64), rel=0.01)
    assert (tokens_per_step(0, 0.9, 10, np.random.default_rng(0)) == 1).all()


def moe_scenario(**over):
    raw = tiny_scenario()
    raw["gpus"]["big"] = {"vram_gib": 16, "pcie_max_gen": 5}
    raw["models"]["moe"] = {"weights_gib": 8, "moe": {
        "layers": 8, "experts_per_layer": 64, "top_k": 4, "expert_mib": 1.0,
        "routing": {"exponent": 1.1}, "draft": {"tokens": 2, "acceptance": 0.6, "head_mib": 100}}}
    raw["machines"]["server"] = {"gpus": {"g0": {"type": "big", "slot_gen": 3, "reserved_gib": 15.5}}, "engine": {
        "model": "moe", "gpu": "g0", "overhead_gib": 0.0, "cache_reserve_mib": 100, "prefill_tok_s": 500,
        "step": {"dense_s": 1e-3, "gpu_expert_s": 2e-6, "cpu_expert_s": 30e-6, "pcie_latency_s": 50e-6,
                 "graph_break_s": 1e-3},
        "power": {"idle_w": 30, "busy_w": 400, "stalled_w": 200}}}
    raw["serve"] = {"machine": "server", "requests": 20, "output_tokens_min": 50, "output_tokens_max": 80}
    for path, value in over.items():
        set_dotted(raw, path.replace("__", "."), value, "test")
    return validate(raw, "test")


def test_engine_sizes_its_cache_from_free_vram():
    eng = setup_engine(moe_scenario(), "server")
    assert eng.free_gib == pytest.approx(0.5)
    assert eng.slots == 512 - 100 - 100  # (free MiB - cache reserve - draft head) / 1 MiB slots
    assert eng.coverage == pytest.approx(312 / 512)
    assert eng.params.link_gbps == pytest.approx(15.754 * 0.84, rel=1e-3)  # Gen3 x16 at the default efficiency


def test_served_hit_rate_matches_the_cached_mass_and_telemetry_adds_up():
    from sim.expert_cache import static_hit_rate

    eng, recs = serve(moe_scenario(), np.random.default_rng(0))
    m = serve_metrics(eng, recs)
    assert m["expert_hit_rate"] == pytest.approx(static_hit_rate(eng.resident, eng.popularity), abs=0.02)
    assert all(50 <= r.output_tokens <= 82 for r in recs)
    assert m["decode_tok_s"] == pytest.approx(sum(r.output_tokens for r in recs) / sum(r.decode_s for r in recs))
    assert 0.99 < m["gpu_busy_share"] <= 1.0  # no host time configured: the GPU is busy or stalled throughout
    assert m["energy_j_per_token"] > 0


def test_less_vram_means_more_spill_and_slower_decode():
    roomy = serve_metrics(*serve(moe_scenario(), np.random.default_rng(0)))
    tight = serve_metrics(*serve(moe_scenario(machines__server__gpus__g0__reserved_gib=15.75),
                                 np.random.default_rng(0)))
    assert tight["expert_slots"] < roomy["expert_slots"]
    assert tight["expert_hit_rate"] < roomy["expert_hit_rate"]
    assert tight["pcie_spill_share"] >= roomy["pcie_spill_share"]
    assert tight["decode_tok_s"] < roomy["decode_tok_s"]


def test_serving_is_deterministic_per_seed():
    a = serve_metrics(*serve(moe_scenario(), np.random.default_rng(3)))
    b = serve_metrics(*serve(moe_scenario(), np.random.default_rng(3)))
    assert a == b


def test_lru_policy_via_che_and_profile_from_another_workload():
    static = serve_metrics(*serve(moe_scenario(), np.random.default_rng(0)))
    lru = serve_metrics(*serve(moe_scenario(machines__server__engine__policy="lru"), np.random.default_rng(0)))
    other = serve_metrics(*serve(moe_scenario(machines__server__engine__profile_seed=7), np.random.default_rng(0)))
    assert lru["expert_hit_rate"] < static["expert_hit_rate"]  # LRU keeps some cold experts a static profile skips
    assert other["expert_hit_rate"] < static["expert_hit_rate"] - 0.1
