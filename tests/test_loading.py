"""Loading pipeline: simulated loads against closed forms, the page cache and contention for the disk."""

import numpy as np
import pytest
import simpy
from conftest import tiny_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.load import validate
from sim.core.units import GB, GIB, MIB
from sim.lab import loading
from sim.lab.loaders import stage_costs
from sim.lab.pagecache import PageCache
from sim.lab.pipeline import Rig, load
from sim.lab.resources import MemoryTarget, memory_targets

CHUNK_GB = GIB / GB  # 1 GiB chunks in the tiny scenario


def per_chunk_times():
    """Hand-computed stage seconds of one 1 GiB chunk of model m8 (8 GiB, 800 tensors) on the tiny box."""
    disk = 0.01 + CHUNK_GB / 2.0
    loader = CHUNK_GB * 0.1 + 100 * 0.001
    link = CHUNK_GB / 10.0
    return disk, loader, link


def setup(raw, models=("m8",)):
    scn = validate(raw, "test")
    m = scn.machines["box"]
    env = simpy.Environment()
    targets = memory_targets(scn, m)
    cache = PageCache(m.page_cache_gib * GIB)
    rig = Rig.build(env, stage_costs(scn, m), cache, [t.name for t in targets])
    plans = {}
    for name in models:
        spec = scn.models[name]
        plans[name] = loading.plan_chunks(name, spec.weights_gib * GIB, tensors=spec.tensors,
                                          chunk_bytes=scn.loading.chunk_mib * MIB, targets=targets,
                                          free_bytes=[t.capacity_bytes for t in targets])
    return scn, env, rig, plans


def run_loads(env, rig, plans, composition, buffer_chunks=2, names=None):
    procs = [env.process(load(rig, plans[n], n, composition, buffer_chunks)) for n in (names or list(plans))]
    env.run()
    return [p.value for p in procs]


def test_serial_load_matches_closed_form():
    _, env, rig, plans = setup(tiny_scenario())
    (res,) = run_loads(env, rig, plans, "serial")
    d, lo, li = per_chunk_times()
    assert res.wall_s == pytest.approx(8 * (d + lo + li), rel=1e-12)
    assert (res.disk_s, res.loader_s, res.link_s) == pytest.approx((8 * d, 8 * lo, 8 * li), rel=1e-12)
    assert res.bytes_from_disk == pytest.approx(8 * GIB)


@pytest.mark.parametrize("buffer_chunks", [1, 2, 8])
def test_pipelined_load_matches_closed_form(buffer_chunks):
    _, env, rig, plans = setup(tiny_scenario())
    (res,) = run_loads(env, rig, plans, "pipelined", buffer_chunks)
    d, lo, li = per_chunk_times()
    assert res.wall_s == pytest.approx(d + lo + li + 7 * max(d, lo, li), rel=1e-12)


@pytest.mark.parametrize("composition", ["serial", "pipelined"])
def test_simulation_equals_mechanism_for_uneven_chunks(composition):
    raw = tiny_scenario(models__m8__weights_gib=8.37, loading__chunk_mib=700, loading__buffer_chunks=64)
    scn, env, rig, plans = setup(raw)
    (res,) = run_loads(env, rig, plans, composition, 64)
    plan = plans["m8"]
    times = loading.stage_times(plan, rig.costs, np.zeros(plan.n, bool))
    assert res.wall_s == pytest.approx(loading.load_time(times, composition), rel=1e-12)


def test_pipelined_is_never_slower_than_serial_and_bounded_by_bottleneck():
    scn, _, rig, plans = setup(tiny_scenario())
    plan = plans["m8"]
    t = loading.stage_times(plan, rig.costs, np.zeros(plan.n, bool))
    assert loading.pipelined_time(t) < loading.serial_time(t)
    assert loading.pipelined_time(t) >= t.as_matrix().sum(axis=1).max()


def test_hot_after_cold_skips_the_disk():
    _, env, rig, plans = setup(tiny_scenario())
    results = []

    def twice():
        for _ in range(2):
            results.append((yield env.process(load(rig, plans["m8"], "m8", "serial", 2))))

    env.process(twice())
    env.run()
    cold, hot = results
    d, lo, li = per_chunk_times()
    assert hot.bytes_from_disk == 0 and hot.bytes_from_cache == pytest.approx(8 * GIB)
    assert hot.wall_s == pytest.approx(8 * (lo + li))
    assert cold.wall_s - hot.wall_s == pytest.approx(8 * d)


def test_lru_eviction_of_a_page_cached_model():
    # 20 GiB of page cache: m8 then m4 then m16 (28 GiB) evicts the least recently used, m8, and keeps m4.
    _, env, rig, plans = setup(tiny_scenario(), models=("m8", "m4", "m16"))
    seq = []

    def sequence():
        for name in ("m8", "m4", "m16", "m4", "m8"):
            seq.append((yield env.process(load(rig, plans[name], name, "serial", 2))))

    env.process(sequence())
    env.run()
    m4_again, m8_again = seq[3], seq[4]
    assert m4_again.bytes_from_disk == 0
    assert m8_again.bytes_from_cache == 0 and m8_again.bytes_from_disk == pytest.approx(8 * GIB)
    assert rig.page_cache.used_bytes <= rig.page_cache.capacity_bytes


def test_model_larger_than_page_cache_keeps_part_of_it():
    """A file larger than the page cache re-read: strict LRU would miss everywhere (each read evicts the chunk read
    next). The working-set cache activates the refaulting chunks instead. A 16 GiB model over a 12 GiB cache keeps
    the active list's share (6 GiB) on the first reload and more from then on, never more than the cache holds."""
    _, env, rig, plans = setup(tiny_scenario(machines__box__page_cache_gib=12), models=("m16",))
    seq = []

    def sequence():
        for _ in range(4):
            seq.append((yield env.process(load(rig, plans["m16"], "m16", "serial", 2))))

    env.process(sequence())
    env.run()
    cached = [r.bytes_from_cache / GIB for r in seq]
    assert cached[0] == 0 and cached[1] == pytest.approx(6, abs=0.25)
    assert all(6 <= c <= 12 for c in cached[2:])
    assert all(r.wall_s < seq[0].wall_s for r in seq[1:])  # every reload faster than the cold load


@pytest.mark.parametrize("composition", ["serial", "pipelined"])
def test_two_concurrent_loads_share_the_disk(composition):
    raw = tiny_scenario(models__m8b={"weights_gib": 8, "tensors": 800})
    _, env, rig, plans = setup(raw, models=("m8", "m8b"))
    a, b = run_loads(env, rig, plans, composition)
    d, lo, li = per_chunk_times()
    busy = d - 0.01  # a request's latency is waited outside the disk: the other load reads meanwhile
    assert busy > 0.01 + lo + li  # disk-bound: the disk never idles while chunks remain
    assert max(a.end_s, b.end_s) == pytest.approx(16 * busy + 0.01 + lo + li, rel=1e-12)
    assert min(a.end_s, b.end_s) == pytest.approx(15 * busy + 0.01 + lo + li, rel=1e-12)
    assert a.wait_s > 0 and b.wait_s > 0
    # alone, the same load is not held up by the other one
    _, env1, rig1, plans1 = setup(raw)
    (alone,) = run_loads(env1, rig1, plans1, composition)
    expected_alone = 8 * (d + lo + li) if composition == "serial" else 8 * d + lo + li
    assert alone.wall_s == pytest.approx(expected_alone, rel=1e-12)
    assert alone.wait_s == 0


def test_split_across_gpus_and_spill():
    raw = tiny_scenario()
    raw["machines"]["box"]["gpus"] = {
        "g0": {"type": "card", "slot_gen": 4, "reserved_gib": 44},  # 4 GiB free
        "g1": {"type": "card", "slot_gen": 2, "slot_lanes": 4, "reserved_gib": 46},  # 2 GiB free, slow link
    }
    scn = validate(raw, "test")
    m = scn.machines["box"]
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("m8", 8 * GIB, tensors=0, chunk_bytes=GIB, targets=targets,
                               free_bytes=[t.capacity_bytes for t in targets])
    assert plan.placed_bytes == pytest.approx((4 * GIB, 2 * GIB))
    assert plan.spilled_bytes == pytest.approx(2 * GIB)
    assert list(plan.target) == [0, 0, 0, 0, 1, 1, -1, -1]
    t = loading.stage_times(plan, stage_costs(scn, m), np.zeros(plan.n, bool))
    assert t.link[6:].sum() == 0  # spilled chunks stay in host RAM
    assert t.link[4] > t.link[0]  # Gen2 x4 is slower than Gen4 x16


@pytest.mark.parametrize("buffer_chunks", [1, 2, 3])
def test_bounded_pipeline_formula_matches_simulation_with_uneven_chunks(buffer_chunks):
    """Half the chunks page-cached: stage times vary by chunk, so buffer bounds matter; formula and simulation agree."""
    raw = tiny_scenario(loading__chunk_mib=512, models__m8__weights_gib=7.3)
    _, env, rig, plans = setup(raw)
    plan = plans["m8"]
    cached = np.arange(plan.n) % 3 == 1
    for i in np.flatnonzero(cached):
        rig.page_cache.insert((plan.file, int(i)), float(plan.sizes[i]))
    times = loading.stage_times(plan, rig.costs, cached)
    (res,) = run_loads(env, rig, plans, "pipelined", buffer_chunks)
    assert res.wall_s == pytest.approx(loading.pipelined_time(times, buffer_chunks), rel=1e-12)
    assert loading.pipelined_time(times, buffer_chunks) >= loading.pipelined_time(times) - 1e-12


def test_chunks_never_straddle_two_gpus():
    raw = tiny_scenario(loading__chunk_mib=100000)
    raw["machines"]["box"]["gpus"] = {f"g{i}": {"type": "card", "slot_gen": 4, "reserved_gib": 40} for i in range(3)}
    scn = validate(raw, "test")
    m = scn.machines["box"]
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("m16", 16 * GIB, tensors=0, chunk_bytes=100000 * MIB, targets=targets,
                               free_bytes=[t.capacity_bytes for t in targets])
    per_target = [plan.sizes[plan.target == k].sum() for k in range(3)]
    assert per_target == pytest.approx(list(plan.placed_bytes))
    assert plan.sizes.sum() == pytest.approx(16 * GIB)


@settings(max_examples=60)
@given(total_gib=st.floats(0.5, 40), chunk_mib=st.floats(1, 4096),
       free_gib=st.lists(st.floats(0, 24), min_size=1, max_size=4))
def test_chunk_plan_invariants(total_gib, chunk_mib, free_gib):
    targets = [MemoryTarget(f"g{i}", f * GIB, 10.0) for i, f in enumerate(free_gib)]
    plan = loading.plan_chunks("m", total_gib * GIB, tensors=100, chunk_bytes=chunk_mib * MIB, targets=targets,
                               free_bytes=[t.capacity_bytes for t in targets])
    assert plan.sizes.sum() == pytest.approx(total_gib * GIB, rel=1e-9)
    assert (plan.sizes > 0).all() and (plan.sizes <= chunk_mib * MIB * (1 + 1e-9) + 1).all()
    for k, placed in enumerate(plan.placed_bytes):
        assert plan.sizes[plan.target == k].sum() == pytest.approx(placed, rel=1e-6, abs=1e-3 * MIB)
    assert plan.sizes[plan.target == -1].sum() == pytest.approx(plan.spilled_bytes, rel=1e-6, abs=1e-3 * MIB)
    assert plan.tensors.sum() == pytest.approx(100)


@settings(max_examples=60)
@given(times=st.lists(st.tuples(st.floats(0, 2), st.floats(0, 2), st.floats(0, 2)), min_size=1, max_size=40),
       buffer_chunks=st.integers(1, 5))
def test_pipeline_bounds(times, buffer_chunks):
    m = np.array(times).T
    t = loading.StageTimes(m[0], m[1], m[2])
    bounded = loading.pipelined_time(t, buffer_chunks)
    unbounded = loading.pipelined_time(t)
    assert m.sum(axis=1).max() - 1e-9 <= unbounded <= bounded + 1e-9
    assert bounded <= loading.serial_time(t) + 1e-9
    assert loading.pipelined_time(t, len(times) + 1) == pytest.approx(unbounded)


def test_bounded_pipeline_formula_known_values():
    """Hand-checkable case where the buffer bound matters: 2.4 s with one-chunk buffers, 2.3 s with two, 2.2 s free."""
    t = loading.StageTimes(np.array([0, 0, 0, 0, 1, 1.0]), np.full(6, 0.1), np.array([1, .1, .1, .1, .1, .1]))
    assert loading.pipelined_time(t, 1) == pytest.approx(2.4)
    assert loading.pipelined_time(t, 2) == pytest.approx(2.3)
    assert loading.pipelined_time(t) == pytest.approx(2.2)


def slow_first_link_setup():
    """First GiB to a GPU behind a slow link, the rest to a fast one; the first four chunks page-cached."""
    raw = tiny_scenario(models__m6={"weights_gib": 6})
    raw["machines"]["box"]["gpus"] = {
        "g0": {"type": "card", "slot_gen": 4, "reserved_gib": 47, "measured_link_gbps": 1.0},
        "g1": {"type": "card", "slot_gen": 4, "measured_link_gbps": 50.0},
    }
    _, env, rig, plans = setup(raw, models=("m6",))
    plan = plans["m6"]
    for i in range(4):
        rig.page_cache.insert((plan.file, i), float(plan.sizes[i]))
    cached = np.arange(plan.n) < 4
    return env, rig, plans, loading.stage_times(plan, rig.costs, cached)


@pytest.mark.parametrize("buffer_chunks", [1, 2])
def test_bounded_buffers_change_the_simulated_load(buffer_chunks):
    env, rig, plans, times = slow_first_link_setup()
    assert loading.pipelined_time(times, 1) > loading.pipelined_time(times, 2) > loading.pipelined_time(times) + 1e-3
    (res,) = run_loads(env, rig, plans, "pipelined", buffer_chunks)
    assert res.wall_s == pytest.approx(loading.pipelined_time(times, buffer_chunks), rel=1e-12)


@pytest.mark.parametrize("composition, buffer_chunks", [("serial", 2), ("pipelined", 1), ("pipelined", 3),
                                                      ("reads", 1), ("reads", 2), ("uploads", 1), ("uploads", 3)])
def test_exclusive_load_equals_chunk_by_chunk(composition, buffer_chunks):
    results = []
    for exclusive in (False, True):
        env, rig, plans, _ = slow_first_link_setup()
        proc = env.process(load(rig, plans["m6"], model="m6", composition=composition, buffer_chunks=buffer_chunks,
                                exclusive=exclusive))
        env.run()
        results.append((proc.value, rig.page_cache.keys()))
    (chunked, cache_a), (whole, cache_b) = results
    assert whole.wall_s == pytest.approx(chunked.wall_s, rel=1e-12)
    for field in ("disk_s", "loader_s", "link_s", "bytes_from_disk", "bytes_from_cache", "bytes_over_link"):
        assert getattr(whole, field) == pytest.approx(getattr(chunked, field), rel=1e-12), field
    assert cache_a == cache_b
