"""``sim validate``: every measured table the project ships, against its scenario, cell by cell.

Each row: table, cell, measured, simulated, error (relative for rates, a difference for shares), tolerance, and
status: ``ok``, ``OUTSIDE`` (fails the run) or ``info`` (a figure the project reports but does not claim, with the
reason in ``note``). Seeds are fixed (11, which no fit used), so a run is reproducible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from sim.core.errors import ScenarioError
from sim.core.progress import progress
from sim.core.tables import read_measured
from sim.core.units import GB, GIB

SEED = 11


@dataclass
class Cell:
    table: str
    cell: str
    measured: float
    simulated: float
    tolerance: float
    kind: str = "rate"  # rate: relative error; share: difference; range: a rate inside [lo, hi] widened by tolerance
    info: str = ""  # non-empty: reported, not claimed
    lo: float | None = None
    hi: float | None = None

    @property
    def error(self) -> float:
        from sim.calibration.targets import cell_error

        return cell_error("share" if self.kind == "share" else "rate", self.measured, self.simulated, self.lo, self.hi)

    @property
    def status(self) -> str:
        if self.info:
            return "info"
        ok = np.isfinite(self.simulated) and abs(self.error) <= self.tolerance + 1e-12
        return "ok" if ok else "OUTSIDE"

    def as_dict(self) -> dict:
        return {"table": self.table, "cell": self.cell, "measured": self.measured, "simulated": self.simulated,
                "error": self.error, "tolerance": self.tolerance, "kind": self.kind, "status": self.status,
                "measured_lo": self.lo, "measured_hi": self.hi, "note": self.info or None}


def loading_cells(root: str) -> list[Cell]:
    from sim.config.load import load_scenario
    from sim.lab.probes import probe_machine

    scn, _ = load_scenario(os.path.join(root, "scenarios", "home_lab.yaml"))
    cells = []
    tables = {name: read_measured(os.path.join(root, "calibration", name))[1]
              for name in ("loading_stages.csv", "loading_mac_sample.csv")}
    with progress(sum(map(len, tables.values())) + 1, "validate loading", unit="probe") as bar:
        for name, rows in tables.items():
            for row in rows:
                gib = float(row["file_gb"]) * GB / GIB if row.get("file_gb") else None
                rep = probe_machine(scn, row["machine"], "9B", gib)
                for key, got in (("cold_gbps", rep.cold.gbps), ("hot_gbps", rep.hot.gbps),
                                 ("link_gbps", rep.link.gbps if rep.link else None)):
                    if row.get(key) and got is not None:
                        cells.append(Cell(name, f"{row['machine']}.{key}", float(row[key]), got, 0.02))
                bar.update()
        gen1, _ = load_scenario(os.path.join(root, "scenarios", "home_lab.yaml"),
                                [f"machines.mining_box.gpus.card{i}.negotiated_gen=1" for i in range(3)])
        cells.append(Cell("pcie_links.csv", "mining card Gen1 x4 measured_load_link (unseen by the fit)", 0.85,
                          probe_machine(gen1, "mining_box", "9B").link.gbps, 0.02))
        bar.update()
    return cells


def declared_cells(root: str, scenario_file: str) -> list[Cell]:
    """Every cell of the tables ``scenarios/<scenario_file>`` maps under ``calibrate.tables`` (read from
    ``calibration/``), simulated as ``sim calibrate`` simulates them, at the scenario's shipped calibration."""
    from sim.config.load import read_calibrate

    path = os.path.join(root, "scenarios", scenario_file)
    return scenario_cells(path, [os.path.join(root, "calibration", name) for name in read_calibrate(path).tables])


def scenario_tables(path: str, given: list[str], root: str) -> tuple[list[str], dict[str, str]]:
    """The tables to check of those a scenario maps under ``calibrate.tables``: ``given`` ones, else those found in
    ``root/calibration/``; and why each other mapped table is not checked. A scenario with none to check is a
    one-line error."""
    from sim.config.load import read_calibrate

    declared = read_calibrate(path).tables
    found = given or [p for name in declared if os.path.isfile(p := os.path.join(root, "calibration", name))]
    if not found:
        raise ScenarioError(path, "calibrate.tables", "a measured table to check: give --table FILE (one the scenario "
                            f"maps: {', '.join(declared) or 'it maps none'})")
    names = {os.path.basename(p) for p in found}
    why = "not given (--table)" if given else "no file {}"
    return found, {name: why.format(os.path.join(root, "calibration", name)) for name in declared if name not in names}


def scenario_cells(path: str, tables: list[str]) -> list[Cell]:
    """Every cell of ``tables`` (each one the scenario maps under ``calibrate.tables``, by its file name), simulated as
    ``sim calibrate`` simulates them, at the scenario's calibration: any scenario, any engine kind."""
    from sim.calibration.targets import TargetBuilder, check_metrics, simulated
    from sim.config.load import load_scenario

    cal = load_scenario(path)[0].calibrate
    builder = TargetBuilder(path, cal, path)
    targets = [t for table in tables for t in builder.table(table)]
    runs = _run_experiments(targets, f"validate {os.path.basename(path)}")
    check_metrics(targets, runs)
    cells = []
    for t in targets:
        table = os.path.basename(t.source)
        kind = "range" if t.lo is not None and t.kind == "rate" else t.kind
        cells.append(Cell(table, t.name[len(table) + 1:], measured=t.measured, simulated=simulated(t, runs),
                          tolerance=t.tolerance, kind=kind, info=t.note if t.role == "unclaimed" else "", lo=t.lo,
                          hi=t.hi))
    return cells


def _run_experiments(targets: list, desc: str):
    """``run_experiments(targets, [], SEED, None)``, one target's new experiments at a time, counted on a progress
    bar: the same simulations in the same order (each experiment has its own random stream)."""
    from dataclasses import replace

    from sim.calibration.targets import Runs, run_experiments

    runs = Runs()
    with progress(len({e.key for t in targets for e in t.experiments}), desc, unit="sim") as bar:
        for t in targets:
            todo = tuple(e for e in t.experiments if e.key not in runs.results)
            if todo:
                done = run_experiments([replace(t, experiments=todo)], [], SEED, None).results
                runs.results.update(done)
                bar.update(len(done))
    return runs


GROUPS = {"loading": loading_cells,
          "strata": lambda root: declared_cells(root, "gen3_5090.yaml"),
          "concurrency": lambda root: declared_cells(root, "gen3_5090_concurrency.yaml"),
          "basalt": lambda root: declared_cells(root, "basalt_3gpu.yaml")}
NOT_CHECKED = {
    "dispatch_machines.csv": "decode rates given to the dispatcher as inputs (scenarios/home_lab.yaml), not outputs",
    "strata_overload.md": "text: checked by tests/test_serving_load.py (32 clients, nothing rejected)",
    "basalt_serve_requests.csv": "single log lines: fitted at 30% (calibration/basalt_moe.yaml residuals)",
}


def validate(root: str, groups: list[str] | None = None) -> list[Cell]:
    out: list[Cell] = []
    for name in groups or list(GROUPS):
        out += GROUPS[name](root)
    return out
