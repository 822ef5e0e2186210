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
from sim.core.units import GB, GIB
from sim.formats.measured_tables import read_numbers

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


LOADING_COLUMNS = ("machine", "cold_gbps", "hot_gbps")  # link_gbps and file_gb: optional
LOADING_RATES = ("cold_gbps", "hot_gbps", "link_gbps")  # GB/s


def loading_cells(root: str) -> list[Cell]:
    """Each machine's measured cold, hot and link load rates (``calibration/loading_*.csv``) against its simulated
    load in ``scenarios/home_lab.yaml``; a table it cannot read (a column missing, text in a number) is a one-line
    error naming the file, row and column."""
    from sim.config.load import load_scenario
    from sim.lab.probes import probe_machine

    scn, _ = load_scenario(os.path.join(root, "scenarios", "home_lab.yaml"))
    cells = []
    paths = {name: os.path.join(root, "calibration", name) for name in ("loading_stages.csv", "loading_mac_sample.csv")}
    tables = {name: read_numbers(path, dict.fromkeys(("file_gb", *LOADING_RATES)), text=("machine",),
                                 required=LOADING_COLUMNS, what="a loading table") for name, path in paths.items()}
    with progress(sum(map(len, tables.values())) + 1, "validate loading", unit="probe") as bar:
        for name, rows in tables.items():
            for row in rows:
                machine, line = row.text["machine"], row.line
                if machine not in scn.machines:
                    raise ScenarioError(paths[name], f"row {line}.machine", f"bad value {machine!r}: expected a "
                                        f"machine of scenarios/home_lab.yaml ({', '.join(sorted(scn.machines))})")
                file_gb = row.numbers["file_gb"]
                measured = {key: row.numbers[key] for key in LOADING_RATES}
                rep = probe_machine(scn, machine, "9B", file_gb * GB / GIB if file_gb else None)
                for key, got in (("cold_gbps", rep.cold.gbps), ("hot_gbps", rep.hot.gbps),
                                 ("link_gbps", rep.link.gbps if rep.link else None)):
                    if measured[key] is not None and got is not None:
                        cells.append(Cell(name, f"{machine}.{key}", measured[key], got, 0.02))
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
    targets = []
    for table in tables:
        found = builder.table(table)
        if not found:
            raise ScenarioError(table, "", f"no row to check: {path} (calibrate.tables.{os.path.basename(table)}) "
                                "maps this table, but it holds no measured cell (rows missing or blank)")
        targets += found
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


def offload_cells(root: str) -> list[Cell]:
    """The public llama-bench tables (calibration/public/, mapped by calibration/llamacpp_setups.yaml) at the
    shipped llama.cpp parameters (sim.llamacpp.params.DEFAULTS: the fit to every row, calibration/llamacpp.yaml):
    claimed, the in-sample median |simulated / measured - 1| of tg and of pp over every table, and the median
    |error| of VRAM in GiB; reported, the same per table and backend. How well the fit predicts sources it never
    saw is `sim validate --public`'s report (docs/fidelity.md), not checked here."""
    import math

    from sim.calibration.llamacpp_cases import read_cases
    from sim.calibration.llamacpp_fit import predict
    from sim.llamacpp.params import CostParams

    table = read_cases(root)
    with progress(1, "llama-bench tables", unit="table") as bar:
        values = [v for v, _ in predict(table.cases, CostParams())]
        bar.update(1)
    name = "llamacpp_setups.yaml"
    cells = []

    def median_cell(label: str, chosen: list[tuple], tolerance: float, info: str = "", gib: bool = False) -> None:
        if gib:
            errs = [abs(v - c.measured) if math.isfinite(v) else 99.0 for c, v in chosen]
        else:
            errs = [abs(v / c.measured - 1) if math.isfinite(v) else 1.0 for c, v in chosen]
        if errs:
            cells.append(Cell(name, f"{label} ({len(errs)} rows)", 0.0, float(np.median(errs)), tolerance,
                              kind="share", info=info))

    pairs = list(zip(table.cases, values, strict=True))
    for quantity, tol in CLAIMED_OFFLOAD.items():
        chosen = [(c, v) for c, v in pairs if c.quantity == quantity]
        label = "vram_gib in-sample median |error| in GiB" if quantity == "vram_gib" else \
            f"{quantity} in-sample median |error|"
        median_cell(label, chosen, tol, gib=quantity == "vram_gib")
    for quantity in CLAIMED_OFFLOAD:
        for key in sorted({(c.table, c.backend) for c, _ in pairs if c.quantity == quantity}):
            chosen = [(c, v) for c, v in pairs if c.quantity == quantity and (c.table, c.backend) == key]
            median_cell(f"{key[0]} {key[1]} {quantity} median |error|", chosen, CLAIMED_OFFLOAD[quantity],
                        "reported: one table and backend, in sample", gib=quantity == "vram_gib")
    return cells


CLAIMED_OFFLOAD = {"tg_tok_s": 0.15, "pp_tok_s": 0.25, "vram_gib": 0.5,  # in-sample tolerances (GiB for VRAM)
                   "btg_tok_s": 0.25, "bpp_tok_s": 0.25}  # llama-batched-bench's S_TG and S_PP


def loads_cells(root: str) -> list[Cell]:
    """The public load times (calibration/public_loads.csv) at the shipped calibration/public_loads.yaml: claimed,
    the median |simulated / measured - 1| of the rows kept out of the fit, at most 20%; reported, each check row
    and each fit row."""
    from sim.calibration.fit_loads import predict, read_rows
    from sim.config.load import load_scenario

    scn, _ = load_scenario(os.path.join(root, "scenarios", "public_loads.yaml"))
    name = "public_loads.csv"
    rows = read_rows(os.path.join(root, "calibration", name), scn)
    cells = []
    with progress(len(rows), "validate public loads", unit="row") as bar:
        errors = []
        for r in rows:
            got = predict(scn, r)
            errors += [abs(got / r.measured - 1)] if r.role == "check" else []
            cells.append(Cell(name, f"{r.row_id} {r.machine} {r.quantity}", r.measured, got, 0.30,
                              info=f"reported: a {r.role} row"))
            bar.update()
    if errors:
        cells.insert(0, Cell(name, f"check rows median |error| ({len(errors)} rows)", 0.0,
                             float(np.median(errors)), 0.20, kind="share"))
    return cells


GROUPS = {"loading": loading_cells,
          "loads": loads_cells,
          "strata": lambda root: declared_cells(root, "gen3_5090.yaml"),
          "concurrency": lambda root: declared_cells(root, "gen3_5090_concurrency.yaml"),
          "basalt": lambda root: declared_cells(root, "basalt_3gpu.yaml"),
          "offload": offload_cells}
NOT_CHECKED = {
    "dispatch_machines.csv": "decode rates given to the dispatcher as inputs (scenarios/home_lab.yaml), not outputs",
    "strata_overload.md": "text: checked by tests/test_serving_load.py (32 clients, nothing rejected)",
    "basalt_serve_requests.csv": "single log lines: fitted at 30% (calibration/basalt_moe.yaml residuals)",
}


# What each shipped group claims: the cells (of tables in ROOT/calibration/) it must find and check. A table cut
# short (a row deleted, only its header left) fails with the cells it no longer holds instead of passing with fewer.
_RUNS = ("32K", "64K", "128K", "256K")
CLAIMED: dict[str, dict[str, tuple[str, ...]]] = {
    "loading": {
        "loading_stages.csv": tuple(f"{m}.{q}" for m in ("rtx4090_box", "mining_box")
                                    for q in ("cold_gbps", "hot_gbps", "link_gbps")),
        "loading_mac_sample.csv": ("mac.cold_gbps", "mac.hot_gbps"),
    },
    "loads": {"public_loads.csv": ("check rows median |error| (7 rows)",)},
    "strata": {
        "strata_gen3_5090.csv": ("round1_slots", "round2_slots", "round1_coverage", "round1_decode_hit_rate",
                                 "round1_decode_tok_s", "gpu_utilization_round1", "gpu_utilization_round2",
                                 "power_ratio_round2_over_round1"),
        "strata_spill_buckets.csv": ("pcie_spill 0-0", "pcie_spill 0-0.5", "pcie_spill 0.5-3", "pcie_spill 5-up",
                                     "hit_rate 90-95", "hit_rate 95-99"),
    },
    "concurrency": {
        "strata_concurrency.csv": tuple(f"{n} {q}" for n in (1, 2, 4, 8) for q in ("throughput_tok_s", "ttft_s")),
    },
    "offload": {
        "llamacpp_setups.yaml": ("tg_tok_s in-sample median |error| (323 rows)",
                                 "pp_tok_s in-sample median |error| (432 rows)",
                                 "vram_gib in-sample median |error| in GiB (38 rows)",
                                 "btg_tok_s in-sample median |error| (90 rows)",
                                 "bpp_tok_s in-sample median |error| (90 rows)"),
    },
    "basalt": {
        "basalt_3gpu.csv": ("vram_used_5090", "vram_used_5080", "vram_used_5060ti", "bench_decode"),
        "basalt_context_sweep.csv": tuple(f"{r} {q}" for r in _RUNS for q in ("prefill_tok_s_median",
                                                                             "decode_cold_median",
                                                                             "decode_cached_median")),
        "basalt_peer_reserve.csv": ("600 decode_tok_s_values", "1536 decode_tok_s_values", "1536 peer_vram_used_mib",
                                    "2048 decode_tok_s_values", "2048 peer_vram_used_mib"),
        "basalt_vision_placement.csv": ("on_5080_expert_tier decode_tok_s_values",
                                        "on_5090_primary decode_tok_s_values", "cpu_16_threads decode_tok_s_values"),
    },
}


def check_claimed(root: str, group: str, cells: list[Cell]) -> None:
    """A one-line error naming the first table of ``group`` that lacks a row for a cell the group claims (see
    :data:`CLAIMED`), and those cells: a claimed cell with no row to check fails, it is never skipped."""
    found = {(c.table, c.cell) for c in cells if not c.info}
    for table, claimed in CLAIMED.get(group, {}).items():
        missing = [cell for cell in claimed if (table, cell) not in found]
        if missing:
            shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
            raise ScenarioError(os.path.join(root, "calibration", table), "", f"no row to check for "
                                f"{len(missing)} of the {len(claimed)} cells `sim validate --only {group}` claims: "
                                f"{shown} (rows missing or their cells blank)")


def validate(root: str, groups: list[str] | None = None) -> list[Cell]:
    out: list[Cell] = []
    for name in groups or list(GROUPS):
        cells = GROUPS[name](root)
        check_claimed(root, name, cells)
        out += cells
    return out
