"""``--uncertainty N``: each metric as a median with a 90% interval over what the inputs do not pin down.

Two sources are drawn together: the scenario's calibration files written by ``sim calibrate`` carry a log-space
covariance of their fitted parameters (``log_cov``), and the scenario's ``uncertainty`` section gives the scatter of
measured input values it uses as they are (a decode rate measured once, say) as an independent log-normal spread.
N parameter vectors are drawn from that multivariate normal, inside the bounds each fit searched, and each run gets
its own seed, so the interval holds what the calibration cannot pin down, the inputs' scatter and the simulation's own
sampling noise.
"""

from __future__ import annotations

import math
import os

import numpy as np

from sim.config.load import load_scenario, override_path
from sim.config.paths import number_at
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError
from sim.core.progress import progress


def _matrix(cal_path: str, value, k: int) -> np.ndarray:
    ok = isinstance(value, list) and len(value) == k and all(isinstance(row, list) and len(row) == k for row in value)
    ok = ok and all(isinstance(x, float | int) and not isinstance(x, bool) for row in value for x in row)
    if not ok:
        raise ScenarioError(cal_path, "log_cov", f"a {k} x {k} matrix of numbers, one row per parameter")
    return np.array(value, dtype=float)


def calibrated_parameters(path: str, overrides: list[str]
                          ) -> tuple[list[str], np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Names, log means (the values the run really uses) and log covariance of the parameters of the scenario's
    ``sim calibrate`` files that can be drawn; the names that cannot (no standard error, or set with --set); and the
    log-space bounds the fit searched (rows of lo, hi; infinite where the file names none)."""
    scn, raw = load_scenario(path, overrides)
    base = os.path.dirname(os.path.abspath(path))
    fixed = {override_path(o) for o in overrides}
    names: list[str] = []
    means: list[float] = []
    bounds: list[tuple[float, float]] = []
    blocks: list[np.ndarray] = []
    held: list[str] = []
    for rel in raw.get("calibrations") or []:
        cal_path = os.path.relpath(os.path.normpath(os.path.join(base, rel)))
        cal = read_yaml(cal_path)
        if not isinstance(cal, dict) or "log_cov" not in cal:
            continue
        params = cal.get("parameters")
        if not isinstance(params, dict) or not params:
            raise ScenarioError(cal_path, "parameters", "a map of dotted.path: value")
        order = cal.get("fitted", list(params))  # log_cov is over the fitted parameters; held ones are not drawn
        if not isinstance(order, list) or not all(isinstance(n, str) and n in params for n in order):
            raise ScenarioError(cal_path, "fitted", "a list of names under parameters")
        cov = _matrix(cal_path, cal["log_cov"], len(order))
        keep = []
        for i, name in enumerate(order):
            if name in fixed or name in names or not np.isfinite(cov[i, i]):
                held.append(name)
                continue
            keep.append(i)
            names.append(name)
            # the value this run uses (a scenario value or earlier file wins)
            means.append(_log_value(raw, name, cal_path, f"parameters.{name}"))
            bounds.append(_bounds(cal_path, cal.get("bounds"), name))
        sub = cov[np.ix_(keep, keep)]
        if sub.size and (not np.allclose(sub, sub.T, atol=1e-12) or np.linalg.eigvalsh(sub).min() < -1e-9 *
                         max(float(np.abs(sub).max()), 1e-300)):
            raise ScenarioError(cal_path, "log_cov", "a symmetric positive semi-definite matrix")
        blocks.append(sub)
    extra = []
    for name, sp in scn.uncertainty.items():
        if name in fixed or name in names:
            held.append(name)
            continue
        names.append(name)
        means.append(_log_value(raw, name, path, f"uncertainty.{name}"))
        bounds.append((-math.inf, math.inf))
        extra.append(sp.log_sd ** 2)
    if extra:
        blocks.append(np.diag(extra))
    if not names:
        raise ScenarioError(path, "calibrations", "a calibration written by `sim calibrate` (with log_cov) or an "
                            "uncertainty section to draw parameters from for --uncertainty")
    k = len(names)
    cov = np.zeros((k, k))
    at = 0
    for blk in blocks:
        cov[at:at + len(blk), at:at + len(blk)] = blk
        at += len(blk)
    return names, np.array(means), cov, held, np.array(bounds)


def _log_value(raw: dict, name: str, source: str, key: str) -> float:
    """log of the positive number the scenario uses at ``name``; one line naming ``key`` otherwise."""
    from sim.config.paths import get_dotted

    found, value = get_dotted(raw, name)
    number = number_at(value) if found else None
    if number is None or number <= 0:
        raise ScenarioError(source, key, "a path holding a positive number the scenario uses")
    return math.log(number)


def _bounds(cal_path: str, table, name: str) -> tuple[float, float]:
    """Log-space search bounds of one fitted parameter, from the file's ``bounds`` (none: unbounded)."""
    if table is None:
        return -math.inf, math.inf
    pair = table.get(name) if isinstance(table, dict) else None
    ok = isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, float | int) and not isinstance(v, bool)
                                                           and v > 0 for v in pair) and pair[0] < pair[1]
    if not ok:
        raise ScenarioError(cal_path, f"bounds.{name}", "a pair [lo, hi] of positive numbers, lo < hi")
    return math.log(pair[0]), math.log(pair[1])


def parameter_draws(path: str, overrides: list[str], draws: int, seed: int) -> tuple[list[str], list[str],
                                                                                 list[list[str]]]:
    """(drawn names, held names, per draw the ``--set`` strings): log-normal draws, truncated to the bounds the fit
    searched (a parameter the data barely pin down would otherwise wander into values the fit never considered) and
    to a factor of e^10 around the centre."""
    names, mean, cov, held, bounds = calibrated_parameters(path, overrides)
    rng = np.random.default_rng([seed, 2])
    low = np.maximum(bounds[:, 0], mean - 10)
    high = np.minimum(bounds[:, 1], mean + 10)
    # a truncated normal: draws outside the box are drawn again (clipping would pile them on the bounds); after a
    # few rounds any left (a centre at a bound) are clipped
    vectors = rng.multivariate_normal(mean, cov, size=draws, method="eigh")
    for _ in range(20):
        bad = ((vectors < low) | (vectors > high)).any(axis=1)
        if not bad.any():
            break
        vectors[bad] = rng.multivariate_normal(mean, cov, size=int(bad.sum()), method="eigh")
    vectors = np.clip(vectors, low, high)
    sets = [[*overrides, *(f"{n}={math.exp(v):.8g}" for n, v in zip(names, vec, strict=True))] for vec in vectors]
    return names, held, sets


def interval(values: list[float]) -> dict[str, float]:
    """Median and 90% interval of the draws; sample quantiles (no interpolation), so an infinite draw (machines
    that never break even) stays infinite rather than turning the interval into NaN."""
    v = np.array(values, dtype=float)
    q = {k: float(np.percentile(v, p, method="inverted_cdf")) for k, p in (("p5", 5), ("median", 50), ("p95", 95))}
    return {"median": q["median"], "p5": q["p5"], "p95": q["p95"]}


def _interrupted(draws: int, done: int) -> dict:
    """What a result says when Ctrl-C stopped it after ``done`` of ``draws`` draws (nothing when all were done)."""
    return {} if done == draws else {"draws_done": done, "interrupted": True}


def run_with_uncertainty(path: str, overrides: list[str], draws: int, seed: int) -> dict:
    """Every metric as a median and 90% interval over ``draws`` runs, each with its parameter draw and its own seed
    (``seed + k``): ``{"draws", "parameters", "held", "metrics": {NAME: {median, p5, p95}}}``. Ctrl-C
    (KeyboardInterrupt) stops it: the summary is over the draws finished, with ``"draws_done": k, "interrupted":
    true`` added (Ctrl-C before the first draw finished propagates)."""
    from sim.runner import run as run_scenario

    names, held, draw_sets = parameter_draws(path, overrides, draws, seed)
    samples: dict[str, list[float]] = {}
    done = 0
    with progress(draws, "uncertainty", unit="draw") as bar:
        try:
            for k, sets in enumerate(draw_sets):
                scn, _ = load_scenario(path, sets)
                res = run_scenario(scn, seed + k)
                for key, value in res.metrics.items():
                    samples.setdefault(key, []).append(value)
                done += 1
                bar.update()
        except KeyboardInterrupt:
            if done == 0:
                raise
            for values in samples.values():  # a draw cut short in the middle of its metrics (never, but cheap)
                del values[done:]
    out = {key: interval(values) for key, values in samples.items() if len(values) == done}
    return {"draws": draws, "parameters": names, "held": held, "metrics": out, **_interrupted(draws, done)}


def breakeven_with_uncertainty(path: str, overrides: list[str], model: str, a: str, b: str, draws: int,
                               seed: int) -> dict:
    """The break-even and the clear-win boundary over ``draws`` parameter vectors: median
    and 90% interval of each (infinite: never), how often each machine is the faster decoder, and in how many draws
    the machines never break even. The clear win is that of the machine that decodes faster at the scenario's own
    values (``clear_win_machine``): from how many tokens it wins clearly, never in a draw where it does not. The
    break-even divides a load-time difference by a difference of reciprocal decode rates, so scatter in single-sample
    rates moves it far. Ctrl-C (KeyboardInterrupt) stops it: the summary is over the draws finished, with
    ``"draws_done": k, "interrupted": true`` added (Ctrl-C before the first draw finished propagates)."""
    from sim.lab.breakeven import breakeven

    names, held, draw_sets = parameter_draws(path, overrides, draws, seed)
    fast = breakeven(load_scenario(path, overrides)[0], model, a, b, seed)["faster_decoder"] or a
    found: list[tuple[float, float, str | None]] = []  # per draw: break-even, clear win from, faster decoder
    with progress(draws, "breakeven uncertainty", unit="draw") as bar:
        try:
            for k, sets in enumerate(draw_sets):
                scn, _ = load_scenario(path, sets)
                r = breakeven(scn, model, a, b, seed + k)
                region = r["clear_win"][fast]
                found.append((r["breakeven_tokens"], region[0] if region is not None and math.isinf(region[1])
                              else math.inf, r["faster_decoder"]))
                bar.update()
        except KeyboardInterrupt:
            if not found:
                raise
    cross, clear = [f[0] for f in found], [f[1] for f in found]
    faster = [f[2] for f in found]
    return {"draws": draws, "parameters": names, "held": held,
            "breakeven_tokens": interval(cross) | {"never_share": float(np.mean(np.isinf(cross)))},
            "clear_win_machine": fast,
            "clear_win_tokens": interval(clear) | {"never_share": float(np.mean(np.isinf(clear)))},
            "faster_decoder_share": {m: float(np.mean([f == m for f in faster])) for m in (a, b)},
            **_interrupted(draws, len(faster))}
