"""The llama.cpp engine's shared cost parameters fitted to measured llama-bench runs, and the runs predicted.

Two steps, both over the training cases only:

1. **Memory.** Each backend's ``context_mib`` (what a card holds besides its buffers) is the median over the
   training rows that report a card's total VRAM of measured minus the simulated buffers; a backend without such
   rows takes the pooled median (none at all: the default).
2. **Speed.** With placements and memory fixed, every run's time is a ledger (:mod:`sim.llamacpp.ledger`) of bytes
   and FLOPs over rates and of fixed costs; all ledgers are compiled into arrays and the parameters they name fitted
   by robust (soft-L1) least squares on ``log(simulated / measured)``. A family's value for one backend (or
   prompt-kernel path) is its pooled value times ``exp(delta)``, and every ``delta`` carries a prior
   ``delta / PRIOR_SD`` (partial pooling): a backend measured a lot moves away from the pool as far as its runs ask,
   one measured a little stays near it, one not measured at all gets the pooled value. Pooled values carry a wide
   prior around :data:`sim.llamacpp.params.PRIORS` (values chosen before any fit, where every fit also starts), so
   parameters no run informs stay physical and a held-out source's refit never sees the shipped fit.

Nothing is fitted per setup, card or row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.calibration.llamacpp_case import Case
from sim.core.errors import SimulationError
from sim.core.units import GIB, MIB
from sim.llamacpp.ledger import CompiledLedgers, Ledger
from sim.llamacpp.params import ASSUMED, FAMILIES, PRIORS, CostParams, bounds

PRIOR_SD = 0.5  # log sd of a backend's (or path's) departure from its family's pooled value
POOL_SD = 1.5  # log sd of a pooled value around its prior (sim.llamacpp.params.PRIORS)
NOT_LOADING = 1.5  # log error of a run the model says cannot load (it ran): about a factor of 4.5
HELD = tuple(ASSUMED) + ("windows_reserved_gib",)  # not fitted: ASSUMED says why; windows_reserved: a memory value


@dataclass
class Built:
    """A case set up under some parameters: its ledger (rates) or its setup's VRAM (memory), or why it failed."""

    case: Case
    ledger: Ledger | None = None
    vram_gib: float = float("nan")  # what the case's vram kind measures, simulated
    buffers_gib: float = float("nan")  # the card's buffers without the backend's context (total rows)
    error: str = ""


def build(case: Case, params: CostParams) -> Built:
    """The case's engine under ``params``: its test's ledger, or its card's memory."""
    from sim.llamacpp.bench import bench_setup

    ctx = case.tokens + case.depth
    try:
        st = bench_setup(case.scenario, "m", case.settings, max(ctx, 1), params)
    except SimulationError as exc:
        return Built(case, error=str(exc))
    e, s = st.engine, st.settings
    if case.quantity == "vram_gib":
        cards = st.memory[1:]
        if not cards:
            return Built(case, error="no card")
        if case.vram == "model":
            return Built(case, vram_gib=sum(m.weights for m in cards) / GIB)
        total = sum(m.total for m in cards) / GIB
        return Built(case, vram_gib=total, buffers_gib=total - sum(m.context for m in cards) / GIB)
    try:
        if case.batch:  # llama-batched-bench: B prompts of PP tokens, or TG steps of B sequences after them
            from sim.llamacpp.batched import generation_ledger, prompts_ledger

            lg = prompts_ledger(st, case.depth, case.batch) if case.test == "bpp" else \
                generation_ledger(st, case.depth, case.tokens // case.batch, case.batch)
        elif case.test == "pp":
            lg = e.prompt_ledger(case.tokens, case.depth, min(s.ubatch_size, s.batch_size))
        else:
            lg = e.generate_ledger(case.tokens, case.depth)
    except SimulationError as exc:
        return Built(case, error=str(exc))
    return Built(case, ledger=lg.compact())


def fit_memory(cases: list[Case], base: CostParams) -> CostParams:
    """``base`` with each backend's ``context_mib`` from the training rows reporting a card's total VRAM."""
    by_backend: dict[str, list[float]] = {}
    for c in cases:
        if c.quantity != "vram_gib" or c.vram != "total":
            continue
        b = build(c, base)
        if math.isfinite(b.buffers_gib):
            cards = max(len(c.scenario.machines["m"].gpus), 1)
            by_backend.setdefault(c.backend, []).append((c.measured - b.buffers_gib) * GIB / MIB / cards)
    values = {}
    pooled = [v for vs in by_backend.values() for v in vs]
    if pooled:
        values["context_mib"] = float(max(np.median(pooled), 0.0))
    for backend, vs in by_backend.items():
        values[f"context_mib.{backend}"] = float(max(np.median(vs), 0.0))
    return base.with_values(**values)


@dataclass
class SpeedFit:
    params: CostParams
    fitted: list[str]
    cost: float
    evaluations: int
    not_loading: list[str] = field(default_factory=list)  # case ids that could not load under the fit's memory


def _split(name: str) -> tuple[str, str | None]:
    family, _, key = name.partition(".")
    return (family, key or None) if family in FAMILIES else (name, None)


def fit_speed(cases: list[Case], base: CostParams, max_evaluations: int = 60, weights: str = "row") -> SpeedFit:
    """The speed parameters the training cases' ledgers name, fitted as the module docstring says."""
    from scipy.optimize import least_squares

    rate_cases = [c for c in cases if c.quantity in ("tg_tok_s", "pp_tok_s")]
    built = [build(c, base) for c in rate_cases]
    ok = [b for b in built if b.ledger is not None]
    failing = [b.case.id for b in built if b.ledger is None]
    if not ok:
        return SpeedFit(base, [], 0.0, 0, failing)
    comp = CompiledLedgers.of([b.ledger for b in ok])
    tokens = np.array([b.case.tokens for b in ok], dtype=float)
    measured = np.array([b.case.measured for b in ok], dtype=float)
    if weights == "source":  # each source's rows weigh as one row in all, square-rooted
        counts: dict[str, int] = {}
        for b in ok:
            counts[b.case.source] = counts.get(b.case.source, 0) + 1
        w = np.array([1.0 / math.sqrt(counts[b.case.source]) for b in ok])
    else:
        w = np.ones(len(ok))
    names = comp.names
    free = [n for n in names if _split(n)[0] not in HELD and n not in HELD]
    families = sorted({_split(n)[0] for n in free if _split(n)[1] is not None})
    globals_ = sorted({n for n in free if _split(n)[1] is None})
    pooled = families + [g for g in globals_ if g not in families]
    members = [n for n in free if _split(n)[1] is not None]
    lookup = base.lookup()
    start_pool = np.log([lookup[p] for p in pooled])
    default_pool = np.log([PRIORS.get(p, lookup[p]) for p in pooled])
    start_delta = np.array([math.log(lookup[n]) - math.log(lookup[_split(n)[0]]) for n in members])
    pool_index = {p: i for i, p in enumerate(pooled)}
    member_family = np.array([pool_index[_split(n)[0]] for n in members], dtype=int)
    col = {n: i for i, n in enumerate(names)}
    fixed_values = np.array([lookup[n] for n in names])
    lo = np.log([bounds(n)[0] if bounds(n)[0] > 0 else 1e-12 for n in names])
    hi = np.log([bounds(n)[1] for n in names])
    member_cols = np.array([col[n] for n in members], dtype=int)
    pool_cols = np.array([col.get(p, -1) for p in pooled], dtype=int)
    calls = [0]

    # log(values) = fixed logs, with the pooled columns set to z's pooled part and each member to its pool + delta
    n_pool = len(pooled)
    lift = np.zeros((len(names), len(pooled) + len(members)))
    for i, c in enumerate(pool_cols):
        if c >= 0:
            lift[c, i] = 1.0
    for j, (c, f) in enumerate(zip(member_cols, member_family, strict=True)):
        lift[c, f] = 1.0
        lift[c, n_pool + j] = 1.0
    free_rows = lift.any(axis=1)
    base_logs = np.log(fixed_values)

    def logs_of(z: np.ndarray) -> np.ndarray:
        return np.where(free_rows, lift @ z, base_logs)

    def values_of(z: np.ndarray) -> np.ndarray:
        return np.exp(np.clip(logs_of(z), lo, hi))

    prior_scale = np.concatenate([np.full(n_pool, 1.0 / POOL_SD), np.full(len(members), 1.0 / PRIOR_SD)])

    def residuals(z: np.ndarray) -> np.ndarray:
        calls[0] += 1
        seconds = comp.seconds(values_of(z))
        r = np.log(tokens / seconds / measured) * w
        prior = np.concatenate([z[:n_pool] - default_pool, z[n_pool:]]) * prior_scale
        return np.concatenate([r, prior])

    def jacobian(z: np.ndarray) -> np.ndarray:
        logs = logs_of(z)
        inside = (logs > lo) & (logs < hi)
        seconds, grad = comp.seconds_and_gradient(np.exp(np.clip(logs, lo, hi)))
        d = -(w / seconds)[:, None] * (grad * inside[None, :]) @ lift
        return np.vstack([d, np.diag(prior_scale)])

    z0 = np.concatenate([start_pool, start_delta])
    res = least_squares(residuals, z0, jac=jacobian, loss="soft_l1", f_scale=0.15, max_nfev=max_evaluations * 10,
                        x_scale=1.0)
    v = values_of(res.x)
    fitted = {n: float(f"{x:.6g}") for n, x in zip(names, v, strict=True) if n in free}
    pool_values = {p: float(f"{math.exp(np.clip(x, -50, 50)):.6g}") for p, x in zip(pooled, res.x[:len(pooled)],
                                                                                       strict=True)}
    for p, x in pool_values.items():
        lo_p, hi_p = bounds(p)
        pool_values[p] = min(max(x, lo_p), hi_p)
    params = base.with_values(**(pool_values | fitted))
    return SpeedFit(params, sorted(fitted), float(res.cost), calls[0], failing)


def fit(cases: list[Case], base: CostParams | None = None, max_evaluations: int = 60,
        weights: str = "row") -> SpeedFit:
    """Memory, then speed, on ``cases`` (module docstring)."""
    base = base or CostParams(dict(PRIORS))
    memory = fit_memory(cases, base)
    return fit_speed(cases, memory, max_evaluations, weights)


def predict(cases: list[Case], params: CostParams) -> list[tuple[float, str]]:
    """Each case's simulated value under ``params`` (NaN: cannot load, with llama.cpp's words) and the part of the
    model that dominates it."""
    out = []
    lookup = params.lookup()
    for c in cases:
        b = build(c, params)
        if b.error:
            out.append((float("nan"), f"does not load: {b.error}"))
        elif c.quantity == "vram_gib":
            out.append((b.vram_gib, "model buffer" if c.vram == "model" else "weights + KV + compute + context"))
        else:
            assert b.ledger is not None
            parts = b.ledger.seconds_by_category(lookup)
            total = sum(parts.values())
            out.append((c.tokens / total, mechanism(parts, total)))
    return out


def mechanism(parts: dict[str, float], total: float) -> str:
    """Where a run's time goes, largest first: ``gpu 71%, fixed 18%, ...``."""
    shares = sorted(((v / total, k) for k, v in parts.items() if v > 0), reverse=True)
    return ", ".join(f"{k} {s:.0%}" for s, k in shares[:3])
