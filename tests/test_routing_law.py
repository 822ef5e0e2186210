"""Top-k routing without replacement, reuse between consecutive tokens and depth: the sampler against exact
oracles, and the analytic companions (inclusion, union over positions, LRU with reuse) against sampled routes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.moe.expert_cache import (
    che_reuse_hit_probabilities,
    che_reuse_hit_rate,
    lru_cold_hit_rate,
    lru_hits,
    lru_set_hit_counts,
    static_cache,
    static_hit_rate,
)
from sim.moe.expert_counts import StepDraws, draws_per_step, step_law
from sim.moe.routing import (
    AliasTables,
    RequestRouter,
    RoutingLaw,
    consecutive_overlap,
    first_distinct,
    inclusion_probabilities,
    layer_exponents,
    layer_popularity,
    lookup_shares,
    popularity_from_inclusion,
    reuse_from_overlap,
    untouched,
    zipf_weights,
)


def routes(law: RoutingLaw, tokens: int, seed: int = 1, chunk: int | None = None, skew: float = 1.0):
    pop = layer_popularity(law, np.random.default_rng(0))
    r = RequestRouter(law, AliasTables.build(pop), np.random.default_rng(seed), skew=skew, popularity=pop)
    chunk = chunk or tokens
    ids = np.concatenate([r.next_tokens(chunk) for _ in range(tokens // chunk)])
    return pop, r, ids


def gumbel_top_k(q: np.ndarray, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """The exact Plackett-Luce inclusion frequencies: the top-k of log q plus Gumbel noise, n times."""
    keys = np.log(q)[None, :] - np.log(-np.log(rng.random((n, q.size))))
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    return np.bincount(top.ravel(), minlength=q.size) / n


@pytest.mark.parametrize("experts, k, exponent", [(128, 8, 1.0), (32, 4, 1.2), (512, 10, 1.28), (64, 4, 0.0),
                                                  (16, 8, 1.0)])
def test_inclusion_is_the_exponential_race_and_sums_to_top_k(experts, k, exponent):
    q = zipf_weights(experts, exponent)
    pi = inclusion_probabilities(q[None], k)[0]
    assert pi.sum() == pytest.approx(k, rel=1e-9) and (pi <= 1).all() and (np.diff(pi) <= 1e-12).all()
    exact = gumbel_top_k(q, k, 60_000, np.random.default_rng(3))
    assert np.abs(pi - exact).max() < 0.03  # Rosen's approximation of successive sampling
    hot = np.argsort(-q)[: experts // 4]
    assert pi[hot].sum() / k == pytest.approx(exact[hot].sum() / k, abs=0.01)  # a static cache's mass
    assert np.allclose(popularity_from_inclusion(pi[None])[0], q, rtol=1e-6)  # the inverse is exact


def test_fewer_positive_experts_than_top_k_are_all_included():
    q = np.array([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    pi = inclusion_probabilities(q, 3)
    assert list(pi[0]) == [1.0, 1.0, 0.0, 0.0] and pi[1] == pytest.approx([0.75] * 4)


def test_a_lookup_share_never_exceeds_one_over_top_k():
    shares = lookup_shares(zipf_weights(512, 2.5)[None], 10)[0]
    assert shares.max() <= 0.1 + 1e-12 and shares.sum() == pytest.approx(1.0)
    assert zipf_weights(512, 2.5).max() > 0.5  # the law's first choice is far above it


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(4, 64), st.lists(st.floats(0.0, 2.5), min_size=1, max_size=5),
       st.integers(1, 63), st.integers(1, 200), st.integers(0, 10_000))
def test_more_top_k_never_raises_a_static_cache_hit_rate(layers, experts, exponents, k, slots, seed):
    """Metamorphic: at fixed slots, routing more experts per token spreads the lookups, so the hottest-first cache
    of the served profile never hits more (per-layer laws random and unequal)."""
    k = min(k, experts - 1)
    rng = np.random.default_rng(seed)
    q = np.array([zipf_weights(experts, exponents[i % len(exponents)])[rng.permutation(experts)]
                  for i in range(layers)])
    q = q * rng.uniform(0.5, 1.5, q.shape)
    q /= q.sum(axis=1, keepdims=True)
    slots = min(slots, layers * experts)

    def hit(top_k: int) -> float:
        shares = lookup_shares(q, top_k)
        return static_hit_rate(static_cache(shares, slots), shares)

    assert hit(k + 1) <= hit(k) + 1e-9


def test_depth_slope_changes_the_exponent_linearly_around_its_mean():
    law = RoutingLaw(layers=5, experts=64, top_k=4, exponent=1.0, exponent_depth_slope=0.8)
    assert list(layer_exponents(law)) == pytest.approx([0.6, 0.8, 1.0, 1.2, 1.4])
    assert list(layer_exponents(RoutingLaw(3, 8, 2, exponent=0.2, exponent_depth_slope=2.0))) == [0.0, 0.2, 1.2]
    pop = layer_popularity(law, np.random.default_rng(0))
    top = np.sort(pop, axis=1)[:, -1]
    assert (np.diff(top) > 0).all()  # later layers more skewed
    flat = layer_popularity(RoutingLaw(5, 64, 4, exponent=1.0), np.random.default_rng(0))
    assert np.allclose(np.sort(flat, axis=1), np.sort(flat, axis=1)[0])  # slope 0: every layer alike by rank


@pytest.mark.parametrize("reuse", [0.0, 0.3, 0.6])
def test_every_token_routes_top_k_distinct_experts_from_its_own_layer(reuse):
    law = RoutingLaw(layers=3, experts=32, top_k=6, exponent=1.3, locality=reuse)
    _, _, ids = routes(law, 3000, chunk=300)
    srt = np.sort(ids, axis=2)
    assert (srt[:, :, 1:] != srt[:, :, :-1]).all()
    assert (ids // 32 == np.arange(3)[None, :, None]).all()


@pytest.mark.parametrize("reuse", [0.25, 0.5])
def test_reuse_leaves_the_inclusion_probabilities_where_they_are(reuse):
    """Each token is still an exact Plackett-Luce sample: its frequencies match the no-reuse sampler's (and Rosen's
    within its accuracy), while consecutive tokens share experts."""
    law = RoutingLaw(layers=4, experts=64, top_k=6, exponent=1.2, locality=reuse)
    pop, _, ids = routes(law, 16000, chunk=4000)
    _, _, free = routes(RoutingLaw(layers=4, experts=64, top_k=6, exponent=1.2), 16000, chunk=4000, seed=2)
    freq = np.bincount(ids.ravel(), minlength=256).reshape(4, 64) / 16000
    base = np.bincount(free.ravel(), minlength=256).reshape(4, 64) / 16000
    assert np.abs(freq - base).max() < 0.03
    assert np.abs(freq - inclusion_probabilities(pop, 6)).max() < 0.04


@pytest.mark.parametrize("reuse", [0.0, 0.2, 0.45])
def test_consecutive_overlap_follows_the_companion(reuse):
    law = RoutingLaw(layers=4, experts=128, top_k=8, exponent=1.0, locality=reuse)
    pop, _, ids = routes(law, 8000, chunk=2000)
    pi = inclusion_probabilities(pop, 8)
    same = (ids[1:, :, :, None] == ids[:-1, :, None, :]).any(axis=3).sum(axis=2) / 8
    base = consecutive_overlap(pi, 0.0, 8).mean()
    assert base == pytest.approx(float(((pi ** 2).sum(axis=1) / 8).mean()))  # popularity alone
    predicted = consecutive_overlap(pi, reuse, 8).mean()
    assert same.mean() == pytest.approx(predicted, abs=0.025)
    if reuse:  # the share of repeats beyond popularity is about the reuse, a little below the mean field's
        excess = (same.mean() - base) / (1 - base)
        assert 0.8 * reuse < excess < reuse + 0.01
        assert reuse_from_overlap(predicted, pi, 8) == pytest.approx(reuse, abs=1e-6)
        hist = np.bincount((same.ravel() * 8).round().astype(int), minlength=9) / same.size
        assert hist[8] < 0.05 and hist[0] < 0.2  # partial overlaps, not all or nothing


def test_reuse_continues_across_calls():
    law = RoutingLaw(layers=2, experts=64, top_k=4, exponent=0.8, locality=0.5)
    pop = layer_popularity(law, np.random.default_rng(0))
    pi = inclusion_probabilities(pop, 4)
    r = RequestRouter(law, AliasTables.build(pop), np.random.default_rng(5), popularity=pop)
    one = np.concatenate([r.next_tokens(1) for _ in range(3000)])
    same = (one[1:, :, :, None] == one[:-1, :, None, :]).any(axis=3).mean()
    assert same == pytest.approx(consecutive_overlap(pi, 0.5, 4).mean(), abs=0.03)


def test_same_seed_same_routes():
    law = RoutingLaw(layers=3, experts=64, top_k=4, exponent=1.1, locality=0.3, exponent_spread=0.2,
                     drift_weight=0.3, drift_hot_experts=8)
    pop = layer_popularity(law, np.random.default_rng(0))
    tables = AliasTables.build(pop)
    a, b = (RequestRouter.start(law, tables, np.random.default_rng(9), pop).next_tokens(500) for _ in range(2))
    assert np.array_equal(a, b)


def test_first_distinct_takes_stream_order_and_reports_short_rows():
    ids, short = first_distinct(np.array([[3, 3, 1, 3, 2, 5], [7, 7, 7, 7, 7, 6]]), 3)
    assert ids[0].tolist() == [3, 1, 2] and ids[1].tolist() == [7, 6, -1] and short.tolist() == [1]


def test_an_extremely_skewed_law_still_routes_distinct_experts():
    """A stream would need thousands of draws to reach the 8th expert: the rows left short complete exactly."""
    law = RoutingLaw(layers=2, experts=16, top_k=8, exponent=5.0, locality=0.4)
    _, _, ids = routes(law, 400)
    srt = np.sort(ids, axis=2)
    assert (srt[:, :, 1:] != srt[:, :, :-1]).all()


@pytest.mark.parametrize("positions, reuse", [(5, 0.0), (5, 0.35), (3, 0.6)])
def test_step_law_counts_the_union_of_a_steps_positions(positions, reuse):
    """A verification step's distinct experts per layer: the companion's mean against sampled routes' union, and
    its variance against theirs (within the first-order approximation); one position: exactly top_k."""
    law = RoutingLaw(layers=4, experts=128, top_k=8, exponent=1.1, locality=reuse)
    pop, _, ids = routes(law, 12000, chunk=3000)
    none = np.zeros(4 * 128, dtype=bool)
    sl = step_law(pop, none, None, 0.0, draws_per_step(8, positions, reuse))
    steps = ids[: ids.shape[0] // positions * positions].reshape(-1, positions, 4, 8)
    flat = np.sort(steps.transpose(0, 2, 1, 3).reshape(-1, 4, positions * 8), axis=2)
    union = 1 + (flat[:, :, 1:] != flat[:, :, :-1]).sum(axis=2)
    assert union.mean(axis=0) == pytest.approx(sl.missed_mean[0], rel=0.04)
    assert union.var(axis=0).mean() == pytest.approx(sl.missed_var[0].mean(), rel=0.5, abs=0.3)
    pi = inclusion_probabilities(pop, 8)
    assert sl.missed_mean[0] == pytest.approx((1 - untouched(pi, reuse, positions)).sum(axis=1), rel=1e-9)
    one = step_law(pop, none, None, 0.0, draws_per_step(8, 1, reuse))
    assert one.missed_mean[0] == pytest.approx(np.full(4, 8.0)) and one.missed_var[0].max() < 1e-6


def test_a_batch_of_sequences_touches_the_union_of_independent_requests():
    pop = layer_popularity(RoutingLaw(4, 64, 4, exponent=1.0), np.random.default_rng(0))
    none = np.zeros(256, dtype=bool)
    d = draws_per_step(4, 3, 0.3)
    assert isinstance(3 * d, StepDraws) and (3 * d).sequences == 3 and (d * 2).sequences == 2
    batch = step_law(pop, none, None, 0.0, 3 * d)
    u = untouched(inclusion_probabilities(pop, 4), 0.3, 3)
    assert batch.missed_mean[0] == pytest.approx((1 - u ** 3).sum(axis=1), rel=1e-9)
    assert float(d) == 4 * 3  # lookups a layer-step makes


@pytest.mark.parametrize("reuse", [0.0, 0.3])
def test_lru_with_reuse_follows_its_companion_on_sampled_routes(reuse):
    """Per-layer LRU of token sets (exact) and one lookup at a time (exact, the cache over all layers) against Che
    with reuse; the mean field overstates what the sampler repeats a little, most at the smallest caches."""
    law = RoutingLaw(layers=4, experts=128, top_k=8, exponent=1.0, locality=reuse)
    pop, _, ids = routes(law, 12000, chunk=3000)
    pi = inclusion_probabilities(pop, 8)
    local = (ids - (np.arange(4) * 128)[None, :, None]).transpose(1, 0, 2)
    caps = [8, 16, 32, 64]
    warm = 2000
    rate = (lru_set_hit_counts(local, caps, 128) - lru_set_hit_counts(local[:, :warm], caps, 128)) / (4 * 10000 * 8)
    for c, sim in zip(caps, rate, strict=True):
        che = np.mean([che_reuse_hit_rate(pi[layer], c, reuse) for layer in range(4)])
        assert sim == pytest.approx(che, abs=0.006 if reuse == 0 else 0.025), c
    one_at_a_time = lru_hits(ids, 128)[warm:].mean()  # one cache over the four layers: 32 slots a layer
    assert one_at_a_time == pytest.approx(che_reuse_hit_rate(pi.ravel(), 128, reuse), abs=0.03)
    windows = [local[:, i * 140:(i + 1) * 140] for i in range(20)]  # caches started cold every 140 tokens
    cold = sum(lru_set_hit_counts(w, caps, 128) for w in windows) / (20 * 4 * 140 * 8)
    expected = [lru_cold_hit_rate(pi, c, reuse, 140).mean() for c in caps]
    assert cold == pytest.approx(expected, abs=0.006 if reuse == 0 else 0.025)


def test_reuse_makes_lru_beat_its_no_reuse_self_and_full_capacity_always_hits():
    pi = inclusion_probabilities(layer_popularity(RoutingLaw(2, 64, 4, exponent=1.0), np.random.default_rng(0)), 4)
    assert che_reuse_hit_rate(pi.ravel(), 40, 0.4) > che_reuse_hit_rate(pi.ravel(), 40, 0.0) + 0.05
    assert (che_reuse_hit_probabilities(pi.ravel(), 128, 0.3) == 1).all()
    assert che_reuse_hit_rate(pi[0], 4, 0.0) == pytest.approx(float((pi[0] ** 2).sum() / 4), abs=1e-9)


def test_prefill_streams_the_distinct_experts_of_consecutive_tokens(tmp_path):
    """A prompt's new tokens touch sum(1 - (1 - pi)^(1 + (n - 1)(1 - reuse))) non-resident experts: one token
    exactly the cold mass of its top_k, reuse fewer for long prompts."""
    import sys

    sys.path.insert(0, "tests")
    from test_moe_serve import moe_scenario

    from sim.moe.prefill import _stream_seconds
    from sim.moe.setup import setup_engine

    prefill = {"chunk_tokens": 64, "token_s": 1e-5, "stream_gbps": 1.0}
    rate = 1e9 / 2**20  # 1 GB/s in 1 MiB experts
    base = setup_engine(moe_scenario(machines__server__engine__prefill=prefill), "server")
    sticky = setup_engine(moe_scenario(machines__server__engine__prefill=prefill,
                                       models__moe__moe__routing__locality=0.5), "server")
    pi = inclusion_probabilities(base.popularity, 4).ravel()
    cold = ~base.prefill_resident
    one = _stream_seconds(base)(np.array([1.0]))[0] * rate
    assert one == pytest.approx(pi[cold].sum(), rel=1e-9) and one <= 4 * 8
    long = _stream_seconds(base)(np.array([200.0]))[0]
    assert _stream_seconds(sticky)(np.array([200.0]))[0] < long
