"""Per-request telemetry of a served workload, by column: one numpy array per field of :class:`RequestRecord`, in
sending order.

No Python object is kept per request: metrics read the columns, records are made only for whoever iterates
(per-request observables, tests), and the requests table streams to disk in chunks (:meth:`ServedRequests.rows`).
Memory per request is a few hundred bytes of arrays, none of it per token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class RequestRecord:
    """One request's telemetry. Lookups count every position's routed expert; distinct counts (``routed``,
    ``pcie_reads``...) count each expert once per verification step, as the engine fetches it once."""

    id: int
    prompt_tokens: int
    output_tokens: int
    start_s: float
    ttft_s: float
    decode_s: float
    lookups: int
    hits: int  # lookups served from the VRAM cache
    peer_lookups: int  # ... by a peer GPU
    disk_lookups: int  # ... from beyond host RAM (the rest: host RAM)
    routed: int  # distinct experts touched, summed over steps
    pcie_reads: int  # distinct experts read over PCIe (host RAM beyond the CPU window, and disk)
    cpu_experts: int  # distinct experts the host CPU computed
    peer_experts: int  # distinct experts peer GPUs computed
    disk_reads: int  # distinct experts read from disk
    compute_s: float
    stall_s: float
    break_s: float
    idle_s: float
    sent_s: float = 0.0  # the client sent it
    arrival_s: float = 0.0  # it reached the engine (sent + request_overhead_s)
    queue_wait_s: float = 0.0  # from reaching the engine to getting a slot
    prefill_s: float = 0.0  # GPU seconds of its prefill
    end_s: float = 0.0
    end: str = "stop"  # stop, length, cancelled, rejected
    cached_tokens: int = 0
    client: int = -1
    decode_gpu_s: float | None = None  # GPU seconds of its decode (None: decode_s, when it had the GPU alone)

    @property
    def gpu_s(self) -> float:
        return self.decode_s if self.decode_gpu_s is None else self.decode_gpu_s

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 1.0

    @property
    def pcie_share(self) -> float:
        return self.pcie_reads / self.routed if self.routed else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.output_tokens / self.decode_s if self.decode_s > 0 else float("inf")


FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
_INTS = frozenset(f.name for f in dataclasses.fields(RequestRecord) if f.type in ("int", int))
ROW_CHUNK = 10_000  # records or table rows made at once


class ServedRequests:
    """The columns of every request of a run (``end``: an object array of str; ``decode_gpu_s``: NaN where it is
    ``decode_s``, i.e. the request had the GPU alone). Behaves as a sequence of :class:`RequestRecord`."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        missing = set(FIELDS) - set(columns)
        assert not missing, missing
        self.columns = columns

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> ServedRequests:
        recs = list(records)
        cols: dict[str, np.ndarray] = {}
        for name in FIELDS:
            values = [getattr(r, name) for r in recs]
            if name == "end":
                cols[name] = np.array(values, dtype=object)
            elif name == "decode_gpu_s":
                cols[name] = np.array([np.nan if v is None else v for v in values], dtype=float)
            else:
                cols[name] = np.array(values, dtype=np.int64 if name in _INTS else float)
        return cls(cols)

    def __len__(self) -> int:
        return int(self.columns["id"].size)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return list(self._records(range(len(self))[index]))
        return next(self._records([range(len(self))[index]]))

    def __iter__(self) -> Iterator[RequestRecord]:
        for chunk in self._chunks():
            yield from chunk

    def _chunks(self) -> Iterator[list[RequestRecord]]:
        """The records, ``ROW_CHUNK`` at a time."""
        for lo in range(0, len(self), ROW_CHUNK):
            yield list(self._records(range(lo, min(lo + ROW_CHUNK, len(self)))))

    def __add__(self, other) -> ServedRequests:
        other = as_served(other)
        return ServedRequests({k: np.concatenate([self.columns[k], other.columns[k]]) for k in FIELDS})

    def _records(self, index) -> Iterator[RequestRecord]:
        idx = np.asarray(list(index), dtype=np.int64)
        cols = {k: v[idx].tolist() for k, v in self.columns.items()}
        gpu = cols["decode_gpu_s"]
        cols["decode_gpu_s"] = [None if g != g else g for g in gpu]
        for j in range(idx.size):
            yield RequestRecord(**{k: cols[k][j] for k in FIELDS})

    def __getattr__(self, name: str) -> np.ndarray:
        columns = self.__dict__.get("columns")
        if columns is not None and name in columns:
            return columns[name]
        raise AttributeError(name)

    # --- derived columns (the records' properties) ---------------------------------------------------------------
    @property
    def served(self) -> np.ndarray:
        """Requests that were answered (ended ``stop`` or ``length``)."""
        end = self.columns["end"]
        return (end == "stop") | (end == "length")

    @property
    def gpu_s(self) -> np.ndarray:
        g = self.columns["decode_gpu_s"]
        return np.where(np.isnan(g), self.columns["decode_s"], g)

    @property
    def hit_rate(self) -> np.ndarray:
        lookups = self.columns["lookups"]
        return np.divide(self.columns["hits"], lookups, out=np.ones(lookups.size), where=lookups > 0)

    @property
    def pcie_share(self) -> np.ndarray:
        routed = self.columns["routed"]
        return np.divide(self.columns["pcie_reads"], routed, out=np.zeros(routed.size), where=routed > 0)

    @property
    def decode_tok_s(self) -> np.ndarray:
        d = self.columns["decode_s"]
        return np.divide(self.columns["output_tokens"], d, out=np.full(d.size, np.inf), where=d > 0)

    def subset(self, mask: np.ndarray) -> ServedRequests:
        return ServedRequests({k: v[mask] for k, v in self.columns.items()})

    def rows(self, shaper) -> Iterator[dict]:
        """``shaper(records)`` rows, made ``ROW_CHUNK`` records at a time (a table that streams to disk)."""
        for chunk in self._chunks():
            yield from shaper(chunk)


def as_served(recs) -> ServedRequests:
    """Columns of ``recs``: a run's :class:`ServedRequests` as it is, or any iterable of records."""
    return recs if isinstance(recs, ServedRequests) else ServedRequests.from_records(recs)
