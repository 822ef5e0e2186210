"""The loads domain's shared parameters fitted to training rows: deterministic least squares on log errors, the
rows that measure a part (disk, copy, link) first, then the load times (see :mod:`sim.fidelity.loads`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from sim.fidelity.domain import Observation
from sim.fidelity.loads_mechanism import LOGIT, PARAMETERS, RATES, predict_one, start_values


@dataclass
class LoadsFit:
    """Shared parameter values, and which of them the training rows determined (the others at their start)."""

    values: dict[str, float]
    fitted: tuple[str, ...]
    rows: int
    cost: float


# -- fitting ----------------------------------------------------------------------------------------------------
def _to_x(name: str, v: float) -> float:
    return math.log(v / (1 - v)) if name in LOGIT else math.log(v)


def _to_v(name: str, x: float) -> float:
    return 1 / (1 + math.exp(-x)) if name in LOGIT else math.exp(x)


def _log_errors(p: dict[str, float], rows: list[Observation]) -> np.ndarray:
    out = np.empty(len(rows))
    for i, o in enumerate(rows):
        v = predict_one(p, o.key).value
        out[i] = math.log(v / o.measured) if v > 0 and math.isfinite(v) else 10.0
    return out


PRIOR_WEIGHT = 0.3 / math.log(10)  # a parameter a decade from its stated start costs what a source 30% off does


def _free(p: dict[str, float], rows: list[Observation], candidates: Iterable[str]) -> list[str]:
    """The candidates some row of ``rows`` depends on (a 5% step in the parameter moves its prediction)."""
    base = _log_errors(p, rows)
    out = []
    for name in candidates:
        probe = dict(p)
        probe[name] = _to_v(name, _to_x(name, p[name]) + 0.05)
        if np.any(np.abs(_log_errors(probe, rows) - base) > 1e-9):
            out.append(name)
    return out


def _solve(p: dict[str, float], rows: list[Observation], free: list[str]) -> tuple[dict[str, float], float]:
    """``free`` fitted to ``rows`` from ``p``: least squares on weighted log errors, each source's rows weighted
    1/sqrt(its rows), a soft-L1 loss (a row far off pulls linearly, not quadratically), and a weak pull of each
    parameter towards its stated start."""
    from scipy.optimize import least_squares

    counts: dict[str, int] = {}
    for o in rows:
        counts[o.source] = counts.get(o.source, 0) + 1
    weights = np.array([1 / math.sqrt(counts[o.source]) for o in rows])
    x_start = np.array([_to_x(n, PARAMETERS[n][0]) for n in free])

    def values(x: np.ndarray) -> dict[str, float]:
        out = dict(p)
        out.update({n: _to_v(n, float(v)) for n, v in zip(free, x, strict=True)})
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([weights * _log_errors(values(x), rows), PRIOR_WEIGHT * (x - x_start)])

    lo = [_to_x(n, PARAMETERS[n][1]) for n in free]
    hi = [_to_x(n, PARAMETERS[n][2]) for n in free]
    x0 = np.clip([_to_x(n, p[n]) for n in free], lo, hi)
    sol = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2, diff_step=1e-4, xtol=1e-10,
                        ftol=1e-10, gtol=1e-10, max_nfev=400)
    return values(sol.x), float(sol.cost)


def fit_loads(train: list[Observation]) -> LoadsFit:
    """The shared parameters (:data:`PARAMETERS`) fitted to ``train``, deterministically (least squares from the
    stated starts, no random draws), in two steps, as one calibrates a machine from its parts: the rows that
    measure a part (a disk's requests, a copy, a link: :data:`RATES`) fit the parameters they depend on; the load
    times then fit the parameters left (those no such row determines), the parts' values held."""
    p = start_values()
    rates = [o for o in train if o.quantity in RATES]
    loads = [o for o in train if o.quantity not in RATES]
    fitted: list[str] = []
    cost = 0.0
    for rows in (rates, loads):
        if not rows:
            continue
        free = _free(p, rows, [n for n in PARAMETERS if n not in fitted])
        if free:
            p, c = _solve(p, rows, free)
            fitted += free
            cost += c
    return LoadsFit({n: float(f"{v:.6g}") for n, v in p.items()}, tuple(fitted), len(train), cost)
