"""Host page cache: which chunks of which files are resident, evicted least-recently-used."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable

import numpy as np


class PageCache:
    """LRU cache of file chunks, sized in bytes.

    Keys are ``(file, chunk_index)``. Reading a resident chunk refreshes it; reading a missing one inserts it,
    evicting the least recently used chunks first. A file larger than the cache therefore never stays whole
    (and a sequential re-read of it misses throughout, as Linux's LRU does for a scan larger than RAM).
    """

    def __init__(self, capacity_bytes: float):
        self.capacity_bytes = float(capacity_bytes)
        self.used_bytes = 0.0
        self._chunks: OrderedDict[tuple[Hashable, int], float] = OrderedDict()

    def contains(self, key: tuple[Hashable, int]) -> bool:
        return key in self._chunks

    def read(self, key: tuple[Hashable, int], size: float) -> bool:
        """Account one read of a chunk; True when it was resident (a hit)."""
        if key in self._chunks:
            self._chunks.move_to_end(key)
            return True
        self.insert(key, size)
        return False

    def insert(self, key: tuple[Hashable, int], size: float) -> None:
        if size > self.capacity_bytes:
            return
        old = self._chunks.pop(key, None)
        if old is not None:
            self.used_bytes -= old
        while self.used_bytes + size > self.capacity_bytes and self._chunks:
            _, freed = self._chunks.popitem(last=False)
            self.used_bytes -= freed
        self._chunks[key] = size
        self.used_bytes += size

    def resident_bytes(self, file: Hashable) -> float:
        return sum(v for (f, _), v in self._chunks.items() if f == file)

    def files(self) -> list[Hashable]:
        """Files with at least one resident chunk, least recently used first."""
        seen: dict[Hashable, None] = {}
        for f, _ in self._chunks:
            seen.pop(f, None)
            seen[f] = None
        return list(seen)

    def copy(self) -> PageCache:
        """An independent copy (for predicting what a sequence of reads will hit)."""
        other = PageCache(self.capacity_bytes)
        other._chunks = self._chunks.copy()
        other.used_bytes = self.used_bytes
        return other

    def read_all(self, file: Hashable, sizes: Iterable[float]) -> np.ndarray:
        """Read a file's chunks in order (as a load does); boolean hits per chunk."""
        return np.array([self.read((file, i), float(s)) for i, s in enumerate(sizes)], dtype=bool)

    def warm(self, file: Hashable, sizes: Iterable[float]) -> None:
        for i, size in enumerate(sizes):
            self.insert((file, i), size)
