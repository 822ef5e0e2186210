"""Host page cache: which chunks of which files are resident, kept as Linux keeps file pages.

Linux does not evict file pages in plain least-recently-used order (mm/vmscan.c, mm/workingset.c); this cache keeps
the same two mechanisms, at the granularity of a load's chunks:

- **Two lists.** A chunk read for the first time joins the *inactive* list. Read again while resident, it moves to
  the *active* list. Eviction takes the oldest inactive chunk. The active list holds at most ``active_share`` of the
  cache (Linux balances file pages 1:1); beyond that its oldest chunk is moved back to the inactive list, at its
  old end: deactivated, it is the next to go unless it is read first (Linux clears its referenced state).
- **Refault distance.** An evicted chunk leaves a shadow entry stamped with a clock that counts the bytes evicted or
  activated so far. When the chunk is read again, the bytes counted since then are its refault distance. If that
  distance is at most the cache's capacity, the chunk is activated at once rather than treated as new. Linux
  (``workingset_refault``) compares the distance with its active file list; this cache compares it with the whole
  cache, the criterion its comment gives ("could have stayed resident had all memory been available to the
  workingset"). With Linux's rule and an empty active list, a re-read of a file larger than the cache misses
  throughout, as under strict LRU.

What this changes (tests/test_pagecache.py): a file 1% larger than the cache, read again and again (a server
restarted on a model that does not quite fit), keeps half of itself on the first re-read (the active list's share)
and 98% from the second on, where strict LRU misses every chunk of every re-read; 10% larger, 45% then 82%. Between
1.5 and 2 times the cache the share kept is small and varies from one re-read to the next; beyond twice the cache
the file streams through (its refault distances exceed the cache). A model loaded twice is protected against one
loaded once since (it sits on the active list).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable

import numpy as np

Key = tuple[Hashable, int]
ACTIVE_SHARE = 0.5  # Linux keeps the active file list no larger than the inactive one (inactive_is_low, ratio 1)


class PageCache:
    """A page cache of file chunks, sized in bytes (keys ``(file, chunk_index)``): inactive and active lists with
    refault-distance activation. Lists are ordered oldest first."""

    def __init__(self, capacity_bytes: float, active_share: float = ACTIVE_SHARE):
        self.capacity_bytes = float(capacity_bytes)
        self.active_share = float(active_share)
        self.used_bytes = 0.0
        self.active_bytes = 0.0
        self.clock = 0.0  # bytes evicted or activated so far (Linux's nonresident age)
        self._inactive: OrderedDict[Key, float] = OrderedDict()
        self._active: OrderedDict[Key, float] = OrderedDict()
        self._shadow: dict[Key, float] = {}  # evicted chunk -> clock at its eviction

    def contains(self, key: Key) -> bool:
        return key in self._active or key in self._inactive

    def is_active(self, key: Key) -> bool:
        return key in self._active

    def read(self, key: Key, size: float) -> bool:
        """Account one read of a chunk; True when it was resident (a hit)."""
        if key in self._active:
            self._active.move_to_end(key)
            return True
        if key in self._inactive:
            self._activate(key, self._inactive.pop(key))
            self._balance(keep=key)
            return True
        self._add(key, size, refault=True)
        return False

    def insert(self, key: Key, size: float) -> None:
        """Make a chunk resident as a first read does (a file cached before the simulation starts)."""
        if self.contains(key):
            return
        self._add(key, size, refault=False)

    def _add(self, key: Key, size: float, refault: bool) -> None:
        if size > self.capacity_bytes:
            return
        evicted_at = self._shadow.pop(key, None)
        if refault and evicted_at is not None and self.clock - evicted_at <= self.capacity_bytes:
            self.used_bytes += size
            self._activate(key, size)
        else:
            self._inactive[key] = size
            self.used_bytes += size
        self._balance(keep=key)

    def _activate(self, key: Key, size: float) -> None:
        self._active[key] = size
        self.active_bytes += size
        self.clock += size

    def _balance(self, keep: Key | None = None) -> None:
        """Demote beyond the active list's share, then evict oldest inactive first; never ``keep`` (the chunk
        just read: a read chunk is resident afterwards)."""
        limit = self.active_share * self.capacity_bytes
        while self.active_bytes > limit:
            key, size = self._active.popitem(last=False)  # demoted: the next to go unless read first
            self.active_bytes -= size
            self._inactive[key] = size
            self._inactive.move_to_end(key, last=False)
        while self.used_bytes > self.capacity_bytes:
            pool = self._inactive
            if not pool or next(iter(pool)) == keep:
                pool = self._active if self._active and next(iter(self._active)) != keep else self._inactive
            key = next((k for k in pool if k != keep), None)
            if key is None:  # only the chunk just read is left: over by rounding of the byte sums
                break
            size = pool.pop(key)
            if pool is self._active:
                self.active_bytes -= size
            self.used_bytes -= size
            self._shadow[key] = self.clock
            self.clock += size

    def keys(self) -> list[Key]:
        """Resident chunks, sorted."""
        return sorted([*self._inactive, *self._active])

    def resident_bytes(self, file: Hashable) -> float:
        return sum(v for (f, _), v in [*self._inactive.items(), *self._active.items()] if f == file)

    def files(self) -> list[Hashable]:
        """Files with at least one resident chunk, from the first to be evicted to the last."""
        seen: dict[Hashable, None] = {}
        for f, _ in [*self._inactive, *self._active]:
            seen.setdefault(f, None)
        return list(seen)

    def copy(self) -> PageCache:
        """An independent copy (for predicting what a sequence of reads will hit)."""
        other = PageCache(self.capacity_bytes, self.active_share)
        other.used_bytes, other.active_bytes, other.clock = self.used_bytes, self.active_bytes, self.clock
        other._inactive, other._active = self._inactive.copy(), self._active.copy()
        other._shadow = self._shadow.copy()
        return other

    def read_all(self, file: Hashable, sizes: Iterable[float], direct: bool = False) -> np.ndarray:
        """Read a file's chunks in order (as a load does); boolean hits per chunk. ``direct``: direct I/O, which
        bypasses the cache (no hit, nothing cached)."""
        if direct:
            return np.zeros(len(list(sizes)), dtype=bool)
        return np.array([self.read((file, i), float(s)) for i, s in enumerate(sizes)], dtype=bool)

    def warm(self, file: Hashable, sizes: Iterable[float]) -> None:
        for i, size in enumerate(sizes):
            self.insert((file, i), size)
