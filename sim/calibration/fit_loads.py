"""Fit the loaders' physical parameters to measured load times and rates, and check them on rows kept out.

A table row (calibration/public_loads.csv) names a machine of the scenario, optionally the disk and loader kind it
ran with, what was measured (:data:`QUANTITIES`) and whether it is a ``fit`` row, with the dotted parameters it
pins, or a ``check`` row kept out of the fit. Each row is predicted by the loading mechanism itself
(:mod:`sim.lab.loaders`, :mod:`sim.lab.loading`, :mod:`sim.lab.startup`). The free parameters are those the fit rows
name; scipy's least_squares fits them to the log ratios of predicted to measured values. A parameter is reported
as exactly determined when every fit row it depends on has leverage 1 (no check left from the fit itself).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import numpy as np

from sim.calibration.fit_loading import check_file_size
from sim.config.links import link_info
from sim.config.load import validate
from sim.config.paths import set_dotted
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError
from sim.core.units import GB, KIB, MIB
from sim.formats.load_times import read_load_times
from sim.formats.measured_tables import read_provenance
from sim.lab import loading
from sim.lab.loaders import PATHS, copy_bandwidth, lone_load_s, stage_costs
from sim.lab.resources import memory_targets
from sim.lab.startup import fixed_s

# Where each kind of parameter starts and the physical range it may take (the fit works in logs). Latency starts
# high, where the requests (not the disk's bandwidth) limit the rate and the rate moves with it.
START = {"read_gbps": 2.0, "stream_gbps": 1.0, "latency_s": 0.1, "hit_s_per_gb": 0.1, "copy_gbps": 10.0,
         "copy_gbps_per_thread": 10.0,
         "process_s": 1.0, "gpu_context_s": 0.5, "kv_alloc_s": 1.0, "warmup_s": 1.0, "efficiency": 0.8}
BOUNDS = {"read_gbps": (1e-3, 100.0), "stream_gbps": (1e-3, 100.0), "latency_s": (1e-7, 1.0),
          "hit_s_per_gb": (1e-6, 100.0), "copy_gbps": (0.1, 1000.0), "copy_gbps_per_thread": (0.1, 1000.0),
          "process_s": (1e-3, 3600.0),
          "gpu_context_s": (1e-3, 600.0), "kv_alloc_s": (1e-3, 3600.0), "warmup_s": (1e-3, 7200.0),
          "efficiency": (0.05, 0.999)}


@dataclass(frozen=True)
class Row:
    """A row of the public load-times table (:class:`sim.formats.load_times.LoadTime`) on the scenario's machine:
    sizes in KiB and GB, ``measured`` in its quantity's unit."""

    row_id: str
    machine: str
    disk: str | None
    loader: str | None
    quantity: str
    request_kib: float | None
    file_gb: float | None
    gpu_gb: float
    cache: str
    measured: float
    role: str
    parameters: tuple[str, ...]
    source: str


def read_rows(path: str, scn: Scenario) -> list[Row]:
    """The rows of the load-times table at ``path`` (:func:`sim.formats.load_times.read_load_times`) checked against
    the scenario: its machines, disks and the loader kinds and parameters it has; a one-line ScenarioError else."""
    out: list[Row] = []
    tree = scn.model_dump()
    for t in read_load_times(path):
        i, machine, quantity = t.line, t.machine, t.quantity
        if machine not in scn.machines:
            raise ScenarioError(path, f"row {i}.machine", f"{machine!r}: expected a machine of the scenario "
                                f"({sorted(scn.machines)})")
        if t.disk is not None and t.disk not in scn.disks:
            raise ScenarioError(path, f"row {i}.disk", f"{t.disk!r}: expected a disk of the scenario "
                                f"({sorted(scn.disks)})")
        if t.loader is not None and t.loader not in PATHS:
            raise ScenarioError(path, f"row {i}.loader", f"{t.loader!r}: expected one of {', '.join(PATHS)} (or "
                                "blank: the machine's)")
        if quantity.startswith("h2d") and scn.machines[machine].kind != "discrete":
            raise ScenarioError(path, f"row {i}.machine", f"{machine!r} has no GPU behind a link: expected a discrete "
                                f"machine for {quantity}")
        if (t.loader or scn.machines[machine].loader.kind) == "generic" and quantity != "h2d_pinned_gbps":
            raise ScenarioError(path, f"row {i}.loader", "a generic loader: expected a real loader kind here or on "
                                f"the machine ({', '.join(PATHS)})")
        for p in t.parameters:
            if p.rsplit(".", 1)[-1] not in BOUNDS or not _exists(tree, p):
                raise ScenarioError(path, f"row {i}.parameters", f"{p!r}: expected the dotted path of a parameter "
                                    f"of the scenario ending in one of {', '.join(BOUNDS)}")
        out.append(Row(t.row_id, machine, t.disk, t.loader, quantity, t.request_kib,
                       check_file_size(t.file_gb, path, i, scn), t.gpu_gb or 0.0, t.cache, t.measured, t.role,
                       t.parameters, path))
    return out


def _exists(tree: dict, dotted: str) -> bool:
    """Whether ``dotted`` names a field of the validated scenario (its parents must exist; the field may be unset)."""
    node = tree
    *parents, last = dotted.split(".")
    for key in parents:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return isinstance(node, dict) and last in node


def _machine(scn: Scenario, row: Row):
    m = scn.machines[row.machine]
    if row.disk is not None:
        m = m.model_copy(update={"disk": row.disk})
    if row.loader is not None:
        m = m.model_copy(update={"loader": m.loader.model_copy(update={"kind": row.loader})})
    return m


def predict(scn: Scenario, row: Row) -> float:
    """What the mechanism gives for ``row`` (the row's unit)."""
    m = _machine(scn, row)
    if row.quantity == "copy_gbps":
        return copy_bandwidth(scn, m)
    if row.quantity in ("h2d_pinned_gbps", "h2d_pageable_gbps"):
        link = link_info(scn, m, next(iter(m.gpus))).gbps
        if row.quantity == "h2d_pinned_gbps":
            return link
        return 1.0 / (1.0 / link + 1.0 / copy_bandwidth(scn, m))
    costs = stage_costs(scn, m)
    if row.quantity == "direct_read_gbps":
        return replace(costs, request_bytes=row.request_kib * KIB, queue_depth=1, readers=1).disk_gbps_effective()
    if row.quantity == "read_gbps_during_load":
        return costs.disk_gbps_effective()
    targets = memory_targets(scn, m)
    total = row.file_gb * GB
    free = [row.gpu_gb * GB] + [0.0] * (len(targets) - 1) if m.kind == "discrete" else [total]
    plan = loading.plan_chunks("row", total, tensors=0, chunk_bytes=scn.loading.chunk_mib * MIB, targets=targets,
                               free_bytes=free)
    return fixed_s(m) + lone_load_s(scn, costs, plan, np.full(plan.n, row.cache == "warm"))


@dataclass
class LoadsFit:
    parameters: dict[str, float]
    exactly_determined: list[str]
    fit_rows: list[dict]
    check_rows: list[dict]
    dof: int

    @property
    def check_median_abs_error(self) -> float:
        errs = [abs(r["rel_error"]) for r in self.check_rows]
        return float(np.median(errs)) if errs else math.nan


def _to_value(path: str, x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if path.endswith("efficiency") else math.exp(x)


def _to_x(path: str, v: float) -> float:
    return math.log(v / (1 - v)) if path.endswith("efficiency") else math.log(v)


def _start(path: str) -> float:
    return _to_x(path, START[path.rsplit(".", 1)[1]])


def fit(raw: dict, source: str, table: str) -> LoadsFit:
    """Fit the parameters the table's fit rows name; ``raw`` is the scenario without its calibrations."""
    from scipy.optimize import least_squares

    start = copy.deepcopy(raw)
    rows0 = read_rows(table, validate(_with(start, {}, source), source))
    paths = list(dict.fromkeys(p for r in rows0 if r.role == "fit" for p in r.parameters))
    fits = [r for r in rows0 if r.role == "fit"]
    if len(fits) < len(paths):
        raise ScenarioError(table, "", f"{len(fits)} fit rows cannot determine {len(paths)} parameters")

    def scenario_for(x: np.ndarray) -> Scenario:
        return validate(_with(start, {p: _to_value(p, v) for p, v in zip(paths, x, strict=True)}, source), source)

    def resid(x: np.ndarray) -> np.ndarray:
        s = scenario_for(x)
        return np.array([math.log(predict(s, r) / r.measured) for r in fits])

    x0 = np.array([_start(p) for p in paths])
    comparable(table, scenario_for(x0), fits)
    lo, hi = zip(*[[_to_x(p, b) for b in BOUNDS[p.rsplit(".", 1)[1]]] for p in paths], strict=True)
    sol = least_squares(resid, x0, bounds=(lo, hi), xtol=1e-12, ftol=1e-12, gtol=1e-12)
    jac = sol.jac
    leverage = np.einsum("ij,jk,ik->i", jac, np.linalg.pinv(jac.T @ jac), jac)
    exact = [p for k, p in enumerate(paths) if np.all(leverage[np.abs(jac[:, k]) > 1e-12] > 1 - 1e-6)]
    values = {p: float(f"{_to_value(p, v):.6g}") for p, v in zip(paths, sol.x, strict=True)}  # 6 digits
    s = validate(_with(start, values, source), source)  # rows reported at the values written

    def report(r: Row) -> dict:
        sim_value = predict(s, r)
        return {"row_id": r.row_id, "machine": r.machine, "quantity": r.quantity, "measured": r.measured,
                "simulated": round(sim_value, 6), "rel_error": round(sim_value / r.measured - 1, 6) + 0.0}

    return LoadsFit(values, exact, [report(r) for r in fits], [report(r) for r in rows0 if r.role == "check"],
                    dof=len(fits) - len(paths))


def comparable(table: str, scn: Scenario, rows: list[Row]) -> None:
    """A one-line error naming the first row whose prediction at the fit's start and measured value have no finite
    positive ratio (a value in its range, yet so small that the log ratio the fit works in overflows: 5e-324)."""
    for r in rows:
        with np.errstate(all="ignore"):
            simulated = predict(scn, r)
            ratio = simulated / r.measured
        if not (math.isfinite(ratio) and ratio > 0):
            raise ScenarioError(table, f"row {r.row_id}", f"measured {r.measured:.4g} against {simulated:.4g} "
                                f"predicted ({r.quantity}): no finite ratio to fit; expected a value the scenario's "
                                "machine could have measured")


def _with(raw: dict, values: dict[str, float], source: str) -> dict:
    """``raw`` with ``values`` set, and a placeholder bandwidth for disks that have none yet (being fitted)."""
    r = copy.deepcopy(raw)
    for p, v in values.items():
        set_dotted(r, p, v, source)
    for d in (r.get("disks") or {}).values():
        if isinstance(d, dict):
            d.setdefault("read_gbps", START["read_gbps"])
    return r


UNITS = {"read_gbps": "GB/s", "latency_s": "s", "hit_s_per_gb": "s/GB", "process_s": "s", "efficiency": "fraction",
         "copy_gbps_per_thread": "GB/s"}


def calibration_yaml(result: LoadsFit, scenario: str, table: str, out_file: str | None) -> str:
    import os

    from sim.config.yaml_io import dump_yaml

    here = os.path.dirname(os.path.abspath(out_file)) if out_file else os.getcwd()
    prov = read_provenance(table)
    header = ["# Loader calibration written by `sim fit-loads`; do not edit by hand.",
              "# Reproduce from the project root with:",
              f"#   sim fit-loads {scenario} --table {table}" + (f" --out {out_file}" if out_file else ""),
              *[f"# {line}" for line in prov[:2]],
              "# fit_rows: the rows the parameters were fitted to; checks: rows kept out of the fit."]
    body = {
        "kind": "loading",
        "sources": [os.path.relpath(os.path.abspath(table), here)],
        "parameters": result.parameters,
        "units": {p: UNITS.get(p.rsplit(".", 1)[1], "") for p in result.parameters},
        "exactly_determined": result.exactly_determined,
        "degrees_of_freedom": result.dof,
        "fit_rows": result.fit_rows,
        "checks": result.check_rows,
        "checks_median_abs_rel_error": round(result.check_median_abs_error, 6),
    }
    return "\n".join(header) + "\n" + dump_yaml(body)
