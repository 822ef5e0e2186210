"""A calibration problem: the targets and replayed requests, simulated at a vector of free values (``--set``
strings), their residuals in units of each cell's tolerance, and the robust loss the fit minimises."""

from __future__ import annotations

import math

import numpy as np

from sim.calibration.observations import Observation, replay
from sim.calibration.targets import Target, check_metrics, error, run_experiments, simulated, without_calibration
from sim.config.calibrate import Calibrate
from sim.config.load import load_scenario


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


def free_sets(names: list[str], x: np.ndarray) -> list[str]:
    """Free values at log values ``x`` as ``--set`` strings (6 significant digits: what the file records)."""
    return [f"{n}={math.exp(v):.6g}" for n, v in zip(names, x, strict=True)]


def held_sets(cal: Calibrate) -> list[str]:
    """The held values as ``--set`` strings, applied to every simulation of the fit."""
    return [f"{k}={h.value!r}" for k, h in cal.held.items()]
