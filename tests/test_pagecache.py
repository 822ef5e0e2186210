from hypothesis import given
from hypothesis import strategies as st

from sim.lab.pagecache import PageCache


def test_read_refreshes_recency():
    c = PageCache(3)
    for k in ("a", "b", "c"):
        c.read((k, 0), 1)
    c.read(("a", 0), 1)  # a is now most recent
    c.read(("d", 0), 1)  # evicts b
    assert c.contains(("a", 0)) and not c.contains(("b", 0))
    assert c.files() == ["c", "a", "d"]


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
