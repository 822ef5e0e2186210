"""The served requests of a run, by column: one numpy array per stored quantity of :mod:`sim.serving.telemetry`, in
sending order.

No Python object is kept per request: metrics read the columns, records (:data:`RequestRecord`, generated from the
schema) are made only for whoever iterates, and the requests table streams to disk in chunks
(:meth:`ServedRequests.table_rows`). Memory per request is a few hundred bytes of arrays, none of it per token.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator

import numpy as np

from sim.serving.queue import Timeline
from sim.serving.telemetry import SERVED_ENDS, STEP_SUMS, STORED, STORED_NAMES, TABLE
from sim.serving.workload import RequestTable

ROW_CHUNK = 10_000  # records or table rows made at once
_PYTHON_TYPES = {"int": int, "float": float, "str": str}
_INTS = frozenset(q.name for q in STORED if q.kind == "int")


class _Derived:
    """The derived quantities of one request (:data:`sim.serving.telemetry.DERIVED`); NaN where undefined."""

    end: str
    lookups: int
    vram_hits: int
    routed: int
    pcie_reads: int
    output_tokens: int
    decode_s: float
    sent_s: float
    end_s: float

    @property
    def served(self) -> bool:
        return self.end in SERVED_ENDS

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.sent_s

    @property
    def hit_rate(self) -> float:
        return self.vram_hits / self.lookups if self.served and self.lookups else math.nan

    @property
    def pcie_share(self) -> float:
        return self.pcie_reads / self.routed if self.served and self.routed else math.nan

    @property
    def decode_tok_s(self) -> float:
        if not self.served:
            return math.nan
        return self.output_tokens / self.decode_s if self.decode_s > 0 else math.inf

    def row(self) -> dict:
        """Its row of the requests table."""
        return {name: getattr(self, name) for name in TABLE}


RequestRecord = dataclasses.make_dataclass(
    "RequestRecord", [(q.name, _PYTHON_TYPES[q.kind]) for q in STORED], bases=(_Derived,),
    namespace={"__doc__": "One request's telemetry: the stored quantities of sim.serving.telemetry, and the derived "
                          "ones as properties."})
RequestRecord.__module__ = __name__


class ServedRequests:
    """The columns of every request of a run (``end``: an object array of str). Behaves as a sequence of
    :data:`RequestRecord`."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        missing = set(STORED_NAMES) - set(columns)
        assert not missing, missing
        self.columns = columns

    @classmethod
    def of_run(cls, table: RequestTable, tl: Timeline, output_tokens: np.ndarray, prefill_s: np.ndarray,
               sums: dict[str, np.ndarray], decode_gpu_s: np.ndarray | None = None) -> ServedRequests:
        """The columns of a run: the table's lengths, the queue's timeline, and what the engine measured (``sums``:
        per quantity of ``STEP_SUMS``, the ones it does not measure zero; ``decode_gpu_s``: None when each request had
        the GPU alone, its GPU seconds then being its ``decode_s``). A request not served has no tokens, prefill or
        decode figures (zero) and no TTFT; its wait lasted until it ended."""
        n = len(table)
        unknown = set(sums) - {q.name for q in STEP_SUMS}
        assert not unknown, f"not quantities an engine sums: {sorted(unknown)}"
        served = np.array([e in SERVED_ENDS for e in tl.end], dtype=bool)
        cols: dict[str, np.ndarray] = {}
        for q in STEP_SUMS:
            values = sums.get(q.name)
            if q.kind == "int":
                cols[q.name] = np.zeros(n, np.int64) if values is None else np.where(served, values, 0).astype(np.int64)
            else:
                cols[q.name] = np.zeros(n) if values is None else np.where(served, values, 0.0)
        start = np.where(served, tl.start_s, tl.end_s)
        cols |= {"request": np.arange(n, dtype=np.int64), "client": table.client.astype(np.int64),
                 "end": np.array(tl.end, dtype=object), "sent_s": tl.sent_s.copy(), "arrival_s": tl.arrival_s.copy(),
                 "queue_wait_s": start - tl.arrival_s, "start_s": tl.start_s.copy(),
                 "ttft_s": np.where(served, tl.first_token_s - tl.sent_s, np.nan), "end_s": tl.end_s.copy(),
                 "prompt_tokens": table.prompt_tokens.astype(np.int64),
                 "cached_tokens": table.cached_tokens.astype(np.int64),
                 "output_tokens": np.where(served, output_tokens, 0).astype(np.int64),
                 "prefill_s": np.where(served, prefill_s, 0.0),
                 "decode_gpu_s": cols["decode_s"].copy() if decode_gpu_s is None
                 else np.where(served, decode_gpu_s, 0.0)}
        return cls(cols)

    @classmethod
    def from_records(cls, records: Iterable) -> ServedRequests:
        recs = list(records)
        cols: dict[str, np.ndarray] = {}
        for name in STORED_NAMES:
            values = [getattr(r, name) for r in recs]
            kind = object if name == "end" else np.int64 if name in _INTS else float
            cols[name] = np.array(values, dtype=kind)
        return cls(cols)

    def __len__(self) -> int:
        return int(self.columns["request"].size)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return list(self._records(range(len(self))[index]))
        return next(self._records([range(len(self))[index]]))

    def __iter__(self) -> Iterator:
        for chunk in self._chunks():
            yield from chunk

    def _chunks(self) -> Iterator[list]:
        """The records, ``ROW_CHUNK`` at a time."""
        for lo in range(0, len(self), ROW_CHUNK):
            yield list(self._records(range(lo, min(lo + ROW_CHUNK, len(self)))))

    def __add__(self, other) -> ServedRequests:
        other = as_served(other)
        return ServedRequests({k: np.concatenate([self.columns[k], other.columns[k]]) for k in STORED_NAMES})

    def _records(self, index) -> Iterator:
        idx = np.asarray(list(index), dtype=np.int64)
        cols = {k: self.columns[k][idx].tolist() for k in STORED_NAMES}
        for j in range(idx.size):
            yield RequestRecord(**{k: cols[k][j] for k in STORED_NAMES})

    def __getattr__(self, name: str) -> np.ndarray:
        columns = self.__dict__.get("columns")
        if columns is not None and name in columns:
            return columns[name]
        raise AttributeError(name)

    # --- derived columns (as the records' properties) ------------------------------------------------------------
    @property
    def served(self) -> np.ndarray:
        """Requests that were answered (ended ``stop`` or ``length``)."""
        end = self.columns["end"]
        return (end == SERVED_ENDS[0]) | (end == SERVED_ENDS[1])

    @property
    def hit_rate(self) -> np.ndarray:
        lookups = self.columns["lookups"]
        ok = (lookups > 0) & self.served
        return np.divide(self.columns["vram_hits"], lookups, out=np.full(lookups.size, np.nan), where=ok)

    @property
    def pcie_share(self) -> np.ndarray:
        routed = self.columns["routed"]
        ok = (routed > 0) & self.served
        return np.divide(self.columns["pcie_reads"], routed, out=np.full(routed.size, np.nan), where=ok)

    @property
    def decode_tok_s(self) -> np.ndarray:
        d = self.columns["decode_s"]
        rate = np.divide(self.columns["output_tokens"], d, out=np.full(d.size, np.inf), where=d > 0)
        return np.where(self.served, rate, np.nan)

    def subset(self, mask: np.ndarray) -> ServedRequests:
        return ServedRequests({k: v[mask] for k, v in self.columns.items()})

    def table_rows(self) -> Iterator[dict]:
        """The requests table (:data:`sim.serving.telemetry.TABLE`), one row per request, made ``ROW_CHUNK`` records at
        a time so that it streams to disk."""
        for chunk in self._chunks():
            for r in chunk:
                yield r.row()

    def frame(self):
        """The requests table as a new pandas DataFrame: the columns of ``requests.csv``, values undefined there (an
        empty cell) NaN here."""
        import pandas as pd

        c = self.columns
        rate = self.decode_tok_s
        derived = {"e2e_s": c["end_s"] - c["sent_s"], "hit_rate": self.hit_rate, "pcie_share": self.pcie_share,
                   "decode_tok_s": np.where(np.isfinite(rate), rate, np.nan)}
        return pd.DataFrame({name: derived[name] if name in derived else c[name].copy() for name in TABLE})


def as_served(recs) -> ServedRequests:
    """Columns of ``recs``: a run's :class:`ServedRequests` as it is, or any iterable of records."""
    return recs if isinstance(recs, ServedRequests) else ServedRequests.from_records(recs)
