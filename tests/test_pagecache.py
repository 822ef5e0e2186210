import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.lab.pagecache import PageCache


def test_a_chunk_read_twice_outlives_chunks_read_once():
    c = PageCache(3)
    for k in ("a", "b", "c"):
        c.read((k, 0), 1)
    c.read(("a", 0), 1)  # a is read again: active
    c.read(("d", 0), 1)  # evicts b, the oldest inactive
    assert c.is_active(("a", 0)) and not c.contains(("b", 0))
    assert c.files() == ["c", "d", "a"]  # the order of eviction
    c.read(("e", 0), 1)
    c.read(("f", 0), 1)
    assert c.contains(("a", 0)) and not c.contains(("c", 0)) and not c.contains(("d", 0))


def _hit_share(cache: PageCache, file: str, chunks: int) -> float:
    return float(cache.read_all(file, [1.0] * chunks).mean())


def test_a_file_slightly_larger_than_the_cache_is_kept_in_part_not_flushed():
    """Strict LRU misses every chunk of every re-read of a file one chunk larger than the cache. Refault
    activation keeps the active share on the first re-read and all but the excess later (Linux's workingset)."""
    cache = PageCache(100)
    shares = [_hit_share(cache, "f", 101) for _ in range(4)]
    assert shares[0] == 0 and shares[1] == pytest.approx(0.5, abs=0.01)
    assert shares[2] == shares[3] == pytest.approx(0.98, abs=0.01)


def test_a_file_more_than_twice_the_cache_streams_through():
    """Refault distances beyond the cache: nothing is activated, as Linux leaves a scan that could never fit."""
    cache = PageCache(100)
    assert [_hit_share(cache, "f", 201) for _ in range(3)] == [0.0, 0.0, 0.0]


def test_a_new_working_set_replaces_an_old_one_and_a_reused_model_is_protected():
    cache = PageCache(100)
    _hit_share(cache, "old", 60)
    assert [_hit_share(cache, "new", 80) for _ in range(2)] == [0.0, 1.0]  # read once long ago: it goes
    cache = PageCache(100)
    _hit_share(cache, "a", 60), _hit_share(cache, "a", 60)  # loaded twice: on the active list
    _hit_share(cache, "b", 60)
    assert cache.resident_bytes("a") >= 50  # b, read once, took the inactive room first


def test_oversized_chunk_is_not_cached():
    c = PageCache(1)
    assert c.read(("big", 0), 2) is False
    assert c.used_bytes == 0


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.floats(0.1, 4)), max_size=200),
       st.floats(1, 10))
def test_capacity_and_accounting_invariants(reads, capacity):
    c = PageCache(capacity)
    sizes = {}
    for f, i, size in reads:
        size = sizes.setdefault((f, i), size)
        c.read((f, i), size)
        assert c.used_bytes <= capacity + 1e-9
        assert abs(c.used_bytes - sum(c.resident_bytes(x) for x in c.files())) < 1e-9
        if size <= capacity:
            assert c.contains((f, i))
