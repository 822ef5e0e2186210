"""Decode step-time mechanism and single-stream MoE serving on small synthetic engines (issue 3, in progress:
the mechanism is tested here; its calibration to the Strata tables is not done yet)."""

import numpy as np
import pytest
from conftest import tiny_scenario

from sim.config.load import validate
from sim.config.paths import set_dotted
from sim.moe.serve import MoeEngine, serve_metrics
from sim.moe.setup import setup_engine
from sim.moe.stepcost import StepParams, expected_tokens_per_step, step_times, tokens_per_step

P = StepParams(dense_s=4.8e-3, gpu_expert_s=2e-6, cpu_expert_s=20e-6, pcie_latency_s=50e-6, graph_break_s=4e-3,
               host_s=0.0, link_gbps=13.9, expert_bytes=1.382e6, cpu_budget_s=80e-6)
GPU_LAYER = 4.8e-3 / 48 + 40 * 2e-6  # 180 us of GPU work per layer with 40 resident experts
EXPERTS = 40 * 2e-6  # 80 us of it on the resident experts: what the host's paths overlap
READ = 50e-6 + 1.382e6 / 13.9e9  # one expert over PCIe: 149 us


def one_step(resident, missed, layers=48):
    return step_times(np.full((1, layers), resident), np.full((1, layers), missed), P)


def test_fully_resident_step_costs_compute_only():
    t = one_step(resident=40, missed=0)
    assert t.total_s[0] == pytest.approx(48 * GPU_LAYER)
    assert t.stall_s[0] == 0 and t.eager_s[0] == 0 and t.pcie_reads[0] == 0


def test_misses_the_cpu_finishes_within_the_expert_work_cost_nothing_beyond_it_they_stall():
    assert int(P.cpu_budget_s / 20e-6 + 1e-9) == 4  # the CPU takes 4 missed experts per layer: 80 us
    t = one_step(resident=40, missed=4)
    assert t.pcie_reads[0] == 0 and t.cpu_experts[0] == 48 * 4
    assert t.total_s[0] == pytest.approx(one_step(40, 0).total_s[0])  # hidden behind the 80 us of expert work
    fewer = one_step(resident=20, missed=4)  # 40 us of expert work: the CPU's 80 us outlast it by 40 us a layer
    assert fewer.stall_s[0] == pytest.approx(48 * 40e-6)
    assert fewer.total_s[0] == pytest.approx(one_step(24, 0).total_s[0] - 48 * 4 * 2e-6 + 48 * 40e-6)


def test_first_pcie_read_costs_a_graph_break_then_a_plateau_then_transfer_bound():
    base = one_step(40, 0).total_s[0]
    one = step_times(np.full((1, 48), 40), np.array([[5] + [0] * 47]), P)  # one read in one layer
    many = one_step(40, 5)  # one read in every layer, hidden under the expert work and the eager gaps
    heavy = one_step(40, 40)  # 36 reads per layer: 3.6 ms per layer, far beyond the window
    assert READ < EXPERTS + 4e-3 / 48  # a read hides behind the expert work and the layer's share of the break
    assert one.total_s[0] - base == pytest.approx(4e-3)  # the cliff: the break; the transfer hides
    assert many.total_s[0] - one.total_s[0] < 0.1 * (one.total_s[0] - base)  # the plateau
    assert heavy.stall_s[0] > 10 * heavy.eager_s[0]  # transfer-dominated: the second cliff
    reads = 40 - 4
    # copies start at the routing decision and hide behind the layer's expert work and its share of the break
    assert heavy.stall_s[0] == pytest.approx(48 * (50e-6 + reads * 1.382e6 / 13.9e9 - EXPERTS - 4e-3 / 48))


def test_tokens_per_step_follow_the_acceptance():
    made = tokens_per_step(4, 0.64, 200000, np.random.default_rng(0))
    assert made.min() == 1 and made.max() == 5
    assert made.mean() == pytest.approx(expected_tokens_per_step(4, 0.64), rel=0.01)
    assert (tokens_per_step(0, 0.9, 10, np.random.default_rng(0)) == 1).all()


def serve(scn, rng: np.random.Generator):
    """(engine, requests, timeline) of the MoE engine serving ``scn``'s workload with the random stream ``rng``."""
    run = MoeEngine().serve(scn, rng)
    return run.setup, run.requests, run.timeline


def moe_scenario(**over):
    raw = moe_raw()
    for path, value in over.items():
        set_dotted(raw, path.replace("__", "."), value, "test")
    return validate(raw, "test")


def moe_raw() -> dict:
    """A small MoE engine on a 16 GiB card of which 0.5 GiB is free (raw scenario mapping)."""
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
    return raw


def test_engine_sizes_its_cache_from_free_vram():
    eng = setup_engine(moe_scenario(), "server")
    assert eng.free_gib == pytest.approx(0.5)
    assert eng.expert_slots == 512 - 100 - 100  # (free MiB - cache reserve - draft head) / 1 MiB slots
    assert eng.coverage == pytest.approx(312 / 512)
    assert eng.params.link_gbps == pytest.approx(15.754 * 0.84, rel=1e-3)  # Gen3 x16 at the default efficiency


def test_served_hit_rate_matches_the_cached_mass_and_telemetry_adds_up():
    from sim.moe.expert_cache import static_hit_rate
    from sim.moe.routing import lookup_shares

    eng, recs, _ = serve(moe_scenario(), np.random.default_rng(0))
    m = serve_metrics(eng, recs)
    shares = lookup_shares(eng.popularity, eng.moe.top_k)
    assert m["expert_hit_rate"] == pytest.approx(static_hit_rate(eng.resident, shares), abs=0.02)
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


def test_sticky_eager_mode_costs_at_least_per_step_breaks():
    sticky = serve_metrics(*serve(moe_scenario(), np.random.default_rng(0)))
    per_step = serve_metrics(*serve(moe_scenario(machines__server__engine__step__break_mode="per_step"),
                                    np.random.default_rng(0)))
    assert sticky["eager_share"] >= per_step["eager_share"]
    assert sticky["decode_tok_s"] <= per_step["decode_tok_s"]


def test_sticky_mode_carries_across_step_chunks():
    res = np.full((3, 48), 40)
    first = step_times(res, np.array([[0] * 48, [30] + [0] * 47, [0] * 48]), P)
    assert list(first.eager_s) == [0, 4e-3, 4e-3] and first.eager_after
    later = step_times(res, np.zeros((3, 48)), P, eager=True)
    assert list(later.eager_s) == [4e-3] * 3


def test_count_sampler_has_the_binomial_mean_and_variance():
    from sim.moe.expert_counts import CountSampler

    mean, var = np.array([3.0, 5.5, 0.2, 0.0, 40.0]), np.array([2.0, 3.0, 0.19, 0.0, 39.0])
    x = CountSampler.build(mean, var).sample(200_000, np.random.default_rng(1))
    assert x.mean(axis=0) == pytest.approx(mean, abs=0.03)
    v = x.var(axis=0)
    assert (v >= 0.97 * var - 0.01).all() and (v <= 1.08 * var + 0.01).all()  # N rounded up: a little above


@pytest.mark.parametrize("mode", ["sticky", "per_step"])
def test_tabulated_step_times_equal_the_expressions_bit_for_bit(mode):
    """Integer counts take the table path; the same counts as floats take the expressions: same bits."""
    import dataclasses

    rng = np.random.default_rng(3)
    p = dataclasses.replace(P, break_mode=mode, host_s=1e-4, link_share=0.4)
    resident, missed = rng.integers(0, 50, (3000, 48)), rng.binomial(14, 0.5, (3000, 48)).astype(np.int32)
    for starts in (None, np.array([0, 7, 900, 2999])):
        for eager in (False, True):
            fast = step_times(resident, missed, p, eager, starts=starts)
            slow = step_times(resident.astype(float), missed.astype(float), p, eager, starts=starts)
            for field in ("compute_s", "stall_s", "eager_s", "host_s", "pcie_reads", "cpu_experts"):
                assert np.array_equal(getattr(fast, field), getattr(slow, field)), field
            assert fast.eager_after == slow.eager_after


def test_tokens_per_step_counts_the_leading_accepted_drafts():
    rng = np.random.default_rng(0)
    a = rng.random(5000)
    made = tokens_per_step(4, a, 5000, np.random.default_rng(1))
    accepted = np.random.default_rng(1).random((5000, 4)) < a[:, None]
    assert np.array_equal(made, np.cumprod(accepted, axis=1).sum(axis=1) + 1)


def test_count_sampler_draws_are_the_exact_inverse_cdf():
    """The tabulated fast path gives exactly the searched inverse of every draw."""
    from sim.moe.expert_counts import CountSampler

    mean, var = np.array([3.0, 5.5, 0.2, 0.0, 40.0, 12.0]), np.array([2.0, 3.0, 0.19, 0.0, 39.0, 4.0])
    fast = CountSampler.build(mean, var)
    slow = CountSampler(fast.cdf, fast.width)  # no grid: every draw searched
    assert np.array_equal(fast.sample(50_000, np.random.default_rng(2)), slow.sample(50_000, np.random.default_rng(2)))


def test_step_law_hit_rate_is_the_cached_mass():
    from sim.moe.expert_cache import static_hit_rate
    from sim.moe.expert_counts import draws_per_step, step_law
    from sim.moe.routing import lookup_shares

    eng = setup_engine(moe_scenario(), "server")
    law = step_law(eng.popularity, eng.resident, None, 0.0, draws_per_step(eng.moe.top_k, 3, 0.2))
    shares = lookup_shares(eng.popularity, eng.moe.top_k)
    assert law.hit_rate == pytest.approx(static_hit_rate(eng.resident, shares), rel=1e-9)
    assert law.lookup_shares.sum() == pytest.approx(1.0)
    one = step_law(eng.popularity, eng.resident, None, 0.0, draws_per_step(eng.moe.top_k, 1, 0.0))
    assert (one.resident_mean + one.missed_mean.sum(axis=0)) == pytest.approx(np.full(8, 4.0))  # top_k exactly
    assert (one.resident_var + one.missed_var.sum(axis=0)).max() < 1.0  # negatively correlated: near fixed
    with pytest.raises(TypeError):
        step_law(eng.popularity, eng.resident, None, 0.0, 10.0)  # a number of draws with replacement: gone


@pytest.mark.parametrize("over", [{}, {"machines__server__engine__policy": "lru"},
                                  {"models__moe__moe__routing__locality": 0.35},
                                  {"models__moe__moe__routing__locality": 0.35,
                                   "machines__server__engine__policy": "lru"}])
def test_counts_fidelity_agrees_with_every_lookup(over):
    """The fast path (distinct experts per layer-step sampled from their law) against sampling every lookup, on a
    small engine where overflow is a rare event (the hardest case for the fast path's tails; on the Strata scenario
    the two agree within 2% on decode); with reuse between consecutive tokens too (the counts law's two-state chain
    against the sampler's carried draw streams)."""
    runs = {}
    for fidelity in ("counts", "lookups"):
        scn = moe_scenario(serve__fidelity=fidelity, serve__requests=800, **over)
        runs[fidelity] = serve_metrics(*serve(scn, np.random.default_rng(5)))
    fast, exact = runs["counts"], runs["lookups"]
    assert fast["expert_hit_rate"] == pytest.approx(exact["expert_hit_rate"], abs=0.01)
    assert fast["pcie_spill_share"] == pytest.approx(exact["pcie_spill_share"], rel=0.15, abs=0.002)
    assert fast["decode_tok_s"] == pytest.approx(exact["decode_tok_s"], rel=0.04)
    # rare overflow events (a request here spills in under a third of cases): the tails of the two agree too
    assert fast["requests_spilling_share"] == pytest.approx(exact["requests_spilling_share"], abs=0.06)


def tiered_scenario(**over):
    over = {"machines__server__gpus__g1": {"type": "big", "slot_gen": 3, "reserved_gib": 15.75},
            "machines__server__engine__peers": {"g1": {"slots": 100, "expert_s": 5e-6, "latency_s": 40e-6}},
            "machines__server__engine__host_ram_gib": 0.05, "machines__server__disk": "d0",
            "machines__server__loader": {"s_per_gb": 0.0},
            "disks__d0": {"read_gbps": 2.0, "latency_s": 1e-4}, **over}
    return moe_scenario(**over)


@pytest.mark.parametrize("fidelity", ["counts", "lookups"])
def test_lookups_resolve_to_tiers_peer_host_and_disk(fidelity):
    scn = tiered_scenario(serve__fidelity=fidelity)
    eng, recs, _ = serve(scn, np.random.default_rng(0))
    assert eng.peer_slots == (100,) and eng.host_experts == 51  # 0.05 GiB of RAM in 1 MiB experts
    assert list(np.bincount(eng.tier[~eng.resident], minlength=3)) == [100, 51, 512 - 312 - 100 - 51]
    auto = setup_engine(tiered_scenario(machines__server__engine__peers__g1__slots="auto",
                                        machines__server__gpus__g1__reserved_gib=15.9), "server")
    assert auto.peer_slots == (102,)  # 16 - 15.9 GiB free on the peer in 1 MiB slots
    lookups = sum(r.lookups for r in recs)
    hits, peer, disk = (sum(getattr(r, k) for r in recs) for k in ("vram_hits", "peer_lookups", "disk_lookups"))
    from sim.moe.routing import lookup_shares

    pop = lookup_shares(eng.popularity, eng.moe.top_k).ravel() / eng.moe.layers
    assert hits / lookups == pytest.approx(pop[eng.resident].sum(), abs=0.01)
    assert peer / lookups == pytest.approx(pop[~eng.resident & (eng.tier == 0)].sum(), abs=0.01)
    assert disk / lookups == pytest.approx(pop[~eng.resident & (eng.tier == 2)].sum(), abs=0.005)
    assert sum(r.peer_experts for r in recs) > 0 and sum(r.disk_reads for r in recs) > 0


def test_slower_tiers_cost_more():
    base = serve_metrics(*serve(tiered_scenario(), np.random.default_rng(0)))
    more_ram = serve_metrics(*serve(tiered_scenario(machines__server__engine__host_ram_gib=1.0),
                                    np.random.default_rng(0)))
    slow_peer = serve_metrics(*serve(tiered_scenario(machines__server__engine__peers__g1__latency_s=2e-3),
                                     np.random.default_rng(0)))
    assert more_ram["decode_tok_s"] > base["decode_tok_s"]  # no disk reads
    assert slow_peer["decode_tok_s"] < base["decode_tok_s"]


def test_engine_tiers_are_validated():
    from sim import ScenarioError

    with pytest.raises(ScenarioError, match="peers.g9"):
        moe_scenario(machines__server__engine__peers={"g9": {"expert_s": 1e-6, "latency_s": 0}})
    with pytest.raises(ScenarioError, match="host_ram_gib"):
        moe_scenario(machines__server__engine__host_ram_gib=1.0)


def test_engine_overhead_from_dense_weights_kv_and_runtime():
    from sim import ScenarioError

    scn = moe_scenario(machines__server__engine__overhead_gib=None, models__moe__moe__dense_gib=0.1,
                       models__moe__moe__kv_kib_per_token=64, machines__server__engine__context_tokens=1024,
                       machines__server__engine__runtime_gib=0.05)
    eng = setup_engine(scn, "server")
    assert eng.overhead_gib == pytest.approx(0.1 + 64 * 1024 * 1024 / 2**30 + 0.05)  # 0.0625 GiB of KV
    assert eng.free_gib == pytest.approx(0.5 - 0.2125)
    with pytest.raises(ScenarioError, match="dense_gib"):
        moe_scenario(machines__server__engine__overhead_gib=None)
    with pytest.raises(ScenarioError, match="kv_kib_per_token"):
        moe_scenario(machines__server__engine__overhead_gib=None, models__moe__moe__dense_gib=0.1,
                     machines__server__engine__context_tokens=1024)


def test_step_law_of_a_skewed_request_with_a_hot_set():
    """Hit probability and expected distinct experts against a direct computation of the request's own law."""
    from sim.moe.expert_counts import draws_per_step, step_law
    from sim.moe.routing import inclusion_probabilities, request_popularity

    eng = setup_engine(moe_scenario(), "server")
    hot = np.array([[layer * 64 + e for e in (1, 5, 9)] for layer in range(8)])
    q = 0.8 * request_popularity(eng.popularity, 1.3).ravel()
    q[hot.ravel()] += 0.2 / 3
    law = step_law(request_popularity(eng.popularity, 1.3), eng.resident, hot, 0.2, draws_per_step(4, 3, 0.0))
    pi = inclusion_probabilities(q.reshape(8, 64), 4).ravel()
    assert law.hit_rate == pytest.approx((pi / 4 * eng.resident).sum() / 8, rel=1e-9)
    touch = 1 - (1 - pi) ** 3  # three independent positions, each top_k distinct experts
    assert law.missed_mean[0].sum() == pytest.approx((touch * ~eng.resident).sum(), rel=1e-9)
    assert law.resident_mean.sum() == pytest.approx((touch * eng.resident).sum(), rel=1e-9)


def test_counts_fidelity_agrees_with_every_lookup_across_tiers():
    runs = {}
    for fidelity in ("counts", "lookups"):
        recs = serve(tiered_scenario(serve__fidelity=fidelity, serve__requests=200), np.random.default_rng(4))[1]
        lookups = sum(r.lookups for r in recs)
        runs[fidelity] = (sum(r.output_tokens for r in recs) / sum(r.decode_s for r in recs),
                          sum(r.peer_lookups for r in recs) / lookups, sum(r.disk_lookups for r in recs) / lookups)
    (fast, fast_peer, fast_disk), (exact, exact_peer, exact_disk) = runs["counts"], runs["lookups"]
    assert fast == pytest.approx(exact, rel=0.08)
    assert fast_peer == pytest.approx(exact_peer, abs=0.01) and fast_disk == pytest.approx(exact_disk, abs=0.005)


def test_peer_copies_are_capped_and_negative_slots_rejected():
    from sim import ScenarioError

    eng = setup_engine(tiered_scenario(machines__server__engine__peers__g1__slots=10_000), "server")
    assert eng.peer_slots == (512 - 312,)  # only the experts the VRAM cache does not hold
    with pytest.raises(ScenarioError, match="slots"):
        tiered_scenario(machines__server__engine__peers__g1__slots=-1)
    with pytest.raises(ScenarioError, match="expert_cache"):
        moe_scenario(machines__server__engine__expert_cache=-5)


def test_an_engine_larger_than_its_card_cannot_start():
    from sim import SimulationError

    with pytest.raises(SimulationError, match="does not fit"):
        setup_engine(moe_scenario(machines__server__engine__overhead_gib=1.0), "server")


def test_steps_needed_do_not_depend_on_the_block_size(monkeypatch):
    from sim.moe import decode_batch

    rng = np.random.default_rng(0)
    tokens, acceptance = rng.integers(1, 3000, 4000), rng.random(4000)
    whole = decode_batch.steps_needed(tokens, acceptance, 4, np.random.default_rng(7))
    monkeypatch.setattr(decode_batch, "STEPS_AT_ONCE", 997)
    assert np.array_equal(decode_batch.steps_needed(tokens, acceptance, 4, np.random.default_rng(7)), whole)
    made = tokens_per_step(4, 0.5, 10, np.random.default_rng(0))
    assert made.dtype.kind == "i"


def test_fused_step_times_are_the_sampled_ones_bit_for_bit(monkeypatch):
    """The cache-blocked path draws the same uniforms (two offsets of one PCG64 stream) and leaves the stream where
    sampling whole arrays leaves it, a buffered 32-bit half included."""
    from sim.moe import decode_batch
    from sim.moe.decode_batch import TierSampler, engine_step_law, fusable, fused_step_times
    from sim.moe.expert_counts import draws_per_step

    eng = setup_engine(moe_scenario(), "server")  # 312 of 512 experts cached: misses, some read over PCIe
    lw = TierSampler.build(engine_step_law(eng, eng.popularity, draws_per_step(eng.moe.top_k, 5, 0.0)))
    monkeypatch.setattr(decode_batch, "FUSED_BLOCK_STEPS", 37)  # blocks that do not divide the steps
    steps, starts = 1000, np.array([0, 10, 400, 999])
    a, b = np.random.default_rng(8), np.random.default_rng(8)
    a.integers(0, 5, 3, dtype=np.int32)
    b.integers(0, 5, 3, dtype=np.int32)
    assert fusable(eng, lw, b)
    c = lw.sample(eng, steps, a)
    slow = c.times(eng.params, starts=starts)
    fast, routed = fused_step_times(eng, lw, steps, b, starts)
    for field in ("compute_s", "stall_s", "eager_s", "host_s", "pcie_reads", "cpu_experts"):
        assert np.array_equal(getattr(fast, field), getattr(slow, field)), field
    assert slow.pcie_reads.sum() > 0 and np.array_equal(routed, c.routed)
    assert a.bit_generator.state == b.bit_generator.state
