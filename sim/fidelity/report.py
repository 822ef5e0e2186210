"""The fidelity report (``docs/fidelity.md``): held-out errors per table, engine, backend and quantity, the worst
rows with the mechanism that misses, every row not expressed and why.

Errors: relative (simulated / measured - 1) for rates, times and sizes; percentage points for fractions (hit rates,
shares). Sizes in GiB are also given as absolute errors, since the claim there is "within 0.5 GiB".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from sim.fidelity.domain import Excluded
from sim.fidelity.loso import Result


def is_points(unit: str) -> bool:
    """True for quantities whose error is in percentage points (fractions 0-1, or percentages)."""
    return unit in ("fraction", "%")


def _points(unit: str, difference: float) -> float:
    return 100.0 * difference if unit == "fraction" else difference


def error_of(r: Result, held_out: bool = True) -> float:
    """The error the report ranks a row by: relative, or percentage points for fractions (NaN: cannot run)."""
    value = r.held_out.value if held_out else (r.in_sample.value if r.in_sample else float("nan"))
    if not math.isfinite(value):
        return float("nan")
    if is_points(r.observation.unit):
        return _points(r.observation.unit, value - r.observation.measured)
    return r.error if held_out else r.in_sample_error


@dataclass(frozen=True)
class Stats:
    rows: int
    sources: int
    median: float  # median |error| (fraction, or points for fractions)
    within10: float  # share of rows within 10% (or 10 points)
    within25: float
    not_running: int  # rows the mechanism says cannot run (it did)
    in_sample: float  # median |error| of the in-sample fit
    median_abs: float  # median |simulated - measured| in the unit
    within_half: float  # share within 0.5 of the unit (GiB claims)


def stats(results: list[Result]) -> Stats:
    errs = np.array([error_of(r) for r in results], dtype=float)
    inside = np.array([error_of(r, held_out=False) for r in results], dtype=float)
    finite = errs[np.isfinite(errs)]
    absolute = np.array([abs(r.abs_error) for r in results if math.isfinite(r.abs_error)])
    points = bool(results) and is_points(results[0].observation.unit)
    lim10, lim25 = (10.0, 25.0) if points else (0.10, 0.25)
    n = len(results)
    # a row that cannot run counts as outside every band
    return Stats(rows=n, sources=len({r.observation.source for r in results}),
                 median=float(np.median(np.abs(np.where(np.isfinite(errs), errs, np.inf)))) if n else float("nan"),
                 within10=float(np.sum(np.abs(finite) <= lim10) / n) if n else float("nan"),
                 within25=float(np.sum(np.abs(finite) <= lim25) / n) if n else float("nan"),
                 not_running=int(n - finite.size),
                 in_sample=float(np.median(np.abs(inside[np.isfinite(inside)]))) if np.isfinite(inside).any()
                 else float("nan"),
                 median_abs=float(np.median(absolute)) if absolute.size else float("nan"),
                 within_half=float(np.sum(absolute <= 0.5) / n) if n else float("nan"))


def _pct(x: float, points: bool = False) -> str:
    if not math.isfinite(x):
        return "-" if math.isnan(x) else "∞"
    return f"{x:.1f} pts" if points else f"{100 * x:.1f}%"


def _share(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.0f}%"


def _err(r: Result) -> str:
    e = error_of(r)
    if not math.isfinite(e):
        return "does not run"
    return f"{e:+.1f} pts" if is_points(r.observation.unit) else f"{100 * e:+.1f}%"


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:.4g}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def stats_row(label: list[str], s: Stats, unit: str) -> str:
    points = is_points(unit)
    extra = f" {_num(s.median_abs)} | {_share(s.within_half)} |" if unit == "GiB" else " - | - |"
    return ("| " + " | ".join(_cell(x) for x in label) + f" | {s.rows} | {s.sources} | {_pct(s.median, points)} | "
            f"{_share(s.within10)} | {_share(s.within25)} | {s.not_running} | {_pct(s.in_sample, points)} |" + extra)


STATS_HEADER = ("rows | sources | median abs error | within 10% | within 25% | does not run | in-sample median | "
                "median abs (unit) | within 0.5 GiB |")


def _grouped(results: Iterable[Result], key) -> dict[tuple, list[Result]]:
    out: dict[tuple, list[Result]] = {}
    for r in results:
        out.setdefault(key(r), []).append(r)
    return dict(sorted(out.items()))


def worst(results: list[Result], n: int) -> list[Result]:
    """The ``n`` rows furthest off (rows that cannot run first), ties by row id."""
    def badness(r: Result) -> tuple[float, str]:
        e = error_of(r)
        if not math.isfinite(e):
            return (math.inf, r.observation.id)
        scale = 100.0 if is_points(r.observation.unit) else 1.0
        return (abs(math.log1p(e)) if scale == 1.0 and e > -1 else abs(e) / scale, r.observation.id)
    return sorted(results, key=badness, reverse=True)[:n]


def worst_sources(results: list[Result], n: int) -> list[Result]:
    """The worst row of each of the ``n`` sources whose worst row is furthest off (one source, however many of its
    rows are off, takes one place)."""
    per: dict[str, Result] = {}
    for r in worst(results, len(results)):
        per.setdefault(r.observation.source, r)
    return worst(list(per.values()), n)


def markdown(domains: list[tuple[str, list[Result], list[Excluded]]], command: str,
             notes: dict[str, str] | None = None, headline: list[tuple[str, str]] | None = None) -> str:
    """The whole report. ``domains``: (name, results, excluded) per domain; ``notes``: explanations of rows by
    row id (calibration/fidelity_notes.yaml); ``headline``: (domain name, quantity) pairs summarised first, by
    backend."""
    notes = notes or {}
    lines = ["# Fidelity: every public table, each source predicted by a fit that never saw it", "",
             f"Written by `{command}` (sim/fidelity). Do not edit: rerun the command.", "",
             "Each domain's shared physical parameters are refitted once per held-out group (a `source_id` with every "
             "other source measured on one of its machines) and predict that group's rows; the error of a row is "
             "that held-out prediction's (simulated / measured - 1; percentage points for fractions). The in-sample "
             "column fits every group at once, for comparison only. A row the mechanism says cannot run (it does "
             "not load) counts as outside every band.", ""]
    every = [r for _, results, _ in domains for r in results]
    if headline:
        lines += ["## Headline", "", "| domain | quantity | backend | " + STATS_HEADER,
                  "|" + "---|" * 12]
        for name, quantity in headline:
            chosen = [r for d, results, _ in domains if d == name for r in results
                      if r.observation.quantity == quantity]
            if not chosen:
                continue
            unit = chosen[0].observation.unit
            lines.append(stats_row([name, quantity, "**all**"], stats(chosen), unit))
            for (backend,), rs in _grouped(chosen, lambda r: (r.observation.backend or "-",)).items():
                lines.append(stats_row([name, quantity, backend], stats(rs), unit))
        lines.append("")
    lines += ["## By table, engine and backend", ""]
    for name, results, _ in domains:
        lines += [f"### {name}", ""]
        if not results:
            lines += ["No row of this domain is expressed: each is listed with why under Rows not expressed.", ""]
            continue
        lines += ["| table | engine | backend | quantity | " + STATS_HEADER, "|" + "---|" * 13]
        for (table, engine, backend, quantity), rs in _grouped(
                results, lambda r: (r.observation.table, r.observation.engine or "-", r.observation.backend or "-",
                                    r.observation.quantity)).items():
            lines.append(stats_row([table, engine, backend, quantity], stats(rs), rs[0].observation.unit))
        lines.append("")
        lines += ["Worst rows of each table:", "", "| table | row | source | what | measured | simulated | error | "
                  "mechanism |", "|---|---|---|---|---|---|---|---|"]
        for (table,), rs in _grouped(results, lambda r: (r.observation.table,)).items():
            for r in worst(rs, 3):
                o = r.observation
                lines.append(f"| {table} | {o.row_id} | {_cell(o.source)} | {_cell(o.label)} {o.quantity} | "
                             f"{_num(o.measured)} | {_num(r.held_out.value)} | {_err(r)} | "
                             f"{_cell(r.held_out.mechanism)} |")
        lines.append("")
    owner = {id(r): name for name, results, _ in domains for r in results}
    for title, chosen in (("The 10 worst rows, explained", worst(every, 10)),
                          ("The 10 worst sources, each by its worst row", worst_sources(every, 10))):
        lines += [f"## {title}", "", "| # | domain | row | source | what | measured | simulated | error | mechanism | "
                  "why |", "|---|---|---|---|---|---|---|---|---|---|"]
        for i, r in enumerate(chosen, start=1):
            o = r.observation
            lines.append(f"| {i} | {owner[id(r)]} | {o.row_id} | {_cell(o.source)} | {_cell(o.label)} {o.quantity} | "
                         f"{_num(o.measured)} | {_num(r.held_out.value)} | {_err(r)} | "
                         f"{_cell(r.held_out.mechanism)} | {_cell(notes.get(o.row_id, 'not yet explained'))} |")
        lines.append("")
    lines += ["## By source", "", "| domain | group | source | quantity | rows | median abs error |",
              "|---|---|---|---|---|---|"]
    for name, results, _ in domains:
        for (group, source, quantity), rs in _grouped(
                results, lambda r: (r.group, r.observation.source, r.observation.quantity)).items():
            s = stats(rs)
            lines.append(f"| {name} | {_cell(group)} | {_cell(source)} | {quantity} | {s.rows} | "
                         f"{_pct(s.median, is_points(rs[0].observation.unit))} |")
    lines += ["", "## Rows not expressed", ""]
    for name, _, excluded in domains:
        if not excluded:
            continue
        lines += [f"### {name}", "", "| table | rows | why |", "|---|---|---|"]
        for (table, why), rs in _grouped(excluded, lambda e: (e.table, e.why)).items():
            ids = ", ".join(e.row_id for e in rs[:6]) + (f", ... ({len(rs)} rows)" if len(rs) > 6 else "")
            lines.append(f"| {table} | {ids} | {_cell(why)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
