"""Fit load-stage parameters to measured cold / hot / link load rates.

Free parameters (all physical):
- ``pcie.efficiency`` (fraction of paper PCIe bandwidth a copy delivers), shared by every PCIe machine, when a link
  rate was measured;
- per machine ``disks.<disk>.read_gbps`` (GB/s; once per disk, machines may share one) and the host's cost:
  ``machines.<m>.loader.s_per_gb`` (s per GB) for a generic loader, ``machines.<m>.loader.copy_gbps`` (the host's
  memory copy bandwidth, GB/s) for a loader of a real kind, whose copies it prices.
A parameter the scenario file itself sets is held fixed at that value (the scenario would override a fitted one).

The model is the loading mechanism itself (:mod:`sim.lab.loading`, with the scenario's composition, buffers, chunking,
latencies and per-tensor costs). Residuals are relative errors of predicted load seconds for each measured rate,
fitted by scipy's least_squares (soft-L1 loss). Standard errors come from the Jacobian; a parameter is reported as
exactly determined when every observation it depends on has leverage 1 (the data fix it with no check left).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from sim.config.checks import MAX_CHUNKS
from sim.config.load import validate
from sim.config.paths import get_dotted, set_dotted
from sim.config.scenario import Scenario
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError
from sim.core.units import GB, GIB, MIB
from sim.formats.load_times import read_load_rates
from sim.lab import loading
from sim.lab.loaders import lone_load_s, stage_costs
from sim.lab.resources import memory_targets

START = {"pcie.efficiency": 0.8, "read_gbps": 2.0, "s_per_gb": 0.1, "copy_gbps": 10.0}


@dataclass(frozen=True)
class Observation:
    machine: str
    quantity: str  # cold_gbps | hot_gbps | link_gbps
    measured_gbps: float
    file_gb: float
    source: str


def check_file_size(file_gb: float | None, path: str, i: int, scn: Scenario) -> float | None:
    """``file_gb`` (GB, None when blank) of row ``i``, checked as a load of at most ``MAX_CHUNKS`` chunks of the
    scenario's ``loading.chunk_mib``, the bound a scenario's models are held to (beyond it a load is events without
    end)."""
    chunk_mib = scn.loading.chunk_mib
    if file_gb is not None and file_gb * GB > MAX_CHUNKS * chunk_mib * MIB:
        raise ScenarioError(path, f"row {i}.file_gb", f"{file_gb:,.6g} GB is more than {MAX_CHUNKS:,} chunks of "
                            f"loading.chunk_mib ({chunk_mib:g} MiB): expected a model file of at most "
                            f"{MAX_CHUNKS * chunk_mib * MIB / GB:,.6g} GB, or a larger chunk_mib")
    return file_gb


def read_observations(paths: list[str], scn: Scenario) -> list[Observation]:
    """The measured rates of the load-rate tables (:func:`sim.formats.load_times.read_load_rates`) on the
    scenario's machines: a blank file size is the scenario's ``report.load_model``'s weights."""
    obs: list[Observation] = []
    for path in paths:
        for row in read_load_rates(path):
            name, i = row.machine, row.line
            if name not in scn.machines:
                raise ScenarioError(path, f"row {i}.machine", f"bad value {name!r}: expected a machine of the scenario "
                                    f"({sorted(scn.machines)})")
            file_gb = check_file_size(row.file_gb, path, i, scn)
            if file_gb is None:
                model = scn.report.load_model
                if model is None:
                    raise ScenarioError(path, f"row {i}.file_gb", "blank: expected the file size, or report.load_model "
                                        "in the scenario to use its weights")
                file_gb = scn.models[model].weights_gib * GIB / GB
            for q, v in (("cold_gbps", row.cold_gbps), ("hot_gbps", row.hot_gbps), ("link_gbps", row.link_gbps)):
                if v is None:
                    continue
                if q == "link_gbps" and scn.machines[name].kind != "discrete":
                    raise ScenarioError(path, f"row {i}.link_gbps", f"{name} has unified memory: no PCIe link")
                obs.append(Observation(name, q, v, file_gb, path))
    if not obs:
        raise ScenarioError(", ".join(paths), "", "no measured rates: expected cold_gbps, hot_gbps or link_gbps values")
    return obs


def _predict_s(scn: Scenario, ob: Observation) -> float:
    m = scn.machines[ob.machine]
    targets = memory_targets(scn, m)
    cap = [t.capacity_bytes for t in targets]
    plan = loading.plan_chunks("fit", ob.file_gb * GB, tensors=0, chunk_bytes=scn.loading.chunk_mib * MIB,
                               targets=targets, free_bytes=cap)
    costs = stage_costs(scn, m)
    if ob.quantity == "link_gbps":
        costs = costs.pinned_copy_only()
    cached = np.full(plan.n, ob.quantity != "cold_gbps")
    return lone_load_s(scn, costs, plan, cached)


@dataclass
class FitResult:
    parameters: dict[str, float]
    standard_errors: dict[str, float]  # only for parameters the data over-determine
    exactly_determined: list[str]  # parameters the data fix with no check left: no error estimate
    held_fixed: dict[str, float]  # set by the scenario file itself, not fitted
    residuals: list[dict]
    dof: int


def _free_parameters(raw: dict, scn: Scenario, obs: list[Observation]) -> tuple[list[str], dict[str, float]]:
    names = sorted({o.machine for o in obs})
    candidates: list[str] = []
    if any(o.quantity == "link_gbps" for o in obs):
        candidates.append("pcie.efficiency")
    for n in names:
        host_cost = "s_per_gb" if scn.machines[n].loader.kind == "generic" else "copy_gbps"
        candidates += [f"disks.{scn.machines[n].disk}.read_gbps", f"machines.{n}.loader.{host_cost}"]
    candidates = list(dict.fromkeys(candidates))  # a disk shared by two machines is one parameter
    fixed = {p: float(get_dotted(raw, p)[1]) for p in candidates if get_dotted(raw, p)[0]}
    return [p for p in candidates if p not in fixed], fixed


def fit(raw: dict, source: str, table_paths: list[str]) -> FitResult:
    """Fit the load parameters of the machines in the tables; ``raw`` is the scenario without its calibrations."""
    from scipy.optimize import least_squares

    start = copy.deepcopy(raw)
    for d in (start.get("disks") or {}).values():
        if isinstance(d, dict):
            d.setdefault("read_gbps", START["read_gbps"])
    for m in (start.get("machines") or {}).values():
        if isinstance(m, dict) and isinstance(m.setdefault("loader", {}), dict):
            generic = m["loader"].get("kind", "generic") == "generic"
            m["loader"].setdefault("s_per_gb" if generic else "copy_gbps", START["s_per_gb" if generic else
                                                                                  "copy_gbps"])
    base = validate(start, source)
    obs = read_observations(table_paths, base)
    paths, fixed = _free_parameters(raw, base, obs)
    dof = len(obs) - len(paths)
    if not paths:
        raise ScenarioError(source, "", "every parameter the tables measure is set in the scenario: nothing to fit")
    if dof < 0:
        raise ScenarioError(", ".join(table_paths), "", f"{len(obs)} measured rates cannot determine {len(paths)} "
                            f"parameters ({', '.join(paths)}): expected cold and hot rates for each machine")

    def to_values(x: np.ndarray) -> dict[str, float]:
        return {p: 1.0 / (1.0 + math.exp(-xi)) if p == "pcie.efficiency" else math.exp(xi)
                for p, xi in zip(paths, x, strict=True)}

    def scenario_for(x: np.ndarray) -> Scenario:
        r = copy.deepcopy(start)
        for p, v in to_values(x).items():
            set_dotted(r, p, v, source)
        return validate(r, source)

    def resid(x: np.ndarray) -> np.ndarray:
        s = scenario_for(x)
        return np.array([_predict_s(s, o) * o.measured_gbps / o.file_gb - 1.0 for o in obs])

    x0 = [math.log(0.8 / 0.2) if p == "pcie.efficiency" else math.log(START[p.rsplit(".", 1)[1]]) for p in paths]
    _comparable(scenario_for(np.array(x0)), obs)
    sol = least_squares(resid, np.array(x0), loss="soft_l1", f_scale=0.05, xtol=1e-12, ftol=1e-12)
    values = to_values(sol.x)
    jac = sol.jac
    jtj_inv = np.linalg.pinv(jac.T @ jac)
    leverage = np.einsum("ij,jk,ik->i", jac, jtj_inv, jac)
    exact = [p for k, p in enumerate(paths) if np.all(leverage[np.abs(jac[:, k]) > 1e-12] > 1 - 1e-6)]
    ses: dict[str, float] = {}
    if dof > 0:
        sigma2 = float(np.sum(sol.fun**2)) / dof
        for k, p in enumerate(paths):
            if p in exact:
                continue
            d = values[p] * (1 - values[p]) if p == "pcie.efficiency" else values[p]  # d value / d x
            ses[p] = float(math.sqrt(max(jtj_inv[k, k] * sigma2, 0.0)) * abs(d))
    s = scenario_for(sol.x)
    residuals = []
    for o in obs:
        sim_gbps = o.file_gb / _predict_s(s, o)
        residuals.append({"machine": o.machine, "quantity": o.quantity, "measured_gbps": o.measured_gbps,
                          "fitted_gbps": round(sim_gbps, 6), "rel_error": round(sim_gbps / o.measured_gbps - 1, 6),
                          "source": o.source})
    return FitResult({p: round(v, 6) for p, v in values.items()}, {p: round(v, 6) for p, v in ses.items()},
                     exactly_determined=exact, held_fixed=fixed, residuals=residuals, dof=dof)


def _comparable(scn: Scenario, obs: list[Observation]) -> None:
    """A one-line error naming the first observation whose predicted load at the fit's start is not a finite
    positive time (a size in its range, yet below a byte: 5e-324 GB)."""
    for o in obs:
        with np.errstate(all="ignore"):
            seconds = _predict_s(scn, o)
        if not (math.isfinite(seconds) and seconds > 0 and math.isfinite(seconds * o.measured_gbps / o.file_gb)):
            raise ScenarioError(o.source, f"{o.machine}.{o.quantity}", f"{o.measured_gbps:.4g} GB/s of a "
                                f"{o.file_gb:.4g} GB file, predicted in {seconds:.4g} s: no finite relative error to "
                                "fit; expected a rate and a size the machine could have measured")


def load_raw_for_fit(path: str) -> dict:
    """The scenario mapping without its calibration files (they are what is being produced)."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ScenarioError(path, "", "expected a YAML map at the top level")
    return {**raw, "calibrations": []}
