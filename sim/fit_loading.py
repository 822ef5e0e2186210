"""Fit load-stage parameters to measured cold / hot / link load rates.

Free parameters (all physical):
- ``pcie.efficiency`` (fraction of paper PCIe bandwidth a copy delivers), shared by every PCIe machine;
- per machine ``disks.<disk>.read_gbps`` (GB/s) and ``machines.<m>.loader.s_per_gb`` (s per GB).

The model is the loading mechanism itself (:mod:`sim.loading`, the scenario's composition, chunking, latencies and
per-tensor costs held fixed). Residuals are relative errors of predicted load seconds for each measured rate; fitted
by scipy's least_squares (soft-L1 loss), with standard errors from the Jacobian where degrees of freedom remain.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import numpy as np

from . import loading
from .errors import ScenarioError
from .hardware import memory_targets, stage_costs
from .scenario import Scenario, read_yaml, set_dotted, validate
from .tables import number, read_measured
from .units import GB, MIB


@dataclass(frozen=True)
class Observation:
    machine: str
    quantity: str  # cold_gbps | hot_gbps | link_gbps
    measured_gbps: float
    file_gb: float
    source: str


def read_observations(paths: list[str], scn: Scenario) -> list[Observation]:
    obs: list[Observation] = []
    for path in paths:
        _, rows = read_measured(path)
        missing = [c for c in ("machine", "cold_gbps", "hot_gbps") if rows and c not in rows[0]]
        if missing or not rows:
            raise ScenarioError(path, "", f"expected columns machine, cold_gbps, hot_gbps (and optionally link_gbps, "
                                f"file_gb) with at least one row; missing {missing or 'rows'}")
        for i, row in enumerate(rows, start=1):
            name = (row.get("machine") or "").strip()
            if name not in scn.machines:
                raise ScenarioError(path, f"row {i}.machine", f"bad value {name!r}: expected a machine of the scenario "
                                    f"({sorted(scn.machines)})")
            file_gb = number(row, "file_gb", path, i, required=False)
            if math.isnan(file_gb):
                model = scn.report.load_model or next(iter(scn.models))
                file_gb = scn.models[model].weights_gib * 2**30 / GB
            for q in ("cold_gbps", "hot_gbps", "link_gbps"):
                v = number(row, q, path, i, required=False)
                if not math.isnan(v):
                    obs.append(Observation(name, q, v, file_gb, path))
    return obs


def _predict_s(scn: Scenario, ob: Observation) -> float:
    m = scn.machines[ob.machine]
    targets = memory_targets(scn, m)
    cap = [t.capacity_bytes for t in targets]
    plan = loading.plan_chunks("fit", ob.file_gb * GB, 0, scn.loading.chunk_mib * MIB, targets, cap)
    costs = stage_costs(scn, m)
    if ob.quantity == "link_gbps":
        costs = replace(costs, loader_s_per_gb=0.0, loader_s_per_tensor=0.0)
    cached = np.full(plan.n, ob.quantity != "cold_gbps")
    return loading.load_time(loading.stage_times(plan, costs, cached), scn.loading.composition)


@dataclass
class FitResult:
    parameters: dict[str, float]
    standard_errors: dict[str, float]  # only for parameters the data over-determine
    exactly_determined: list[str]  # parameters with as many observations as unknowns: no error estimate
    residuals: list[dict]
    dof: int


def fit(raw: dict, source: str, table_paths: list[str]) -> FitResult:
    """Fit the load parameters of the machines in the tables, starting from the scenario ``raw`` mapping."""
    from scipy.optimize import least_squares

    base = validate(_with_start_values(raw, source), source)
    obs = read_observations(table_paths, base)
    names = sorted({o.machine for o in obs})
    pcie_machines = [n for n in names if base.machines[n].kind == "discrete"]
    paths: list[str] = []
    if pcie_machines:
        paths.append("pcie.efficiency")
    for n in names:
        paths += [f"disks.{base.machines[n].disk}.read_gbps", f"machines.{n}.loader.s_per_gb"]

    def to_values(x: np.ndarray) -> dict[str, float]:
        vals = {}
        for p, xi in zip(paths, x, strict=True):
            vals[p] = 1.0 / (1.0 + math.exp(-xi)) if p == "pcie.efficiency" else math.exp(xi)
        return vals

    def scenario_for(x: np.ndarray) -> Scenario:
        r = copy.deepcopy(raw)
        for p, v in to_values(x).items():
            set_dotted(r, p, v, source)
        return validate(r, source)

    def resid(x: np.ndarray) -> np.ndarray:
        s = scenario_for(x)
        return np.array([_predict_s(s, o) * o.measured_gbps / o.file_gb - 1.0 for o in obs])

    x0 = []
    for p in paths:
        if p == "pcie.efficiency":
            x0.append(math.log(0.8 / 0.2))
        else:
            x0.append(math.log(2.0 if p.endswith("read_gbps") else 0.1))
    sol = least_squares(resid, np.array(x0), loss="soft_l1", f_scale=0.05, x_scale=1.0, xtol=1e-12, ftol=1e-12)
    values = to_values(sol.x)
    dof = len(obs) - len(paths)
    # Degrees of freedom per group of parameters: the link efficiency is pinned by the link observations only;
    # each machine's disk and loader costs by its cold and hot observations only.
    n_link = sum(o.quantity == "link_gbps" for o in obs)
    exact = [] if n_link > 1 or "pcie.efficiency" not in paths else ["pcie.efficiency"]
    for n in names:
        if sum(o.machine == n and o.quantity != "link_gbps" for o in obs) <= 2:
            disk = f"disks.{base.machines[n].disk}.read_gbps"
            exact += [p for p in paths if p.startswith(f"machines.{n}.") or p == disk]
    ses: dict[str, float] = {}
    if dof > 0:
        sigma2 = float(np.sum(sol.fun**2)) / dof
        try:
            cov = np.linalg.inv(sol.jac.T @ sol.jac) * sigma2
            for k, p in enumerate(paths):
                if p in exact:
                    continue
                d = values[p] * (1 - values[p]) if p == "pcie.efficiency" else values[p]  # d value / d x
                ses[p] = float(math.sqrt(max(cov[k, k], 0.0)) * abs(d))
        except np.linalg.LinAlgError:
            pass
    s = scenario_for(sol.x)
    residuals = []
    for o in obs:
        sim_gbps = o.file_gb / _predict_s(s, o)
        residuals.append({"machine": o.machine, "quantity": o.quantity, "measured_gbps": o.measured_gbps,
                          "fitted_gbps": round(sim_gbps, 6), "rel_error": round(sim_gbps / o.measured_gbps - 1, 6),
                          "source": o.source})
    return FitResult({p: round(v, 6) for p, v in values.items()}, {p: round(v, 6) for p, v in ses.items()},
                     exact, residuals, dof)


def _with_start_values(raw: dict, source: str) -> dict:
    """Fill fitted keys that the scenario leaves to its calibration with start values, so it validates."""
    r = copy.deepcopy(raw)
    for m in (r.get("machines") or {}).values():
        if isinstance(m, dict):
            loader = m.setdefault("loader", {})
            if isinstance(loader, dict):
                loader.setdefault("s_per_gb", 0.1)
    for d in (r.get("disks") or {}).values():
        if isinstance(d, dict):
            d.setdefault("read_gbps", 2.0)
    return r


def load_raw_for_fit(path: str) -> dict:
    """The scenario mapping without its calibration files (they are what is being produced)."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ScenarioError(path, "", "expected a YAML map at the top level")
    r = dict(raw)
    r["calibrations"] = []
    return _with_start_values(r, path)
