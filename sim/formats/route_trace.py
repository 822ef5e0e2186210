"""Route traces: which experts each token chose in each MoE layer, read from a file as a :class:`RouteTrace`.

File format (one of two, told apart by the first data line; ``#`` comment lines and blank lines are skipped):

- CSV with a header naming the columns ``request,token,layer,experts`` (any order; other columns ignored): one row
  per request, token and layer, ``experts`` the chosen expert ids separated by spaces, in the router's order::

      request,token,layer,experts
      0,0,0,2 50 21 80 114 59 63 106
      0,0,1,7 33 ...

- JSONL, one object per line: ``{"request": 0, "token": 0, "layer": 0, "experts": [2, 50, 21, ...]}``; ``request``
  may be left out (one request) and ``pos`` stands for ``token`` (the layout of llama.cpp trace hooks).

Every row of a trace names as many experts (``top_k``), all distinct, ids from 0; a (request, token, layer) appears
once; tokens of a request need not be contiguous (a layer may miss tokens: pairs are formed only between positions
present). Bounded as every input is: at most ``MAX_FILE_BYTES`` bytes and ``MAX_ROWS`` rows, ``MAX_TOP_K`` experts a
row, ids, tokens and layers under their bounds; a bad line is one error naming the file and the line.

From a trace (:class:`RouteTrace`): per-layer inclusion frequencies (smoothed), consecutive-token overlap at any
distance, reuse distances (tokens since the same expert's last use in the same layer), distinct experts per request
and layer, top-1 and top-8 shares and entropy. What an engine makes of a trace (its replay as a scenario's routing,
the hit rate of an LRU of token sets) is :mod:`sim.moe.trace_replay`; :func:`cached_route_trace` reads a file once
per process and content (its path, modification time and size).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from sim.core.errors import ScenarioError
from sim.formats.inputs import check_file, parse_json, read_text

MAX_FILE_BYTES = 256 * 2**20  # a trace file (bytes)
MAX_ROWS = 10**7  # rows (request, token, layer) of a trace
MAX_TOP_K = 256  # experts a row names
MAX_ID = 2**20  # expert ids, layers, requests and tokens: below this
MAX_TOKEN = 10**8
COLUMNS = ("request", "token", "layer", "experts")
WHAT = "a route trace (CSV or JSONL)"
SMOOTHING_TOKENS = 1.0  # pseudo-tokens spread evenly over a layer's experts when frequencies become a law


@dataclass(frozen=True)
class RouteTrace:
    """A trace's rows, sorted by request, layer and token."""

    path: str
    request: np.ndarray  # [rows] int64
    token: np.ndarray  # [rows] int64
    layer: np.ndarray  # [rows] int64
    experts: np.ndarray  # [rows, top_k] int64, the router's order

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[1])

    @property
    def layers(self) -> int:
        return int(self.layer.max()) + 1

    @property
    def expert_count(self) -> int:
        """Experts per layer at least (the highest id + 1)."""
        return int(self.experts.max()) + 1

    def without_sparse_layers(self, min_tokens: int) -> tuple[RouteTrace | None, list[int]]:
        """(this trace without the layers that route fewer than ``min_tokens`` tokens in all, the others renumbered
        in order; None when no layer is left), and the layer ids left out. A layer id below the highest that no row
        names routes no tokens (a far layer id makes every one between a layer of none)."""
        per_layer = np.bincount(self.layer, minlength=self.layers)
        keep = per_layer >= min_tokens
        dropped = np.flatnonzero(~keep).tolist()
        if not dropped:
            return self, []
        if not keep.any():
            return None, dropped
        rows = keep[self.layer]
        renumbered = (np.cumsum(keep) - 1)[self.layer[rows]]  # order kept: still sorted by request, layer, token
        return RouteTrace(self.path, self.request[rows], self.token[rows], renumbered.astype(np.int64),
                          self.experts[rows]), dropped

    def groups(self) -> list[tuple[int, int, int, int]]:
        """(request, layer, first row, end row) of each request's sequence in each layer."""
        key = np.stack([self.request, self.layer])
        cut = np.flatnonzero((np.diff(key, axis=1) != 0).any(axis=0)) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [self.request.size]])
        return [(int(self.request[a]), int(self.layer[a]), int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

    def requests(self) -> np.ndarray:
        return np.unique(self.request)

    def counts(self, experts: int | None = None, request: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """([layers, experts] tokens that chose each expert, [layers] tokens per layer), of one request or all."""
        n = experts or self.expert_count
        rows = slice(None) if request is None else self.request == request
        layer, ex = self.layer[rows], self.experts[rows]
        c = np.bincount((layer[:, None] * n + ex).ravel(), minlength=self.layers * n).reshape(self.layers, n)
        return c.astype(float), np.bincount(layer, minlength=self.layers).astype(float)

    def inclusion(self, experts: int | None = None, smoothing: float = SMOOTHING_TOKENS) -> np.ndarray:
        """[layers, experts] per-token inclusion frequency of each expert, smoothed by ``smoothing`` pseudo-tokens
        spread evenly (rows sum to top_k, every entry strictly between 0 and 1 when smoothing > 0)."""
        c, t = self.counts(experts)
        n = c.shape[1]
        return (c + smoothing * self.top_k / n) / (t[:, None] + smoothing)

    def overlap(self, distance: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Per row pair ``token, token + distance`` of a request and layer (both present): ``|E(t) & E(t+d)| /
        top_k``; returns (overlaps, their request ids)."""
        out, who = [], []
        for req, _, a, b in self.groups():
            tok = self.token[a:b]
            j = np.searchsorted(tok, tok + distance)
            ok = (j < tok.size) & (tok[np.minimum(j, tok.size - 1)] == tok + distance)
            if not ok.any():
                continue
            x, y = self.experts[a:b][ok], self.experts[a:b][j[ok]]
            out.append((x[:, :, None] == y[:, None, :]).any(axis=2).sum(axis=1) / self.top_k)
            who.append(np.full(int(ok.sum()), req))
        if not out:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        return np.concatenate(out), np.concatenate(who)

    def reuse_distances(self) -> list[np.ndarray]:
        """Per request and layer: the tokens since the same expert's previous use, for every reuse."""
        out = []
        for _, _, a, b in self.groups():
            tok = np.repeat(self.token[a:b], self.top_k)
            ex = self.experts[a:b].ravel()
            order = np.lexsort((tok, ex))
            same = ex[order][1:] == ex[order][:-1]
            out.append(np.diff(tok[order])[same])
        return out

    def per_request_layer(self) -> dict[str, np.ndarray]:
        """[requests, layers] statistics of each request's tokens in each layer: distinct experts, top-1 and top-8
        lookup shares, entropy of the lookup shares (bits), median and 90th percentile reuse distance (the trace
        studies' definitions: a sorted list's middle and 90% entries)."""
        reqs = self.requests()
        index = {int(r): i for i, r in enumerate(reqs)}
        shape = (reqs.size, self.layers)
        out = {name: np.full(shape, np.nan) for name in ("distinct", "top1", "top8", "entropy", "reuse_median",
                                                         "reuse_p90")}
        dist = self.reuse_distances()
        for g, (req, layer, a, b) in enumerate(self.groups()):
            c = np.bincount(self.experts[a:b].ravel(), minlength=self.expert_count).astype(float)
            share = c / c.sum()
            ranked = np.sort(share)[::-1]
            i = index[req]
            out["distinct"][i, layer] = np.count_nonzero(c)
            out["top1"][i, layer] = ranked[0]
            out["top8"][i, layer] = ranked[:8].sum()
            nz = share[share > 0]
            out["entropy"][i, layer] = float(-(nz * np.log2(nz)).sum())
            d = np.sort(dist[g])
            if d.size:
                out["reuse_median"][i, layer] = d[d.size // 2]
                out["reuse_p90"][i, layer] = d[int(0.9 * (d.size - 1))]
        return out

def read_route_trace(path: str, key_path: str = "routing.trace") -> RouteTrace:
    """Read and check a route trace (format: the module docstring). Errors are ``ScenarioError(path, 'line N',
    problem)`` for a bad line, ``ScenarioError(path, key_path, problem)`` for the file as a whole."""
    text = read_text(path, key_path, WHAT, max_bytes=MAX_FILE_BYTES, max_lines=None)
    lines = text.splitlines()
    if len(lines) > MAX_ROWS + 1:
        raise ScenarioError(path, key_path, f"more than {MAX_ROWS:,} rows")
    data = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
    if not data:
        raise ScenarioError(path, key_path, "no routes in the trace")
    rows = _jsonl(path, data) if data[0][1].startswith("{") else _csv(path, data)
    return _checked(path, key_path, rows)


def _number(path: str, n: int, name: str, value: object, top: int) -> int:
    """A whole number from 0 to below ``top`` (a JSON int or a CSV cell of digits), else a one-line error; a number
    of more digits than ``top`` has is refused by its length (Python will not convert a 5,000-digit text)."""
    digits = value.strip() if isinstance(value, str) else None
    if isinstance(value, bool) or not (isinstance(value, int) or (digits is not None and digits.isdigit())):
        raise ScenarioError(path, f"line {n}", f"{name} {str(value)[:40]!r}: expected a whole number from 0")
    if digits is not None and len(digits.lstrip("0")) > len(str(top)):
        raise ScenarioError(path, f"line {n}", f"{name} {digits[:20]}... ({len(digits):,} digits): expected less "
                            f"than {top:,}")
    v = int(value)
    if v < 0:
        raise ScenarioError(path, f"line {n}", f"{name} {v}: expected a whole number from 0")
    if v >= top:
        raise ScenarioError(path, f"line {n}", f"{name} {v}: expected less than {top:,}")
    return v


def _experts(path: str, n: int, values: list) -> list[int]:
    if not values:
        raise ScenarioError(path, f"line {n}", "no experts: expected the chosen expert ids")
    if len(values) > MAX_TOP_K:
        raise ScenarioError(path, f"line {n}", f"{len(values)} experts: expected at most {MAX_TOP_K}")
    ids = [_number(path, n, "expert id", v, MAX_ID) for v in values]
    if len(set(ids)) != len(ids):
        raise ScenarioError(path, f"line {n}", "an expert id appears twice: a token routes to distinct experts")
    return ids


def _csv(path: str, data: list[tuple[int, str]]) -> list[tuple[int, int, int, int, list[int]]]:
    head_n, head = data[0]
    names = [c.strip() for c in head.split(",")]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ScenarioError(path, f"line {head_n}", f"a header naming the columns {', '.join(COLUMNS)} (missing: "
                            f"{', '.join(missing)})")
    if len(set(names)) != len(names):
        raise ScenarioError(path, f"line {head_n}", "a column named twice in the header")
    at = {c: names.index(c) for c in COLUMNS}
    out = []
    for n, line in data[1:]:
        cells = line.split(",")
        if len(cells) != len(names):
            raise ScenarioError(path, f"line {n}", f"{len(cells)} fields: expected {len(names)} as the header has")
        req = _number(path, n, "request", cells[at["request"]].strip(), MAX_ID)
        tok = _number(path, n, "token", cells[at["token"]].strip(), MAX_TOKEN)
        layer = _number(path, n, "layer", cells[at["layer"]].strip(), MAX_ID)
        out.append((n, req, tok, layer, _experts(path, n, cells[at["experts"]].split())))
    return out


def _jsonl(path: str, data: list[tuple[int, str]]) -> list[tuple[int, int, int, int, list[int]]]:
    out = []
    for n, line in data:
        rec = parse_json(line, path, f"line {n}", "a JSON object with token, layer and experts")
        if not isinstance(rec, dict):
            raise ScenarioError(path, f"line {n}", "expected a JSON object with token, layer and experts")
        token = rec.get("token", rec.get("pos"))
        if token is None or "layer" not in rec or "experts" not in rec:
            raise ScenarioError(path, f"line {n}", "expected the keys token (or pos), layer and experts")
        if not isinstance(rec["experts"], list):
            raise ScenarioError(path, f"line {n}", "experts: expected a list of expert ids")
        out.append((n, _number(path, n, "request", rec.get("request", 0), MAX_ID),
                    _number(path, n, "token", token, MAX_TOKEN), _number(path, n, "layer", rec["layer"], MAX_ID),
                    _experts(path, n, rec["experts"])))
    return out


def _checked(path: str, key_path: str, rows: list[tuple[int, int, int, int, list[int]]]) -> RouteTrace:
    if not rows:
        raise ScenarioError(path, key_path, "no routes in the trace (a header only)")
    k = len(rows[0][4])
    for n, *_, ids in rows:
        if len(ids) != k:
            raise ScenarioError(path, f"line {n}", f"{len(ids)} experts: expected {k} as on line {rows[0][0]} "
                                "(every row routes top_k experts)")
    line = np.array([r[0] for r in rows])
    req, tok, layer = (np.array([r[i] for r in rows], dtype=np.int64) for i in (1, 2, 3))
    experts = np.array([r[4] for r in rows], dtype=np.int64)
    order = np.lexsort((tok, layer, req))
    req, tok, layer, experts, line = req[order], tok[order], layer[order], experts[order], line[order]
    same = (np.diff(req) == 0) & (np.diff(layer) == 0) & (np.diff(tok) == 0)
    if same.any():
        i = int(np.flatnonzero(same)[0]) + 1
        raise ScenarioError(path, f"line {max(line[i], line[i - 1])}", f"request {req[i]}, token {tok[i]}, layer "
                            f"{layer[i]} appears twice (also on line {min(line[i], line[i - 1])})")
    return RouteTrace(path, req, tok, layer, experts)


@functools.lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int, size: int) -> RouteTrace:
    return read_route_trace(path)


def cached_route_trace(path: str, key_path: str = "routing.trace") -> RouteTrace:
    """The route trace at ``path``, read once per process per file content (its modification time and size): a
    scenario's ``routing.trace``, checked as a regular file at ``key_path`` before the cache is asked."""
    st = check_file(path, key_path, WHAT)
    return _cached(path, st.st_mtime_ns, st.st_size)
