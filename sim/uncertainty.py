"""``sim run --uncertainty N``: each metric as a median with a 90% interval over fitted parameter uncertainty.

The scenario's calibration files written by ``sim calibrate`` carry a log-space covariance of their parameters
(``log_cov``). N parameter vectors are drawn from that multivariate normal (log-normal values), each run with its own
seed, so the interval holds both what the calibration does not pin down and the simulation's own sampling noise.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .errors import ScenarioError
from .scenario import load_scenario, read_yaml


def _matrix(cal_path: str, value, k: int) -> np.ndarray:
    ok = isinstance(value, list) and len(value) == k and all(isinstance(row, list) and len(row) == k for row in value)
    ok = ok and all(isinstance(x, float | int) and not isinstance(x, bool) for row in value for x in row)
    if not ok:
        raise ScenarioError(cal_path, "log_cov", f"a {k} x {k} matrix of numbers, one row per parameter")
    return np.array(value, dtype=float)


def calibrated_parameters(path: str, overrides: list[str]) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """Names, log means (the values the run really uses) and log covariance of the parameters of the scenario's
    ``sim calibrate`` files that can be drawn; and the names that cannot (no standard error, or set with --set)."""
    from .scenario import get_dotted

    _, raw = load_scenario(path, overrides)
    base = os.path.dirname(os.path.abspath(path))
    fixed = {o.split("=", 1)[0].strip() for o in overrides}
    names: list[str] = []
    means: list[float] = []
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
        cov = _matrix(cal_path, cal["log_cov"], len(params))
        keep = []
        for i, name in enumerate(params):
            found, value = get_dotted(raw, name)
            if name in fixed or name in names or not np.isfinite(cov[i, i]):
                held.append(name)
                continue
            if not found or isinstance(value, bool) or not isinstance(value, float | int) or value <= 0:
                raise ScenarioError(cal_path, f"parameters.{name}", "a positive number the scenario uses")
            keep.append(i)
            names.append(name)
            means.append(math.log(float(value)))  # the value this run uses (a scenario value or earlier file wins)
        sub = cov[np.ix_(keep, keep)]
        if sub.size and (not np.allclose(sub, sub.T, atol=1e-12) or np.linalg.eigvalsh(sub).min() < -1e-9 *
                         max(float(np.abs(sub).max()), 1e-300)):
            raise ScenarioError(cal_path, "log_cov", "a symmetric positive semi-definite matrix")
        blocks.append(sub)
    if not names:
        raise ScenarioError(path, "calibrations", "a calibration written by `sim calibrate` (with log_cov) to draw "
                            "parameters from for --uncertainty")
    k = len(names)
    cov = np.zeros((k, k))
    at = 0
    for blk in blocks:
        cov[at:at + len(blk), at:at + len(blk)] = blk
        at += len(blk)
    return names, np.array(means), cov, held


def run_with_uncertainty(path: str, overrides: list[str], draws: int, seed: int) -> dict:
    from .runner import run as run_scenario

    names, mean, cov, held = calibrated_parameters(path, overrides)
    rng = np.random.default_rng([seed, 2])
    # log-normal draws, kept within a factor of e^10 of the centre so every value stays a positive finite number
    vectors = np.clip(rng.multivariate_normal(mean, cov, size=draws, method="eigh"), mean - 10, mean + 10)
    samples: dict[str, list[float]] = {}
    for k, vec in enumerate(vectors):
        sets = [*overrides, *(f"{n}={math.exp(v):.8g}" for n, v in zip(names, vec, strict=True))]
        scn, _ = load_scenario(path, sets)
        res = run_scenario(scn, seed + k)
        for key, value in res.metrics.items():
            samples.setdefault(key, []).append(value)
    out = {}
    for key, values in samples.items():
        if len(values) == draws:
            v = np.array(values)
            out[key] = {"median": float(np.median(v)), "p5": float(np.percentile(v, 5)),
                        "p95": float(np.percentile(v, 95))}
    return {"draws": draws, "parameters": names, "held": held, "metrics": out}
