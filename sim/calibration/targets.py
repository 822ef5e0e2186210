"""Measured tables as targets: each measured cell, the experiment that simulates it, and the metric it is.

A scenario says under ``calibrate.tables`` how each measured table maps onto it (see
:class:`sim.config.calibrate.TableMap`): ``quantities`` tables (``quantity,value`` rows) name a metric per quantity;
``rows`` tables (one row per setting) set scenario values from each row's columns and name a metric per measured
column; ``buckets`` tables pool the requests of some variants and bucket them by spill share or hit rate. A *variant*
is the scenario (``base``), another scenario file or changed values, on which a table was measured. An *experiment*
is a variant plus the workload a cell needs, as ``--set`` overrides; it is simulated once per evaluation however many
cells read it, with a random stream derived from its own key, so adding a table never changes another table's
numbers.

``sim calibrate`` fits free parameters to these targets (and to replayed requests of logs); ``sim validate`` checks
the same targets against their tolerances.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from sim.config.calibrate import Calibrate, CellSpec, TableMap
from sim.config.load import load_scenario
from sim.config.scenario import Scenario
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError, combined, each_error
from sim.formats.measured_cells import measured_values, read_buckets, read_quantities
from sim.formats.measured_tables import read_measured
from sim.serving.served import ServedRequests

BASE = "base"


@dataclass(frozen=True)
class Experiment:
    """A scenario file and the ``--set`` overrides (variant, table, cell and row values, in that order) of one run;
    ``label`` names the file relative to the calibrated scenario's folder, so the key (and the run's random stream)
    is the same from any working directory."""

    scenario: str
    sets: tuple[str, ...]
    label: str = ""

    @property
    def key(self) -> str:
        return (self.label or os.path.basename(self.scenario)) + "|" + "|".join(self.sets)


@dataclass
class Target:
    """One measured cell. ``how``: ``metric`` (a metric of one experiment), ``ratio`` (metric of the first over the
    second experiment), ``bucket`` (mean decode of a bucket of the pooled experiments' requests)."""

    name: str
    source: str
    measured: float
    kind: str  # "rate": error as a log ratio; "share": as a difference
    tolerance: float
    metric: str
    experiments: tuple[Experiment, ...]
    how: str = "metric"
    lo: float | None = None  # a measured range (validated as one; fitted at its mean)
    hi: float | None = None
    role: str = "fit"  # fit, check (held out of the fit, claimed), unclaimed (reported only)
    note: str = ""
    where: tuple = ()  # bucket: (by, low_pct, high_pct or None); request: (its index in the replay,)


def _set_args(values: dict) -> tuple[str, ...]:
    return tuple(f"{k}={json.dumps(v)}" for k, v in values.items())


class TargetBuilder:
    """Turns the tables a scenario declares into targets; resolves variants into experiments."""

    def __init__(self, scenario_path: str, cal: Calibrate, where: str):
        self.path = scenario_path
        self.cal = cal
        self.where = where  # the scenario, for errors

    def variant(self, name: str | None, key: str) -> tuple[str, tuple[str, ...]]:
        if name in (None, BASE):
            return self.path, ()
        v = self.cal.variants.get(name)
        if v is None:
            raise ScenarioError(self.where, key, f"unknown variant {name!r}: expected 'base' or one of "
                                f"{sorted(self.cal.variants)} under calibrate.variants")
        other = self.path
        if v.scenario:
            other = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(self.path)),
                                                                  v.scenario)))
            if not os.path.isfile(other):
                raise ScenarioError(self.where, f"calibrate.variants.{name}.scenario", f"a scenario file relative to "
                                    f"this one ({other} not found)")
        return other, _set_args(v.set)

    def experiment(self, variant: str | None, key: str, *sets: dict) -> Experiment:
        path, vsets = self.variant(variant, key)
        out = list(vsets)
        for s in sets:
            out += _set_args(s)
        label = os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(self.path)))
        return Experiment(path, tuple(out), label)

    def role(self, name: str) -> tuple[str, str]:
        for pattern, why in self.cal.unclaimed.items():
            if fnmatch.fnmatchcase(name, pattern):
                return "unclaimed", why
        for pattern, why in self.cal.checks.items():
            if fnmatch.fnmatchcase(name, pattern):
                return "check", why
        return "fit", ""

    def cell(self, name: str, table_path: str, value: str, spec: CellSpec, default_variant: str | None,
             sets: list[dict], key: str, spec_key: str) -> Target:
        """One measured cell: ``key`` locates it in the table, ``spec_key`` its map in the scenario."""
        values = measured_values(value, table_path, key)
        if spec.kind == "rate" and min(values) <= 0:
            raise ScenarioError(table_path, key, f"bad value {value!r}: a rate or time is positive")
        scaled = [v * spec.scale for v in values]
        exp = self.experiment(spec.variant or default_variant, f"{spec_key}.variant", *sets, spec.set)
        exps: tuple[Experiment, ...] = (exp,)
        how = "metric"
        if spec.ratio_to is not None:
            exps = (exp, self.experiment(spec.ratio_to, f"{spec_key}.ratio_to", *sets, spec.set))
            how = "ratio"
        role, note = self.role(name)
        ranged = len(scaled) > 1
        return Target(name, table_path, measured=float(np.mean(scaled)), kind=spec.kind, tolerance=spec.tolerance,
                      metric=spec.metric, experiments=exps, how=how, lo=min(scaled) if ranged else None,
                      hi=max(scaled) if ranged else None, role=role, note=note)

    def table(self, table_path: str) -> list[Target]:
        name = os.path.basename(table_path)
        spec = self.cal.tables.get(name)
        key = f"calibrate.tables.{name}"
        if spec is None:
            raise ScenarioError(self.where, key, "how this table maps onto the scenario (kind: quantities, rows or "
                                "buckets), or a table of requests with prompt_tokens and output_tokens columns")
        reader = {"quantities": self._quantities, "rows": self._rows, "buckets": self._buckets}[spec.kind]
        return reader(name, table_path, spec, key)

    def _quantities(self, name: str, path: str, spec: TableMap, key: str) -> list[Target]:
        by_name = read_quantities(path)
        out = []
        for quantity, cell in spec.cells.items():
            row = by_name.get(quantity)
            if row is None:
                raise ScenarioError(path, quantity, f"missing: {self.where} ({key}.cells) expects a row with this "
                                    "quantity")
            out.append(self.cell(f"{name} {quantity}", path, value=row.value, spec=cell,
                                 default_variant=spec.variant, sets=[spec.set], key=quantity,
                                 spec_key=f"{key}.cells.{quantity}"))
        return out

    def _row_values(self, row: dict, spec: TableMap, path: str, line: int) -> dict:
        values = {}
        for target, col in spec.row_set.items():
            cols = [col] if isinstance(col, str) else col.mean_of
            scale = 1.0 if isinstance(col, str) else col.scale
            nums = [measured_values(row.get(c) or "", path, f"row {line}.{c}") for c in cols]
            if any(len(n) != 1 for n in nums):
                raise ScenarioError(path, f"row {line}", f"one number per column in {cols}, not a range")
            v = float(np.mean([n[0] for n in nums])) * scale
            values[target] = int(v) if v.is_integer() and isinstance(col, str) else v
        return values

    def _rows(self, name: str, path: str, spec: TableMap, key: str) -> list[Target]:
        _, rows = read_measured(path)  # as text: the scenario's map says which cells are numbers (measured_values)
        if not spec.row_key:
            raise ScenarioError(self.where, f"{key}.row_key", "the column naming each row")
        names = {(row.get(spec.row_key) or "").strip() for row in rows}
        for rkey in spec.row_variant:
            if rkey not in names:
                raise ScenarioError(self.where, f"{key}.row_variant.{rkey}", f"a row of {name} (its {spec.row_key} "
                                    f"column holds {sorted(names)})")
        out = []
        seen: set[str] = set()
        for line, row in enumerate(rows, start=1):
            rkey = (row.get(spec.row_key) or "").strip()
            if not rkey:
                raise ScenarioError(path, f"row {line}.{spec.row_key}", "missing value: it names the row")
            if rkey in seen:
                raise ScenarioError(path, f"row {line}.{spec.row_key}", f"{rkey!r} names two rows")
            seen.add(rkey)
            variant = spec.variant
            if spec.row_variant:
                if rkey not in spec.row_variant:
                    continue
                variant = spec.row_variant[rkey]
            values = self._row_values(row, spec, path, line)
            for col, cell in spec.cells.items():
                if col not in row:
                    raise ScenarioError(path, col, f"missing column: {self.where} ({key}.cells) expects it")
                if not (row.get(col) or "").strip():
                    continue  # not measured in this row
                out.append(self.cell(f"{name} {rkey} {col}", path, value=row[col], spec=cell, default_variant=variant,
                                     sets=[spec.set, values], key=f"row {line}.{col}", spec_key=f"{key}.cells.{col}"))
        return out

    def _buckets(self, name: str, path: str, spec: TableMap, key: str) -> list[Target]:
        buckets = read_buckets(path)
        exps = tuple(self.experiment(v, f"{key}.pool", spec.set) for v in spec.pool)
        out = []
        for b in buckets:
            by, lo, hi, rate = b.by, b.low_pct, b.high_pct, b.decode_tok_s
            tname = f"{name} {by} {lo:g}-{'up' if hi is None else format(hi, 'g')}"
            role, note = self.role(tname)
            out.append(Target(tname, path, measured=rate, kind="rate", tolerance=spec.tolerance, metric="decode_tok_s",
                              experiments=exps, how="bucket", role=role, note=note, where=(by, lo, hi)))
        return out


def without_calibration(path: str, exclude: str | None) -> list[str]:
    """An override dropping ``exclude`` from the scenario file's ``calibrations`` (the file being written), or none."""
    if exclude is None:
        return []
    raw = read_yaml(path)
    cals = raw.get("calibrations") if isinstance(raw, dict) else None
    if not isinstance(cals, list):
        return []
    base = os.path.dirname(os.path.abspath(path))
    target = os.path.abspath(exclude)
    keep = [c for c in cals if not (isinstance(c, str) and os.path.abspath(os.path.join(base, c)) == target)]
    return [] if len(keep) == len(cals) else [f"calibrations={json.dumps(keep)}"]


@dataclass
class Runs:
    """Simulated experiments of one evaluation: per experiment key, (metrics, served requests)."""

    results: dict[str, tuple[dict[str, float], ServedRequests]] = field(default_factory=dict)
    pooled: dict[tuple[str, ...], dict] = field(default_factory=dict)  # bucket arrays of pooled experiments

    def bucket_arrays(self, experiments: tuple[Experiment, ...]) -> dict:
        """Per-request spill, hit rate and decode of the pooled experiments' requests, computed once per pool."""
        from sim.serving.metrics import bucket_arrays

        keys = tuple(e.key for e in experiments)
        if keys not in self.pooled:
            pooled = self.results[keys[0]][1]
            for k in keys[1:]:
                pooled = pooled + self.results[k][1]
            self.pooled[keys] = bucket_arrays(pooled)
        return self.pooled[keys]


def run_experiments(targets: list[Target], params: list[str], seed: int, exclude: str | None) -> Runs:
    """Simulate every experiment the targets need once, each with ``params`` (``--set`` strings) applied before the
    experiment's own overrides, and the calibration file ``exclude`` left out."""
    from sim.engines import kind_for

    runs = Runs()
    for t in targets:
        for exp in t.experiments:
            if exp.key in runs.results:
                continue
            sets = [*without_calibration(exp.scenario, exclude), *params, *exp.sets]
            try:
                scn: Scenario = load_scenario(exp.scenario, sets)[0]
            except ScenarioError as exc:  # a value a table row, a variant or the fit gave: say which cell needed it
                raise combined([ScenarioError(e.source, e.path, f"{e.problem} (simulating {t.name})")
                                for e in each_error(exc)]) from None
            if scn.serve is None:
                raise ScenarioError(exp.scenario, "serve", "a serve section: the measured tables are simulated "
                                    "by serving requests")
            rng = np.random.default_rng([seed, zlib.crc32(exp.key.encode())])
            kind = kind_for(scn)
            assert kind is not None  # a serve section was checked for above
            served = kind.serve(scn, rng)
            runs.results[exp.key] = (kind.metrics(served), served.requests)
    return runs


def check_metrics(targets: list[Target], runs: Runs) -> None:
    """A metric no run reports is a typo in the table map, not a figure to fit: one line naming it."""
    known = {k for metrics, _ in runs.results.values() for k in metrics}
    for t in targets:
        if t.how in ("metric", "ratio") and t.metric not in known:
            hint = difflib.get_close_matches(t.metric, sorted(known), n=1)
            raise ScenarioError(t.source, t.name, f"metric {t.metric!r} is not one `sim run --json` reports"
                                + (f" (did you mean {hint[0]!r}?)" if hint else ""))


def simulated(t: Target, runs: Runs) -> float:
    """The simulated value of a target from the runs of one evaluation (NaN: the run has no such figure)."""
    from sim.serving.metrics import bucket_requests

    if t.how == "bucket":
        _, rate = bucket_requests(runs.bucket_arrays(t.experiments), *t.where)
        return float("nan") if rate is None else rate

    def metric(exp: Experiment) -> float:
        value = runs.results[exp.key][0].get(t.metric)
        return float("nan") if value is None else float(value)

    if t.how == "ratio":
        den = metric(t.experiments[1])
        return metric(t.experiments[0]) / den if den else float("nan")
    return metric(t.experiments[0])


def cell_error(kind: str, measured: float, sim: float, lo: float | None = None, hi: float | None = None) -> float:
    """What a report shows and a tolerance judges: relative (rate) or absolute (share) error; against a measured range
    [lo, hi], from its nearer edge (0 inside). NaN where no ratio can be formed."""
    if lo is not None and hi is not None:
        if lo <= sim <= hi:
            return 0.0
        measured = lo if sim < lo else hi
    if kind == "share":
        return sim - measured
    return sim / measured - 1 if measured else float("nan")


def error(kind: str, measured: float, sim: float) -> float:
    """Error of a simulated value: log ratio for rates (a large finite value when none can be formed), difference
    for shares."""
    if kind == "share":
        return sim - measured if math.isfinite(sim) else 10.0
    if measured > 0 and sim > 0 and math.isfinite(sim):
        return math.log(sim / measured)
    return 10.0
