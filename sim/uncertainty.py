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


def calibrated_parameters(path: str, overrides: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names, log means and log covariance of every calibration of the scenario that has a covariance."""
    _, raw = load_scenario(path, overrides)
    base = os.path.dirname(os.path.abspath(path))
    names: list[str] = []
    means: list[float] = []
    blocks: list[np.ndarray] = []
    for rel in raw.get("calibrations") or []:
        cal_path = os.path.relpath(os.path.normpath(os.path.join(base, rel)))
        cal = read_yaml(cal_path)
        if not isinstance(cal, dict) or "log_cov" not in cal:
            continue
        params = cal.get("parameters") or {}
        cov = np.asarray(cal["log_cov"], dtype=float)
        if cov.shape != (len(params), len(params)) or not np.all(np.isfinite(cov)):
            raise ScenarioError(cal_path, "log_cov", f"a {len(params)} x {len(params)} matrix of numbers, one row per "
                                "parameter")
        names += list(params)
        means += [math.log(float(v)) for v in params.values()]
        blocks.append(cov)
    if not names:
        raise ScenarioError(path, "calibrations", "a calibration written by `sim calibrate` (with log_cov) to draw "
                            "parameters from for --uncertainty")
    k = len(names)
    cov = np.zeros((k, k))
    at = 0
    for b in blocks:
        cov[at:at + len(b), at:at + len(b)] = b
        at += len(b)
    return names, np.array(means), cov


def run_with_uncertainty(path: str, overrides: list[str], draws: int, seed: int) -> dict:
    from .runner import run as run_scenario

    names, mean, cov = calibrated_parameters(path, overrides)
    rng = np.random.default_rng([seed, 2])
    vectors = rng.multivariate_normal(mean, cov, size=draws, method="eigh")
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
    return {"draws": draws, "parameters": names, "metrics": out}
