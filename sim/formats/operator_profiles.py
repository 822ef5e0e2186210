"""Profiled operator tables read into what a card and a model were measured to take per layer (the reader; the
batching engine prices an iteration's linear layers with the table, :mod:`sim.batching.cost`).

Vidur's authors profiled one transformer block of several models on real A100, A40 and H100 GPUs (its
``data/profiling/compute/<device>/<model>/mlp.csv``, MIT): for each batch of ``num_tokens`` tokens (one flattened
batch: a decode batch of B sequences is B tokens, a prompt chunk of C tokens is C) and each tensor-parallel degree,
the median time of every operator outside attention: the norms, the QKV and output projections, rotary embedding,
the gated MLP's projections and activation, the residual add. ``calibration/vidur_a100/`` holds them in the layout
this module reads (one row per profiled point):

- ``num_tokens``: tokens in the batch;
- ``tensor_parallel`` (optional, default 1): the tensor-parallel degree the row was profiled at;
- ``<operator>_median_ms``: one column per operator, milliseconds per layer per call.

A block's time at ``n`` tokens is the sum of its operators (Vidur's predictor adds them the same way), linearly
interpolated between profiled token counts (duplicated counts averaged), the first row's time below it, and beyond
the last row proportional to the tokens (the arithmetic-bound regime the largest batches are in). Attention is not
in these profiles: its KV reads and arithmetic stay priced by the card's specs (:mod:`sim.batching.cost`). Which
shipped profile fits a catalog card and model is :mod:`sim.config.operator_profiles`.

A table is parsed once per process and file content (its path, size and modification time).
"""

from __future__ import annotations

import bisect
import functools
import math
import os
from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.measured_tables import read_measured

SUFFIX = "_median_ms"
MAX_ROWS = 100_000  # profiled points a table may hold
MAX_MS = 1e5  # one operator call at most (ms): far beyond any profiled kernel


@dataclass(frozen=True)
class OperatorTable:
    """Per-layer seconds of the profiled operators against the batch's tokens, at one tensor-parallel degree."""

    source: str
    tensor_parallel: int
    operators: tuple[str, ...]
    tokens: tuple[float, ...]  # profiled token counts, increasing
    seconds: tuple[float, ...]  # a layer's profiled operators at those counts (s)

    def layer_s(self, tokens: float) -> float:
        """Seconds one layer's profiled operators take on a batch of ``tokens`` tokens."""
        xs, ys = self.tokens, self.seconds
        if tokens <= xs[0]:
            return ys[0]
        if tokens >= xs[-1]:
            return ys[-1] * tokens / xs[-1]
        j = bisect.bisect_right(xs, tokens)
        x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
        return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)


def operator_table(path: str, tensor_parallel: int = 1, key_path: str = "iteration.operators") -> OperatorTable:
    """The table at ``path`` for ``tensor_parallel``; bad content is a one-line error naming the file and the row."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ScenarioError(path, key_path, f"cannot read: {exc.strerror or exc}") from None
    return _parsed(path, st.st_size, st.st_mtime_ns, tensor_parallel, key_path)


@functools.lru_cache(maxsize=32)
def _parsed(path: str, size: int, mtime_ns: int, tensor_parallel: int, key_path: str) -> OperatorTable:
    del size, mtime_ns  # the cache key: a changed file is read again
    _, rows = read_measured(path)
    columns = getattr(rows, "columns", ())
    operators = tuple(c for c in columns if c.endswith(SUFFIX))
    if "num_tokens" not in columns or not operators:
        raise ScenarioError(path, key_path, f"expected columns num_tokens and <operator>{SUFFIX} (Vidur's profiled "
                            f"operators, calibration/vidur_a100/README.md); the header has {', '.join(columns)}")
    if len(rows) > MAX_ROWS:
        raise ScenarioError(path, key_path, f"{len(rows):,} rows: expected at most {MAX_ROWS:,}")
    by_tokens: dict[float, list[float]] = {}
    degrees: set[int] = set()
    for row in rows:
        degree = int(_value(row, "tensor_parallel", path, 1e4)) if "tensor_parallel" in columns else 1
        degrees.add(degree)
        if degree != tensor_parallel:
            continue
        tokens = _value(row, "num_tokens", path, 1e9)
        ms = sum(_value(row, name, path, MAX_MS, zero=True) for name in operators)
        by_tokens.setdefault(tokens, []).append(ms)
    if not by_tokens:
        raise ScenarioError(path, key_path, f"no row profiled at tensor parallel {tensor_parallel}: the table has "
                            f"{', '.join(str(d) for d in sorted(degrees))}")
    xs = sorted(by_tokens)
    ys = [sum(by_tokens[x]) / len(by_tokens[x]) * 1e-3 for x in xs]
    if ys[0] <= 0:
        raise ScenarioError(path, key_path, f"the operators at {xs[0]:g} tokens sum to 0 ms: expected a time")
    return OperatorTable(path, tensor_parallel, tuple(n.removesuffix(SUFFIX) for n in operators), tuple(xs),
                         tuple(ys))


def _value(row: dict, name: str, path: str, high: float, zero: bool = False) -> float:
    raw = (row.get(name) or "").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    low_ok = value >= 0 if zero else value > 0
    if not (math.isfinite(value) and low_ok and value <= high):
        line = getattr(row, "line", 0)
        raise ScenarioError(path, f"row {line}.{name}", f"bad value {raw!r}: expected a number "
                            f"{'0' if zero else 'above 0'} to {high:g}")
    return value
