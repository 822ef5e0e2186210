"""MoE routing sampler and expert caches against their analytic companions."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.moe.expert_cache import (
    auto_slots,
    che_hit_rate,
    lfu_hits,
    lru_hits,
    static_cache,
    static_hit_rate,
)
from sim.moe.routing import (
    AliasTables,
    RequestRouter,
    RoutingLaw,
    inclusion_probabilities,
    layer_popularity,
    lookup_shares,
    zipf_weights,
)


def router(law, seed=0, popularity_seed=0):
    pop = layer_popularity(law, np.random.default_rng(popularity_seed))
    return pop, RequestRouter.start(law, AliasTables.build(pop), np.random.default_rng(seed))


@pytest.mark.parametrize("free_gib, slots", [(8.31, 5784), (26.01, 19530)])
def test_auto_slots_reproduce_the_engine_log(free_gib, slots):
    """strata_gen3_5090.csv: 8.31 GiB free -> 5784 slots; 26.01 GiB free -> 19530 slots (700 + 184 MiB reserved).
    The slot size 1.3183 MiB is the engine's 7625 MiB cache over 5784 slots (the table rounds it to 1.318)."""
    assert auto_slots(free_gib, 1.3183, 700, 184) == pytest.approx(slots, rel=0.01)


def test_sampler_marginals_follow_the_popularity():
    """Each token routes to top_k distinct experts; an expert's lookup share is its inclusion / top_k (Plackett-Luce
    without replacement), not its routing weight."""
    law = RoutingLaw(layers=6, experts=64, top_k=4, exponent=1.1)
    pop, r = router(law)
    ids = r.next_tokens(20000)
    assert ids.shape == (20000, 6, 4)
    srt = np.sort(ids, axis=2)
    assert (srt[:, :, 1:] != srt[:, :, :-1]).all()
    freq = np.bincount(ids.ravel(), minlength=6 * 64).reshape(6, 64) / (20000 * 4)
    assert np.abs(freq - lookup_shares(pop, 4)).max() < 0.006
    assert freq.max() <= 0.25 + 0.005 and pop.max() > 0.25  # no expert above 1/top_k of the lookups
    assert (ids // 64 == np.arange(6)[None, :, None]).all()  # each layer routes to its own experts


def test_uniform_law_is_a_control():
    assert np.allclose(zipf_weights(16, 0.0), 1 / 16)


@pytest.mark.parametrize("locality", [0.0, 0.5])
def test_static_cache_hit_rate_equals_cached_mass(locality):
    law = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.15, locality=locality)
    pop, r = router(law)
    mask = static_cache(pop, slots=8 * 30)
    hits = mask[r.next_tokens(20000)]
    assert hits.mean() == pytest.approx(static_hit_rate(mask, lookup_shares(pop, 4)), abs=0.01)


def test_measured_coverage_and_hit_rate_fix_the_zipf_exponent():
    """23.5% coverage gives an 86.5% hit rate (strata_gen3_5090.csv) for a Zipf exponent near 1.28 over 512 experts
    routed top-10 without replacement (1.15 when lookups were drawn with replacement)."""
    law = RoutingLaw(layers=48, experts=512, top_k=10, exponent=1.28)
    shares = lookup_shares(layer_popularity(law, np.random.default_rng(0)), 10)
    assert static_hit_rate(static_cache(shares, 5784), shares) == pytest.approx(0.865, abs=0.005)


def test_profile_from_another_workload_hits_less():
    law = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.15)
    served = layer_popularity(law, np.random.default_rng(0))
    other = layer_popularity(law, np.random.default_rng(1))
    assert static_hit_rate(static_cache(other, 240), served) < static_hit_rate(static_cache(served, 240), served) - 0.2


def test_lru_follows_che_under_independent_references():
    """Without reuse a token's references are independent of the last token's: Che over the per-token inclusion
    probabilities (in discrete time) against exact LRU, one lookup at a time."""
    from sim.moe.expert_cache import che_reuse_hit_rate

    law = RoutingLaw(layers=4, experts=256, top_k=2, exponent=0.9)
    pop, r = router(law)
    ids = r.next_tokens(60000)
    pi = inclusion_probabilities(pop, 2).ravel()
    for capacity in (64, 256):
        sampled = lru_hits(ids, capacity)[1000:].mean()  # after warm-up
        assert sampled == pytest.approx(che_reuse_hit_rate(pi, capacity, 0.0), abs=0.01)
        assert sampled == pytest.approx(che_hit_rate(pi, capacity), abs=0.01)  # continuous time: close


def test_locality_helps_lru_not_static():
    base = RoutingLaw(layers=4, experts=256, top_k=2, exponent=0.9)
    local = RoutingLaw(layers=4, experts=256, top_k=2, exponent=0.9, locality=0.5)
    _, r0 = router(base)
    _, r1 = router(local)
    a, b = r0.next_tokens(30000), r1.next_tokens(30000)
    assert lru_hits(b, 64).mean() > lru_hits(a, 64).mean() + 0.1


def test_locality_continues_across_batches():
    law = RoutingLaw(layers=2, experts=1000, top_k=1, exponent=0.0, locality=0.9)
    _, r = router(law)
    one_batch = r.next_tokens(3000)
    assert (one_batch[1:] == one_batch[:-1]).mean() == pytest.approx(0.9, abs=0.02)
    token_by_token = np.concatenate([r.next_tokens(1) for _ in range(3000)])
    assert (token_by_token[1:] == token_by_token[:-1]).mean() == pytest.approx(0.9, abs=0.02)


def test_drift_gives_each_request_its_own_hot_set():
    law = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.15, drift_weight=0.3, drift_hot_experts=8)
    pop = layer_popularity(law, np.random.default_rng(0))
    tables = AliasTables.build(pop)
    mask = static_cache(pop, 8 * 30)
    routers = [RequestRouter.start(law, tables, np.random.default_rng(s)) for s in range(30)]
    rates = [mask[r.next_tokens(2000)].mean() for r in routers]
    expected = np.mean([static_hit_rate(mask, lookup_shares(r.own_law(), 4)) for r in routers])  # its own law
    assert np.mean(rates) == pytest.approx(expected, abs=0.02)
    plain = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.15)
    noise = [mask[RequestRouter.start(plain, tables, np.random.default_rng(s)).next_tokens(2000)].mean()
             for s in range(30)]
    assert np.std(rates) > 3 * np.std(noise)  # requests differ from each other, beyond sampling noise


def test_lfu_keeps_the_hot_set_under_a_stationary_law():
    law = RoutingLaw(layers=2, experts=128, top_k=2, exponent=1.2)
    pop, r = router(law)
    ids = r.next_tokens(20000)
    lfu = lfu_hits(ids, 32)[5000:].mean()
    shares = lookup_shares(pop, 2)
    static = static_hit_rate(static_cache(shares, 32), shares)
    assert lfu == pytest.approx(static, abs=0.03)
    assert lfu > lru_hits(ids, 32)[5000:].mean()


def test_drift_concentration_spreads_requests_around_the_mean_weight():
    fixed = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.15, drift_weight=0.2, drift_hot_experts=8)
    spread = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.15, drift_weight=0.2, drift_hot_experts=8,
                        drift_concentration=2.0)
    pop = layer_popularity(fixed, np.random.default_rng(0))
    tables = AliasTables.build(pop)
    weights = [RequestRouter.start(spread, tables, np.random.default_rng(s)).drift_weight for s in range(400)]
    assert np.mean(weights) == pytest.approx(0.2, abs=0.035) and np.std(weights) > 0.15  # 3 standard errors
    assert RequestRouter.start(fixed, tables, np.random.default_rng(0)).drift_weight == 0.2
    mask = static_cache(pop, 8 * 30)

    def spread_of(law):
        return np.std([mask[RequestRouter.start(law, tables, np.random.default_rng(s)).next_tokens(1000)].mean()
                       for s in range(40)])

    assert spread_of(spread) > 2 * spread_of(fixed)


def test_a_skewed_request_samples_its_own_law():
    from sim.moe.routing import request_popularity

    law = RoutingLaw(layers=4, experts=64, top_k=4, exponent=1.0, exponent_spread=0.3)
    pop = layer_popularity(law, np.random.default_rng(0))
    r = RequestRouter(law, AliasTables.build(pop), np.random.default_rng(1), skew=1.4, popularity=pop)
    freq = np.bincount(r.next_tokens(30000).ravel(), minlength=4 * 64).reshape(4, 64) / (30000 * 4)
    own = request_popularity(pop, 1.4)
    assert np.abs(freq - lookup_shares(own, 4)).max() < 0.006
    ranks = np.argsort(-pop[0])  # under Zipf the request's law is Zipf with exponent 1.0 * 1.4
    assert own[0, ranks] == pytest.approx(zipf_weights(64, 1.4), rel=1e-9)


def test_skew_spread_spreads_request_hit_rates_both_ways():
    law = RoutingLaw(layers=8, experts=128, top_k=4, exponent=1.1, exponent_spread=0.15)
    pop = layer_popularity(law, np.random.default_rng(0))
    mask = static_cache(pop, 8 * 128 // 4)
    base = static_hit_rate(mask, pop)
    rng, tables = np.random.default_rng(2), AliasTables.build(pop)
    from sim.moe.routing import request_popularity

    skews = [RequestRouter.start(law, tables, rng, pop).skew for _ in range(40)]
    rates = [static_hit_rate(mask, lookup_shares(request_popularity(pop, g), 4)) for g in skews]
    assert min(rates) < base - 0.02 and max(rates) > base + 0.02


@given(st.integers(1, 6), st.integers(2, 40), st.integers(0, 300), st.lists(st.integers(0, 80), max_size=3),
       st.one_of(st.none(), st.integers(0, 200)), st.integers(0, 1000))
def test_tier_placement_is_hottest_first_and_fills_each_tier(layers, experts, slots, peer_slots, host_slots, seed):
    from sim.moe.expert_cache import home_tiers

    profile = np.random.default_rng(seed).random((layers, experts))
    total = layers * experts
    slots = min(slots, total)
    tier = home_tiers(profile, slots, peer_slots, host_slots)
    order = np.argsort(-profile.ravel(), kind="stable")
    ranked = tier[order][slots:]  # beyond the VRAM cache, tiers never get hotter down the ranking
    assert (np.diff(ranked.astype(int)) >= 0).all()
    counts = np.bincount(ranked, minlength=len(peer_slots) + 2)
    left = total - slots
    for i, n in enumerate(peer_slots):
        assert counts[i] == min(n, max(left, 0))
        left -= counts[i]
    if host_slots is not None:
        assert counts[len(peer_slots)] == min(host_slots, left) and counts[-1] == left - counts[len(peer_slots)]
    else:
        assert counts[-1] == 0
