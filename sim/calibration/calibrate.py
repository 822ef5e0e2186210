"""``sim calibrate``: fit a scenario's declared free parameters to measured tables and real requests.

Two kinds of observation:

- measured tables, mapped onto the scenario by its ``calibrate.tables`` (:mod:`sim.targets`): quantities, rows of
  settings, spill and hit-rate buckets, each cell simulated by an experiment (a variant of the scenario with the
  workload the cell was measured under);
- completed requests, from engine logs (:mod:`sim.logs`) or request tables (CSV columns named like the log rows:
  ``prompt_tokens``, ``cached_tokens``, ``output_tokens``, ``acceptance`` and any of the measured ``prefill_tok_s``,
  ``decode_tok_s``, ``ttft_s``, ``expert_hit_rate``, ``pcie_share``), each replayed through the scenario's engine one
  after another with its own prompt, cache hit, length and acceptance.

Every cell's error (log ratio for rates, difference for shares) is divided by its tolerance, so one unit is the error
the project claims for that cell; the fit minimises the soft-L1 robust loss of these residuals (quadratic within the
tolerance, linear beyond, so one odd cell cannot drag the rest). Cells matched by ``calibrate.checks`` or
``calibrate.unclaimed`` are reported, not fitted. The free parameters (``calibrate.free``: dotted paths with bounds and
starting values) are searched in log space, in the order of ``calibrate.stages`` (each group with the others held),
from the best of the starting values and a scrambled Sobol sample of the box, then Nelder-Mead: whole verification
steps and the eager switch make the objective piecewise flat at fine scales, which misleads gradients. Every
evaluation uses the same random numbers (common random numbers), so the objective is deterministic and a run is
reproducible. ``calibrate.held`` values are applied throughout and written into the calibration file with their
reasons. When ``--out`` names one of the scenario's own calibration files, that file is left out while fitting, so
the result depends only on the scenario, the inputs and the seed.

Standard errors come from the Jacobian at the solution (finite steps of 0.05 in log space: a parameter's ``log_sd``
is its relative uncertainty). Residuals are in tolerance units, so each cell's noise is about its tolerance; each
input (a table, or one observable of a log) estimates its own as its residuals' mean square over its degrees of
freedom, shrunk toward the tolerance with the weight of two cells (floored at a tenth of the tolerance), so data that
agree better than claimed are trusted more and data that agree worse less; rows are weighted as the soft-L1 fit
weighs them. A parameter whose
column of the Jacobian is flat, that only a combination pins down, or whose
relative standard error exceeds 100% is flagged. The calibration file keeps the log-space covariance of the fitted
parameters, which ``sim run --uncertainty N`` samples from.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from sim.calibration.targets import (
    Experiment,
    Target,
    TargetBuilder,
    cell_error,
    check_metrics,
    error,
    run_experiments,
    simulated,
    without_calibration,
)
from sim.config.calibrate import Calibrate
from sim.config.load import load_scenario, read_calibrate
from sim.config.paths import get_dotted, number_at
from sim.config.scenario import Scenario
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError
from sim.core.tables import read_measured

RATES = ("prefill_tok_s", "decode_tok_s", "ttft_s")
SHARES = ("expert_hit_rate", "pcie_share")
SIGMA_FLOOR = 0.1  # tolerance units: no input is trusted beyond a tenth of its claimed error
PRIOR_DOF = 2.0  # an input's noise estimate is shrunk toward its tolerance as if the tolerance were 2 more cells
SIMPLEX_STEP = 0.1  # log space: Nelder-Mead's first moves change each value by about 10% (or a quarter of its box)
REPLAY = "requests"
ALIASES = {"hit_rate": "expert_hit_rate"}  # the column name of requests.csv (sim run --out) and of request tables


# What an engine's logged PCIe share counts, over routed experts. Strata: "more read by the GPU over PCIe or from
# another GPU" (its hit-rate line), so not the misses the host CPU computes; Basalt and request tables: every routed
# expert not served from the engine GPU's VRAM (peers, host CPU, PCIe reads).
READS_ONLY_SHARE = {"strata"}


@dataclass
class Observation:
    source: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    acceptance: float  # NaN: the model's
    measured: dict[str, float]
    engine: str = ""  # the log format it came from ("" for a request table)


@dataclass
class CalibrationResult:
    parameters: dict[str, float]  # fitted, by dotted path
    log_sd: dict[str, float]
    log_cov: list[list[float]]
    residuals: list[dict]  # every target: measured, simulated, error, tolerance, role
    held: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    held_reason: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    cost: float = 0.0
    evaluations: int = 0
    sources: list[str] = field(default_factory=list)
    bounds: dict[str, list[float]] = field(default_factory=dict)  # of the fitted: draws for --uncertainty stay inside


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def is_request_table(path: str) -> bool:
    """A table of requests (replayed one by one) rather than a table of measured cells."""
    _, rows = read_measured(path)
    return bool(rows) and {"prompt_tokens", "output_tokens"} <= set(rows[0])


def observations(logs: list[str], tables: list[str]) -> list[Observation]:
    """The completed requests of engine logs and request tables, with what each measured."""
    from sim.calibration.logs import log_sources, read_logs

    rows: list[tuple[str, dict]] = []
    if logs:
        for r in read_logs(log_sources(logs)).rows:
            file, _, line = str(r["line"]).rpartition(":")
            rows.append((f"{os.path.basename(file)}:{line}", r))
    for path in tables:
        _, table = read_measured(path)
        rows += [(f"{os.path.basename(path)} row {i + 1}", r) for i, r in enumerate(table)]
    out = []
    for where, r in rows:
        prompt, output = _num(r.get("prompt_tokens")), _num(r.get("output_tokens"))
        if prompt is None or output is None or output < 1:
            continue  # statistics lines and partial rows carry no request to replay
        r = {ALIASES.get(k, k): v for k, v in r.items()}
        measured = {k: v for k in (*RATES, *SHARES) if (v := _num(r.get(k))) is not None}
        cached = _num(r.get("cached_tokens")) or 0
        acc = _num(r.get("acceptance"))
        if prompt < 0 or cached < 0 or cached > prompt or (acc is not None and not 0 <= acc <= 1):
            raise ScenarioError(where, "prompt_tokens" if prompt < 0 else "cached_tokens" if cached < 0 or
                                cached > prompt else "acceptance",
                                "prompt >= cached >= 0 tokens and an acceptance fraction in [0, 1]")
        if cached >= prompt:
            measured.pop("prefill_tok_s", None)
        out.append(Observation(where, int(prompt), int(_num(r.get("cached_tokens")) or 0), int(output),
                               float("nan") if acc is None else acc, measured, str(r.get("engine") or "")))
    return out


def replay(scn: Scenario, obs: list[Observation], seed: int, replicas: int = 1) -> list[dict[str, float]]:
    """Replay the observed requests one after another on the scenario's engine, each ``replicas`` times; per
    request, the medians of its observables over its replicas."""
    from sim.engines import kind_for
    from sim.serving.workload import RequestTable

    kind = kind_for(scn)
    assert kind is not None
    n = len(obs) * replicas

    def col(values: list) -> np.ndarray:
        return np.tile(np.array(values), replicas)

    table = RequestTable(np.full(n, np.nan), col([o.prompt_tokens for o in obs]), col([o.cached_tokens for o in obs]),
                         col([o.output_tokens for o in obs]), col([o.acceptance for o in obs]),
                         np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    c = kind.replay(scn, table, np.random.default_rng(seed)).requests.columns
    new = c["prompt_tokens"] - c["cached_tokens"]
    reads_only = col([o.engine in READS_ONLY_SHARE for o in obs])
    with np.errstate(divide="ignore", invalid="ignore"):
        per = {"prefill_tok_s": np.where(c["prefill_s"] > 0, new / c["prefill_s"], np.nan),
               "decode_tok_s": np.where(c["decode_s"] > 0, c["output_tokens"] / c["decode_s"], np.nan),
               "ttft_s": c["ttft_s"],
               "expert_hit_rate": np.where(c["lookups"] > 0, c["vram_hits"] / c["lookups"], np.nan),
               # what the engine's log calls its PCIe share (READS_ONLY_SHARE): routed experts not served from the
               # engine GPU's VRAM, or of those only what crossed PCIe or came from another GPU
               "pcie_share": np.where(c["routed"] > 0, (c["peer_experts"] + c["cpu_experts"] * ~reads_only
                                                        + c["pcie_reads"]) / c["routed"], np.nan)}
    medians = {k: np.median(v.reshape(replicas, len(obs)), axis=0) for k, v in per.items()}
    return [{k: float(v[i]) for k, v in medians.items()} for i in range(len(obs))]


def request_targets(obs: list[Observation], builder: TargetBuilder, cal: Calibrate, scenario: str) -> list[Target]:
    """One target per measured figure of a replayed request, with the kind and tolerance the scenario gives it."""
    replay = Experiment(scenario, (REPLAY,))
    out = []
    for i, o in enumerate(obs):
        for key, value in o.measured.items():
            spec = cal.requests.get(key)
            if spec is None:
                continue
            name = f"{o.source} {key}"
            role, note = builder.role(name)
            out.append(Target(name, o.source.split(" row ")[0].rsplit(":", 1)[0], value, spec.kind, spec.tolerance,
                              key, (replay,), "request", role=role, note=note, where=(i,)))
    return out


class Problem:
    """Targets, the requests to replay, and how to simulate them at a parameter vector."""

    def __init__(self, path: str, targets: list[Target], obs: list[Observation], fixed: list[str], seed: int,
                 exclude: str | None):
        self.path = path
        self.targets = targets
        self.obs = obs
        self.fixed = fixed  # --set strings applied before the free values: held values and the user's overrides
        self.seed = seed
        self.exclude = exclude
        self.fit = [t for t in targets if t.role == "fit"]
        self.evaluations = 0
        self.checked: set[str] = set()  # targets whose metric names a run has been seen to report

    def values(self, sets: list[str], targets: list[Target] | None = None) -> list[float]:
        """Simulated value of every target (or of ``targets``) with these free values."""
        self.evaluations += 1
        targets = self.targets if targets is None else targets
        params = [*self.fixed, *sets]
        runs = run_experiments([t for t in targets if t.how != "request"], params, self.seed, self.exclude)
        fresh = [t for t in targets if t.how != "request" and t.name not in self.checked]
        check_metrics(fresh, runs)
        self.checked |= {t.name for t in fresh}
        replayed: list[dict[str, float]] = []
        if any(t.how == "request" for t in targets):
            scn = load_scenario(self.path, [*without_calibration(self.path, self.exclude), *params])[0]
            replayed = replay(scn, self.obs, self.seed, scn.calibrate.replicas)
        out = []
        for t in targets:
            if t.how == "request":
                out.append(float(replayed[t.where[0]][t.metric]))
            else:
                out.append(simulated(t, runs))
        return out

    def residuals(self, sets: list[str]) -> np.ndarray:
        """Errors of the fitted targets in units of their tolerances."""
        sims = self.values(sets, self.fit)
        return np.array([error(t.kind, t.measured, s) / t.tolerance for t, s in zip(self.fit, sims, strict=True)])


def soft_l1(r: np.ndarray) -> float:
    return float(np.sum(2 * (np.sqrt(1 + r * r) - 1)))


def _free_start(path: str, cal: Calibrate, before: list[str]) -> list[float]:
    """Starting values: each free parameter's declared start, else the value the scenario (with its calibrations)
    gives it; each checked to be a positive real the scenario accepts."""
    raw: dict | None = None
    start = []
    for name, fp in cal.free.items():
        if fp.lo >= fp.hi:
            raise ScenarioError(path, f"calibrate.free.{name}.hi", f"more than lo ({fp.lo:g})")
        if fp.start is None:
            if raw is None:
                try:  # the scenario as the fit sees it: without the calibration being written
                    raw = load_scenario(path, before)[1]
                except ScenarioError as exc:
                    raise ScenarioError(path, f"calibrate.free.{name}.start", "a start value: without the "
                                        f"calibration being written the scenario does not load ({exc})") from None
            found, value = get_dotted(raw, name)
            if not found:
                raise ScenarioError(path, f"calibrate.free.{name}", "a path the scenario (or its calibrations) sets, "
                                    "or a start value")
            v = number_at(value) or 0.0
            if v <= 0:
                raise ScenarioError(path, f"calibrate.free.{name}", f"a path holding a positive number (it holds "
                                    f"{str(value)[:40]!r})")
        else:
            v = fp.start
            if not fp.lo <= v <= fp.hi:
                raise ScenarioError(path, f"calibrate.free.{name}.start", f"a value within [lo, hi] = [{fp.lo:g}, "
                                    f"{fp.hi:g}] (it is {v:g})")
        start.append(min(max(v, fp.lo), fp.hi))
    sets = [f"{n}={v:.8g}" for n, v in zip(cal.free, start, strict=True)]
    for i, (name, fp) in enumerate(cal.free.items()):
        # the search moves values continuously within the bounds: a whole-number field cannot be free, and the
        # scenario must accept both ends of the box
        for value, key, what in ((start[i] * 1.0001, name, "a real-valued parameter (a fractional value is "
                                  "rejected here)"), (fp.lo, f"{name}.lo", "a bound the scenario accepts"),
                                 (fp.hi, f"{name}.hi", "a bound the scenario accepts")):
            try:
                load_scenario(path, [*before, *sets[:i], f"{name}={value:.8g}", *sets[i + 1:]])
            except ScenarioError as exc:
                if exc.path == name:
                    raise ScenarioError(path, f"calibrate.free.{key}", f"{what}: {exc.problem}") from None
                raise
    return start


def free_sets(names: list[str], x: np.ndarray) -> list[str]:
    """Free values at log values ``x`` as ``--set`` strings (6 significant digits: what the file records)."""
    return [f"{n}={math.exp(v):.6g}" for n, v in zip(names, x, strict=True)]


def held_sets(cal: Calibrate) -> list[str]:
    """The held values as ``--set`` strings, applied to every simulation of the fit."""
    return [f"{k}={h.value!r}" for k, h in cal.held.items()]


def _check_paths(path: str, cal: Calibrate) -> list[str]:
    """Free and held paths are the calibration's. A path both free and held is an error; one that a scenario file
    (or a variant's) sets itself gets a warning: that value would win over the calibration file at run time."""
    both = set(cal.free) & set(cal.held)
    if both:
        raise ScenarioError(path, f"calibrate.held.{sorted(both)[0]}", "a path that is not also under calibrate.free")
    files = {path} | {os.path.normpath(os.path.join(os.path.dirname(path), v.scenario)) for v in cal.variants.values()
                      if v.scenario}
    out = []
    for file in sorted(files):
        raw = read_yaml(file) if os.path.isfile(file) else {}
        out += [f"{name}: {file} sets it itself, so it keeps that value over the calibration file's (remove it there "
                "to use the fit)" for name in [*cal.free, *cal.held] if get_dotted(raw, name)[0]]
    return out


def unmatched_patterns(cal: Calibrate, targets: list[Target], inputs: list[str]) -> list[str]:
    """Warnings for checks/unclaimed patterns that match no target of an input they name (a typo would leave a cell
    fitted); a pattern for a table or log not given this time says nothing."""
    import fnmatch
    import re

    names = [os.path.basename(i) for i in inputs]
    out = []
    for kind, table in (("checks", cal.checks), ("unclaimed", cal.unclaimed)):
        for pattern in table:
            source = re.split(r"[ :]", pattern, maxsplit=1)[0]
            if any(fnmatch.fnmatchcase(n, source) for n in names) and not any(
                    fnmatch.fnmatchcase(t.name, pattern) for t in targets):
                out.append(f"calibrate.{kind}: {pattern!r} matches no measured cell")
    return out


def _stages(path: str, cal: Calibrate) -> list[list[int]]:
    names = list(cal.free)
    if not cal.stages:
        return [list(range(len(names)))]
    seen: list[str] = []
    for i, stage in enumerate(cal.stages):
        for n in stage:
            if n not in cal.free:
                raise ScenarioError(path, f"calibrate.stages.{i}", f"{n!r} is not under calibrate.free")
            if n in seen:
                raise ScenarioError(path, f"calibrate.stages.{i}", f"{n!r} is in two stages")
            seen.append(n)
    missing = [n for n in names if n not in seen]
    if missing:
        raise ScenarioError(path, "calibrate.stages", f"every free parameter in one stage ({missing[0]!r} is in none)")
    return [[names.index(n) for n in stage] for stage in cal.stages]


def build_problem(path: str, cal: Calibrate, logs: list[str], tables: list[str]
                  ) -> tuple[list[Target], list[Observation]]:
    """The targets of the tables (mapped under ``calibrate.tables``) and of the requests of logs and request
    tables."""
    builder = TargetBuilder(path, cal, path)
    requests = [t for t in tables if os.path.basename(t) not in cal.tables and is_request_table(t)]
    targets: list[Target] = []
    for t in tables:
        if t not in requests:
            targets += builder.table(t)
    obs = observations(logs, requests)
    targets += request_targets(obs, builder, cal, path)
    if not any(t.role == "fit" for t in targets):
        raise ScenarioError(", ".join([*logs, *tables]) or "(no input)", "", "completed requests or measured cells "
                            f"with something to fit to ({', '.join((*RATES, *SHARES))}, or a table the scenario maps "
                            "under calibrate.tables)")
    return targets, obs


def calibrate(path: str, logs: list[str], tables: list[str], seed: int = 0, overrides: list[str] | None = None,
              max_evals: int = 200, starts: int | None = None, exclude: str | None = None, log=None
              ) -> CalibrationResult:
    """Fit ``path``'s ``calibrate.free`` parameters; ``max_evals`` Nelder-Mead evaluations and ``starts`` Sobol
    candidates (default: 2^ceil(log2(4 k)), at least 8) per stage; ``exclude``: the calibration file being written,
    left out of the scenario's calibrations while fitting."""
    from scipy.optimize import minimize
    from scipy.stats import qmc

    overrides = list(overrides or [])
    say = log or (lambda _msg: None)
    cal = read_calibrate(path)
    if not cal.free:
        raise ScenarioError(path, "calibrate.free", "a map of dotted.path: {lo, hi} naming what to fit")
    names = list(cal.free)
    path_warnings = _check_paths(path, cal)
    fixed = [*held_sets(cal), *overrides]
    before = [*without_calibration(path, exclude), *fixed]
    x = np.log(_free_start(path, cal, before))
    lo = np.log([cal.free[n].lo for n in names])
    hi = np.log([cal.free[n].hi for n in names])

    base = load_scenario(path, [*before, *free_sets(names, x)])[0]
    if base.serve is None:
        raise ScenarioError(path, "serve", "a serve section: sim calibrate simulates its engine")
    targets, obs = build_problem(path, cal, logs, tables)
    problem = Problem(path, targets, obs, fixed, seed, exclude)
    for si, stage in enumerate(_stages(path, cal)):
        idx = np.array(stage)

        def full(sub: np.ndarray, idx=idx, before=x) -> np.ndarray:  # this stage's values, the others as they are
            out = before.copy()
            out[idx] = np.clip(sub, lo[idx], hi[idx])
            return out

        def robust(sub: np.ndarray) -> float:
            return soft_l1(problem.residuals(free_sets(names, full(sub))))

        k = len(idx)
        n_starts = starts if starts is not None else max(8, 2 ** math.ceil(math.log2(4 * k)))
        candidates = [np.clip(x[idx], lo[idx] + 1e-9, hi[idx] - 1e-9)]
        if n_starts > 0:
            from warnings import catch_warnings, simplefilter

            with catch_warnings():  # any count is fine here: balance properties are not relied on
                simplefilter("ignore", UserWarning)
                sobol = qmc.Sobol(k, seed=seed).random(n_starts)
            candidates += list(lo[idx] + sobol * (hi[idx] - lo[idx]))
        scored = [(robust(c), i) for i, c in enumerate(candidates)]
        best_cost, best_i = min(scored)
        x0 = candidates[best_i]
        if max_evals > 0:
            # the first simplex steps a fixed distance in log space (a fraction of the box for narrow boxes), toward
            # the inside of the box: the default (5% of each coordinate) depends on the units and stalls on the
            # objective's flat steps
            step = np.minimum(SIMPLEX_STEP, 0.25 * (hi[idx] - lo[idx]))
            step = np.where(x0 + step > hi[idx], -step, step)
            simplex = np.vstack([x0, x0 + np.diag(step)])
            found = minimize(robust, x0, method="Nelder-Mead",
                             options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6, "adaptive": True,
                                      "initial_simplex": simplex})
            if found.fun < best_cost:
                x0, best_cost = found.x, float(found.fun)
        x = full(x0)
        say(f"stage {si + 1}: " + ", ".join(f"{names[i]} = {math.exp(x[i]):.4g}" for i in idx)
            + f" (loss {best_cost:.4f}, {problem.evaluations} simulations so far)")
    x = np.log([float(f"{math.exp(v):.6g}") for v in x])  # the values written are the values evaluated
    r0, jac = jacobian(problem, names, x, hi)
    log_sd, cov, warnings = standard_errors(problem, names, x, lo, hi, jac, r0)
    warnings += unmatched_patterns(cal, targets, [*tables, *logs]) + path_warnings
    values = problem.values(free_sets(names, x))
    rows = [_row(t, s) for t, s in zip(problem.targets, values, strict=True)]
    held = {k: h.value for k, h in cal.held.items()}
    units = {**{k: h.unit for k, h in cal.held.items()}, **{n: cal.free[n].unit for n in names}}
    return CalibrationResult({n: float(f"{math.exp(v):.6g}") for n, v in zip(names, x, strict=True)},
                             {n: float(f"{v:.4g}") for n, v in zip(names, log_sd, strict=True)},
                             [[float(f"{c:.6g}") for c in row] for row in cov], rows, held, units,
                             {k: h.why for k, h in cal.held.items()}, warnings, round(soft_l1(r0), 6),
                             problem.evaluations, [*tables, *logs],
                             {n: [cal.free[n].lo, cal.free[n].hi] for n in names})


def jacobian(problem: Problem, names: list[str], x: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residuals at log values ``x`` and their forward-difference Jacobian (steps of 0.05 in log space, backward at
    the upper bound)."""

    r0 = problem.residuals(free_sets(names, x))
    jac = np.zeros((r0.size, len(names)))
    h = 0.05
    for j in range(len(names)):
        step = x.copy()
        step[j] += h if step[j] + h <= hi[j] + 1e-12 else -h
        jac[:, j] = (problem.residuals(free_sets(names, step)) - r0) / (step[j] - x[j])
    return r0, jac


def standard_errors(problem: Problem, names: list[str], x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    jac: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Log-space standard errors and covariance from the Jacobian of the residuals (tolerance units), with the noise
    model of the module docstring; warnings for what the data cannot pin down.

    Each input's noise (in tolerance units) is its residuals' mean square over its degrees of freedom, shrunk toward
    1 (the tolerance) with the weight of ``PRIOR_DOF`` cells: an input with few cells keeps about its tolerance, one
    with many speaks for itself. Rows are then weighted as the soft-L1 loss weighs them at the solution
    (``(1 + r^2)^(-1/2)`` in the normal equations, r in tolerance units), so a cell the fit treats as an outlier
    does not narrow the errors either."""
    m, k = jac.shape
    groups = [t.source + ("" if t.how != "request" else " " + t.metric) for t in problem.fit]
    sigma = np.ones(m)
    for g in set(groups):
        rows_g = np.array([q == g for q in groups])
        n_g = int(rows_g.sum())
        dof = max(n_g - k * n_g / m, 0.0)  # its share of the fit's degrees of freedom
        # (dof * s^2 + PRIOR_DOF * 1) / (dof + PRIOR_DOF), s^2 = rss / dof: its mean square, shrunk toward 1
        var = (float(r[rows_g] @ r[rows_g]) + PRIOR_DOF) / (dof + PRIOR_DOF)
        sigma[rows_g] = max(math.sqrt(var), SIGMA_FLOOR)
    jw = jac / sigma[:, None] * ((1 + r * r) ** -0.25)[:, None]  # the fit's soft-L1 weights, from its residuals
    warnings = []
    if m < k:
        warnings.append(f"{m} measured cells for {k} parameters: the fit is under-determined")
    # covariance from the SVD: a direction the data do not constrain (a singular value under 1e-8 of the largest)
    # has no finite variance, and every parameter along it gets an infinite standard error
    _, sv, vt = np.linalg.svd(jw, full_matrices=False)
    good = sv > 1e-8 * max(float(sv.max()) if sv.size else 0.0, 1e-300)
    cov = (vt[good].T / sv[good] ** 2) @ vt[good]
    blind = np.abs(vt[~good]).max(axis=0) > 1e-6 if (~good).any() else np.zeros(k, dtype=bool)
    if m < k:
        blind[:] = True
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    sd[blind] = np.inf
    cov[blind, :] = np.nan
    cov[:, blind] = np.nan
    col = np.linalg.norm(jac, axis=0)
    for i, n in enumerate(names):
        if col[i] < 1e-6 * max(col.max(), 1e-300):
            warnings.append(f"{n}: the observations do not depend on it (flat Jacobian)")
        elif blind[i]:
            warnings.append(f"{n}: only a combination with other parameters is pinned down (no standard error)")
        elif sd[i] > 1.0:
            warnings.append(f"{n}: not pinned down by these observations (relative standard error {sd[i]:.0%})")
        if abs(x[i] - lo[i]) < 1e-6 or abs(x[i] - hi[i]) < 1e-6:
            warnings.append(f"{n}: at its bound ({math.exp(x[i]):.4g}): widen calibrate.free.{n}")
    return sd, cov, warnings


def _row(t: Target, sim: float) -> dict:
    err = cell_error(t.kind, t.measured, sim, t.lo, t.hi)  # a range: from its nearer edge, as validate judges it
    row = {"target": t.name, "role": t.role, "measured": float(t.measured), "simulated": float(sim),
           "error": float(err), "tolerance": t.tolerance, "kind": t.kind}
    if t.lo is not None:
        row |= {"measured_lo": t.lo, "measured_hi": t.hi}
    if t.note:
        row["note"] = t.note
    return row


def outside(row: dict) -> bool:
    """A fitted or checked row whose error exceeds its tolerance (a measured range counts from its nearer edge)."""
    if row["role"] == "unclaimed":
        return False
    sim = row["simulated"]
    if sim is None or not math.isfinite(sim):
        return True
    err = cell_error(row["kind"], row["measured"], sim, row.get("measured_lo"), row.get("measured_hi"))
    return not abs(err) <= row["tolerance"] + 1e-12


def calibration_yaml(res: CalibrationResult, command: str) -> str:
    import yaml

    from sim.core.tables import read_measured as _read

    header = ["# Written by `sim calibrate`; do not edit by hand. Reproduce from the project root with:",
              f"#   {command}"]
    provenance = []
    for src in res.sources:
        if src.endswith(".csv") and os.path.exists(src):
            first = (_read(src)[0] or [""])[0]
            if first:
                provenance.append(f"#   {os.path.basename(src)}: {first[:100]}")
    if provenance:
        header += ["# Measurements (provenance as in each table's header):", *provenance]
    header += ["# log_sd: standard error of log(value), i.e. relative; log_cov: their covariance (order of `fitted`),",
               "# which `sim run --uncertainty N` samples from. Held values are assumptions, each with its reason."]
    rows = [{k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()}
            for r in res.residuals]
    body = {"kind": "calibrate", "parameters": {**res.held, **res.parameters}, "units": res.units,
            "fitted": list(res.parameters), "bounds": res.bounds, "held_reason": res.held_reason,
            "log_sd": res.log_sd,
            "log_cov": res.log_cov, "warnings": res.warnings, "cost": res.cost, "evaluations": res.evaluations,
            "residuals": rows}
    return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)


def _sd(log_sd: float) -> str:
    return f"{log_sd:.1%}" if math.isfinite(log_sd) else "none (not pinned down)"


def report_markdown(res: CalibrationResult, command: str, plot: str | None) -> str:
    lines = ["# Calibration report", "", f"`{command}`", "", "| parameter | value | unit | relative standard error |",
             "|---|---|---|---|"]
    lines += [f"| `{n}` | {v:.6g} | {res.units.get(n, '')} | {_sd(res.log_sd[n])} |" for n, v in res.parameters.items()]
    if res.held:
        lines += ["", "| held | value | unit | why |", "|---|---|---|---|"]
        lines += [f"| `{n}` | {v:.6g} | {res.units.get(n, '')} | {res.held_reason.get(n, '')} |"
                  for n, v in res.held.items()]
    if res.warnings:
        lines += ["", "Warnings:", ""] + [f"- {w}" for w in res.warnings]
    lines += ["", "| target | role | measured | simulated | error | tolerance |", "|---|---|---|---|---|---|"]
    for r in res.residuals:
        share = r["kind"] == "share"
        err = f"{r['error'] * 100:+.2f} pts" if share else f"{r['error']:+.1%}"
        tol = f"{r['tolerance'] * 100:g} pts" if share else f"{r['tolerance'] * 100:.3g}%"
        meas = f"{r['measured']:.4g}" if "measured_lo" not in r else f"{r['measured_lo']:.4g}-{r['measured_hi']:.4g}"
        flag = " **outside**" if outside(r) else ""
        lines.append(f"| {r['target']} | {r['role']} | {meas} | {r['simulated']:.4g} | {err}{flag} | {tol} |")
    notes = [(r["target"], r["note"]) for r in res.residuals if r.get("note")]
    if notes:
        lines += ["", "Not fitted:", ""] + [f"- {n}: {why}" for n, why in notes]
    if plot:
        lines += ["", f"![measured against simulated]({os.path.basename(plot)})"]
    return "\n".join(lines) + "\n"


def plot_residuals(res: CalibrationResult, path: str) -> None:
    """Measured against simulated, one panel per observable kind (rates on log axes), fitted and held-out cells
    marked apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def panel(r: dict) -> str:
        return "shares" if r["kind"] == "share" else "rates and times"

    keys = sorted({panel(r) for r in res.residuals})
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4.6), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for role, marker, colour in (("fit", "o", "#0072B2"), ("check", "s", "#E69F00"),
                                     ("unclaimed", "x", "#999999")):
            pts = [(r["measured"], r["simulated"]) for r in res.residuals
                   if panel(r) == key and r["role"] == role and r["simulated"] is not None
                   and math.isfinite(r["simulated"]) and (key == "shares" or r["simulated"] > 0)]
            if pts:
                xv, yv = np.array(pts).T
                ax.scatter(xv, yv, s=16, marker=marker, color=colour, label=role)
        vals = [v for r in res.residuals if panel(r) == key for v in (r["measured"], r["simulated"])
                if v is not None and math.isfinite(v) and (key == "shares" or v > 0)]
        if vals:
            low, top = min(vals), max(vals)
            if key != "shares":
                ax.set_xscale("log")
                ax.set_yscale("log")
                low, top = low / 1.2, top * 1.2
            else:
                pad = (top - low) * 0.05 or 0.01
                low, top = low - pad, top + pad
            ax.plot([low, top], [low, top], color="grey", lw=0.8)
            ax.set_xlim(low, top)
            ax.set_ylim(low, top)
        ax.set_title(key)
        ax.set_xlabel("measured")
        ax.set_ylabel("simulated")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)
