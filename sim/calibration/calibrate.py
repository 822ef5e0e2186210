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

import numpy as np

from sim.calibration.covariance import jacobian, standard_errors
from sim.calibration.observations import RATES, SHARES, Observation, is_request_table, observations, request_targets
from sim.calibration.problem import Problem, free_sets, held_sets, soft_l1
from sim.calibration.result import CalibrationResult, residual_row
from sim.calibration.targets import Target, TargetBuilder, without_calibration
from sim.config.calibrate import Calibrate
from sim.config.load import load_scenario, read_calibrate
from sim.config.paths import get_dotted, number_at
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError

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
    problem = Problem(path, targets, obs=obs, fixed=fixed, seed=seed, exclude=exclude)
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
    log_sd, cov, warnings = standard_errors(problem, names, x=x, lo=lo, hi=hi, jac=jac, r=r0)
    warnings += unmatched_patterns(cal, targets, [*tables, *logs]) + path_warnings
    values = problem.values(free_sets(names, x))
    rows = [residual_row(t, s) for t, s in zip(problem.targets, values, strict=True)]
    held = {k: h.value for k, h in cal.held.items()}
    units = {**{k: h.unit for k, h in cal.held.items()}, **{n: cal.free[n].unit for n in names}}
    return CalibrationResult({n: float(f"{math.exp(v):.6g}") for n, v in zip(names, x, strict=True)},
                             {n: float(f"{v:.4g}") for n, v in zip(names, log_sd, strict=True)},
                             log_cov=[[float(f"{c:.6g}") for c in row] for row in cov], residuals=rows, held=held,
                             units=units, held_reason={k: h.why for k, h in cal.held.items()}, warnings=warnings,
                             cost=round(soft_l1(r0), 6), evaluations=problem.evaluations, sources=[*tables, *logs],
                             bounds={n: [cal.free[n].lo, cal.free[n].hi] for n in names})
