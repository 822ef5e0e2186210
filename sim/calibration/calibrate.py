"""``sim calibrate``: fit a scenario's declared free parameters to measured tables and real requests.

Two kinds of observation:

- measured tables, mapped onto the scenario by its ``calibrate.tables`` (:mod:`sim.calibration.targets`): quantities,
  rows of settings, spill and hit-rate buckets, each cell simulated by an experiment (a variant of the scenario with
  the workload the cell was measured under);
- completed requests, from engine logs or request tables, replayed (:mod:`sim.calibration.observations`).

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

Standard errors: :mod:`sim.calibration.covariance`; files written: :mod:`sim.calibration.files`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from sim.calibration.covariance import jacobian, standard_errors
from sim.calibration.observations import RATES, SHARES, Observation, observations, request_targets
from sim.calibration.problem import Problem, free_sets, held_sets, soft_l1
from sim.calibration.result import CalibrationResult, residual_row
from sim.calibration.targets import Target, TargetBuilder, without_calibration
from sim.config.calibrate import Calibrate
from sim.config.load import load_scenario, read_calibrate
from sim.config.paths import get_dotted, number_at
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError
from sim.core.progress import Bar, progress
from sim.formats.request_tables import is_request_table

SIMPLEX_STEP = 0.1  # log space: Nelder-Mead's first moves change each value by about 10% (or a quarter of its box)


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


@dataclass
class FitResult(CalibrationResult):
    """A fit's result; ``interrupted``: stopped by Ctrl-C in ``stopped_in`` (e.g. "stage 2 of 3"), so the values are
    the best the search had evaluated, not converged. Its residuals and, unless a second Ctrl-C skipped them, its
    standard errors are those of that point: the result is complete except for convergence."""

    interrupted: bool = False
    stopped_in: str = ""


class _Tracked(Problem):
    """The problem, counting its simulations on a progress bar and keeping the best point the search evaluated."""

    def __init__(self, names: list[str], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.names = names  # the free parameters, in the order of the log values
        self.bar: Bar = progress(None, "", disable=True)
        self.where = ""  # the stage being searched, for the message of an interruption
        self.best_cost = math.inf
        self.best_x: np.ndarray | None = None  # log values
        self.best_r: np.ndarray | None = None  # the fitted targets' residuals there (tolerance units)
        self.best_sims: list[float] = []  # and their simulated values
        self._last: list[float] = []

    def values(self, sets: list[str], targets: list[Target] | None = None) -> list[float]:
        out = super().values(sets, targets)
        self._last = out
        self.bar.update()
        return out

    def cost(self, x: np.ndarray) -> float:
        """The robust loss at log values ``x`` (one simulation), remembered if it is the lowest so far."""
        r = self.residuals(free_sets(self.names, x))
        cost = soft_l1(r)
        if cost < self.best_cost:
            self.best_cost, self.best_x, self.best_r, self.best_sims = cost, x.copy(), r, list(self._last)
            self.bar.set_postfix_str(f"best loss {cost:.4f}")
        return cost


def _search(problem: _Tracked, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, stages: list[list[int]],
            starts: int | None, max_evals: int, seed: int, say) -> np.ndarray:
    """The staged search from log values ``x``: per stage the best of the start and a Sobol sample, then
    Nelder-Mead; the log values found. A progress bar per stage counts its simulations."""
    from scipy.optimize import minimize
    from scipy.stats import qmc

    names = problem.names
    for si, stage in enumerate(stages):
        idx = np.array(stage)
        problem.where = f"stage {si + 1} of {len(stages)}"

        def full(sub: np.ndarray, idx=idx, before=x) -> np.ndarray:  # this stage's values, the others as they are
            out = before.copy()
            out[idx] = np.clip(sub, lo[idx], hi[idx])
            return out

        def robust(sub: np.ndarray) -> float:
            return problem.cost(full(sub))

        k = len(idx)
        n_starts = starts if starts is not None else max(8, 2 ** math.ceil(math.log2(4 * k)))
        candidates = [np.clip(x[idx], lo[idx] + 1e-9, hi[idx] - 1e-9)]
        if n_starts > 0:
            from warnings import catch_warnings, simplefilter

            with catch_warnings():  # any count is fine here: balance properties are not relied on
                simplefilter("ignore", UserWarning)
                sobol = qmc.Sobol(k, seed=seed).random(n_starts)
            candidates += list(lo[idx] + sobol * (hi[idx] - lo[idx]))
        at_start = problem.evaluations
        with progress(len(candidates) + max_evals, f"calibrate {problem.where}", unit="sim") as problem.bar:
            if problem.best_x is not None:
                problem.bar.set_postfix_str(f"best loss {problem.best_cost:.4f}")
            scored = [(robust(c), i) for i, c in enumerate(candidates)]
            best_cost, best_i = min(scored)
            x0 = candidates[best_i]
            if max_evals > 0:
                # the first simplex steps a fixed distance in log space (a fraction of the box for narrow boxes),
                # toward the inside of the box: the default (5% of each coordinate) depends on the units and stalls
                # on the objective's flat steps
                step = np.minimum(SIMPLEX_STEP, 0.25 * (hi[idx] - lo[idx]))
                step = np.where(x0 + step > hi[idx], -step, step)
                simplex = np.vstack([x0, x0 + np.diag(step)])
                found = minimize(robust, x0, method="Nelder-Mead",
                                 options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6, "adaptive": True,
                                          "initial_simplex": simplex})
                if found.fun < best_cost:
                    x0, best_cost = found.x, float(found.fun)
            problem.bar.set_total(problem.evaluations - at_start)  # Nelder-Mead may converge before max_evals
        x = full(x0)
        say(f"stage {si + 1}: " + ", ".join(f"{names[i]} = {math.exp(x[i]):.4g}" for i in idx)
            + f" (loss {best_cost:.4f}, {problem.evaluations} simulations so far)")
    return x


def _finish(problem: _Tracked, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[float]]:
    """At log values ``x``: (residuals of the fitted targets, log standard errors, log covariance, their warnings,
    every target's simulated value)."""
    names = problem.names
    with progress(len(names) + 2, "calibrate: standard errors", unit="sim") as problem.bar:
        r0, jac = jacobian(problem, names, x, hi)
        log_sd, cov, warnings = standard_errors(problem, names, x=x, lo=lo, hi=hi, jac=jac, r=r0)
        values = problem.values(free_sets(names, x))
    return r0, log_sd, cov, warnings, values


def _finish_interrupted(problem: _Tracked, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[float]]:
    """``_finish`` at the best point of an interrupted search, reusing its simulation of the fitted targets: the
    other targets (checks, unclaimed) once, then the Jacobian. A second Ctrl-C leaves out what is not done yet (NaN
    values, no standard errors) and says so in a warning."""
    names, k = problem.names, len(problem.names)
    assert problem.best_r is not None
    fit_sims = iter(problem.best_sims)
    values = [next(fit_sims) if t.role == "fit" else math.nan for t in problem.targets]
    log_sd, cov, warnings = np.full(k, np.inf), np.full((k, k), np.nan), []
    others = [t for t in problem.targets if t.role != "fit"]
    with progress(len(names) + 1 + bool(others), "calibrate: standard errors", unit="sim") as problem.bar:
        try:
            if others:
                sims = iter(problem.values(free_sets(names, x), others))
                values = [v if t.role == "fit" else next(sims) for t, v in zip(problem.targets, values, strict=True)]
            _, jac = jacobian(problem, names, x, hi)
            log_sd, cov, warnings = standard_errors(problem, names, x=x, lo=lo, hi=hi, jac=jac, r=problem.best_r)
        except KeyboardInterrupt:
            warnings = ["interrupted again: no standard errors" + (", and the cells not fitted are not simulated "
                                                                   "(NaN)" if any(map(math.isnan, values)) else "")]
    return problem.best_r, log_sd, cov, warnings, values


def calibrate(path: str, logs: list[str], tables: list[str], seed: int = 0, overrides: list[str] | None = None,
              max_evals: int = 200, starts: int | None = None, exclude: str | None = None, log=None
              ) -> FitResult:
    """Fit ``path``'s ``calibrate.free`` parameters; ``max_evals`` Nelder-Mead evaluations and ``starts`` Sobol
    candidates (default: 2^ceil(log2(4 k)), at least 8) per stage; ``exclude``: the calibration file being written,
    left out of the scenario's calibrations while fitting.

    Ctrl-C (KeyboardInterrupt) during the search stops it: the result holds the best values evaluated so far with
    their residuals and standard errors (k + 2 more simulations at most), ``interrupted`` true, ``stopped_in`` the
    stage, ``evaluations`` every simulation started and a first warning saying it is not converged. A second Ctrl-C
    meanwhile leaves out what is not done (the cells not fitted as NaN, no standard errors; a warning says so).
    Ctrl-C before the first simulation finished propagates."""
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
    problem = _Tracked(names, path, targets, obs=obs, fixed=fixed, seed=seed, exclude=exclude)
    stopped, searched = "", 0
    try:
        x = _search(problem, x, lo, hi, _stages(path, cal), starts, max_evals, seed, say)
    except KeyboardInterrupt:
        if problem.best_x is None:
            raise
        stopped, x, searched = problem.where, problem.best_x, problem.evaluations
        say(f"interrupted in {stopped} after {searched} simulations: keeping the best values so far (loss "
            f"{problem.best_cost:.4f}, not converged); simulating their residuals and standard errors (Ctrl-C again "
            "skips the standard errors)")
    x = np.log([float(f"{math.exp(v):.6g}") for v in x])  # the values written are the values evaluated
    r0, log_sd, cov, warnings, values = (_finish_interrupted if stopped else _finish)(problem, x, lo, hi)
    if stopped:
        warnings.insert(0, f"interrupted in {stopped} after {searched} simulations: not converged, the values are "
                        "the best the search had evaluated")
    warnings += unmatched_patterns(cal, targets, [*tables, *logs]) + path_warnings
    rows = [residual_row(t, s) for t, s in zip(problem.targets, values, strict=True)]
    held = {k: h.value for k, h in cal.held.items()}
    units = {**{k: h.unit for k, h in cal.held.items()}, **{n: cal.free[n].unit for n in names}}
    return FitResult({n: float(f"{math.exp(v):.6g}") for n, v in zip(names, x, strict=True)},
                     {n: float(f"{v:.4g}") for n, v in zip(names, log_sd, strict=True)},
                     log_cov=[[float(f"{c:.6g}") for c in row] for row in cov], residuals=rows, held=held,
                     units=units, held_reason={k: h.why for k, h in cal.held.items()}, warnings=warnings,
                     cost=round(soft_l1(r0), 6), evaluations=problem.evaluations, sources=[*tables, *logs],
                     bounds={n: [cal.free[n].lo, cal.free[n].hi] for n in names}, interrupted=bool(stopped),
                     stopped_in=stopped)
