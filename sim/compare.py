"""Answers as differences (``sim compare``): a baseline scenario and one or more variants of it, run on the same seeds,
every metric side by side with its change.

A variant is a scenario file or a list of ``--set`` changes to the baseline. Runs are paired: the baseline and every
variant run on the same seeds (common random numbers), so a change is the mechanism's, not the random stream's; with
several seeds, each value is a median over seeds and each change the median of the paired differences with their 5th
and 95th percentiles (with few seeds, close to their range: a spread, not a confidence interval).
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.config.load import Change, load_scenario
from sim.core.errors import ScenarioError, combined, cut
from sim.core.progress import progress
from sim.core.text import WIDTH, number, unit_of
from sim.runner import run as run_scenario


@dataclass(frozen=True)
class Case:
    """One side of a comparison: a scenario file and the ``--set`` changes applied to it, in order."""

    label: str
    path: str
    overrides: tuple[str, ...] = ()

    def describe(self) -> str:
        sets = " ".join(f"--set {o}" for o in self.overrides)
        return f"{self.path}{' ' + sets if sets else ''}"


BASELINE = "baseline"  # the baseline's name in every output (a column, a row, a JSON key): no variant's


def parse_variant(text: str, baseline: Case) -> Case:
    """A ``--vs`` value: a scenario file (``other.yaml``), or changes to the baseline, ``[NAME:] PATH=VALUE[; ...]``
    (the baseline's own ``--set`` changes first, then these). A variant may not be named ``baseline`` (the outputs
    would show two cases of that name); a file ``baseline.yaml`` is named by its file name."""
    if "=" not in text and os.path.isfile(text):
        stem = os.path.splitext(os.path.basename(text))[0]
        return Case(os.path.basename(text) if _is_baseline(stem) else stem, text, baseline.overrides)
    name, sep, rest = text.partition(":")
    if sep and "=" not in name and name.strip():
        label, body = name.strip(), rest
    else:
        label, body = "", text
    if _is_baseline(label):
        raise ScenarioError("--vs", cut(text, 80), f"a variant named {label!r}: '{BASELINE}' names the scenario "
                            "compared against; give the variant another name")
    sets = tuple(s.strip() for s in body.split(";") if s.strip())
    if not sets:
        raise ScenarioError("--vs", "", f"'{text}': expected a scenario file, or changes PATH=VALUE[; PATH=VALUE...] "
                            "to the baseline, optionally named NAME: first")
    for s in sets:
        if "=" not in s:
            if s.endswith((".yaml", ".yml")):
                raise ScenarioError(s, "", "file not found")
            raise ScenarioError("--vs", s, "expected PATH=VALUE (or a scenario file that exists)")
    named = f"{label}: " if label else ""
    changes = tuple(Change(s, f"--vs {cut(named + s, 120)}", "--vs") for s in sets)  # errors name the --vs
    return Case(label or "; ".join(sets), baseline.path, baseline.overrides + changes)


def _is_baseline(label: str) -> bool:
    return label.strip().casefold() == BASELINE


@dataclass
class Comparison:
    """The runs of a comparison: ``values[case][metric]`` holds one value per seed (NaN where a run lacks it)."""

    baseline: Case
    variants: list[Case]
    seeds: list[int]
    values: list[dict[str, np.ndarray]] = field(default_factory=list)  # baseline first, then the variants
    metrics: list[str] = field(default_factory=list)  # in the order the runs report them


def compare(baseline: Case, variants: Sequence[Case], seeds: Sequence[int],
            patterns: Sequence[str] = ()) -> Comparison:
    """Run the baseline and every variant at every seed (each case validated before anything runs, ``patterns``
    checked against the first run's metrics; a progress bar on stderr as :mod:`sim.core.progress` says)."""
    variants = _unique_labels(variants)
    cases = [baseline, *variants]
    scenarios = [load_scenario(c.path, c.overrides)[0] for c in cases]
    out = Comparison(baseline, variants, list(seeds))
    seen: dict[str, None] = {}
    per_case: list[list[dict[str, float]]] = []
    with progress(len(cases) * len(seeds), "compare", unit="run") as bar:
        for scn in scenarios:
            runs = []
            for seed in seeds:
                metrics = run_scenario(scn, seed).metrics
                if not seen:
                    select(list(metrics), patterns)  # a pattern that matches nothing fails now, not after every run
                seen.update(dict.fromkeys(metrics))
                runs.append(metrics)
                bar.update()
            per_case.append(runs)
    out.metrics = list(seen)
    for runs in per_case:
        out.values.append({m: np.array([r.get(m, math.nan) for r in runs], dtype=float) for m in out.metrics})
    return out


def _unique_labels(variants: Sequence[Case]) -> list[Case]:
    """The variants, a label given twice numbered (``lru``, ``lru (2)``, never one given or the baseline's): tables
    and JSON key variants by label."""
    taken = {BASELINE} | {c.label for c in variants}
    seen: dict[str, int] = {}
    out = []
    for c in variants:
        seen[c.label] = seen.get(c.label, 0) + 1
        if seen[c.label] == 1 and c.label != BASELINE:
            out.append(c)
            continue
        k = seen[c.label]
        while f"{c.label} ({k})" in taken:
            k += 1
        seen[c.label] = k
        taken.add(f"{c.label} ({k})")
        out.append(Case(f"{c.label} ({k})", c.path, c.overrides))
    return out


def select(metrics: list[str], patterns: Sequence[str]) -> list[str]:
    """The metrics matching the shell patterns (``decode_*``, ``ttft_p99_s``): in the patterns' order, those of one
    pattern in the run's order."""
    if not patterns:
        return list(metrics)
    picked = list(dict.fromkeys(m for p in patterns for m in metrics if fnmatch.fnmatchcase(m, p)))
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(m, p) for m in metrics)]
    if unmatched:
        import difflib

        errors = []
        for p in unmatched:
            hint = difflib.get_close_matches(p, metrics, n=1)
            errors.append(ScenarioError("--metric", p, "matches no metric of these runs"
                                        + (f"; did you mean '{hint[0]}'?" if hint else " (sim run --json lists them)")))
        raise combined(errors)
    return picked


def _median(a: np.ndarray) -> float:
    finite = a[np.isfinite(a)]
    return float(np.median(finite)) if finite.size else math.nan


def _quantile(a: np.ndarray, q: float) -> float:
    finite = a[np.isfinite(a)]
    return float(np.quantile(finite, q)) if finite.size else math.nan


def rows(cmp: Comparison, patterns: Sequence[str] = (), changed_only: bool = False) -> list[dict]:
    """One row per metric and variant: ``metric, variant, baseline, value, change, relative`` (value medians over
    seeds; change the median of the paired differences, ``change_p5``/``change_p95`` their 5th and 95th percentiles
    when there are several seeds; ``relative`` the change over the baseline's magnitude, empty when the baseline is
    0); ``same``: every seed's value equal to the baseline's. ``changed_only``: leave out metrics the same in every
    variant."""
    out = []
    base = cmp.values[0]
    for m in select(cmp.metrics, patterns):
        b = base[m]
        entries = []
        for case, vals in zip(cmp.variants, cmp.values[1:], strict=True):
            diff = vals[m] - b
            bm, vm, dm = _median(b), _median(vals[m]), _median(diff)
            row = {"metric": m, "variant": case.label, "baseline": bm, "value": vm, "change": dm,
                   "relative": dm / abs(bm) if math.isfinite(dm) and math.isfinite(bm) and bm != 0 else math.nan,
                   "same": bool(np.array_equal(b, vals[m], equal_nan=True))}
            if len(cmp.seeds) > 1:
                row["change_p5"], row["change_p95"] = _quantile(diff, 0.05), _quantile(diff, 0.95)
            entries.append(row)
        if changed_only and not patterns and all(r["same"] for r in entries):
            continue
        out.extend(entries)
    return out


COLUMNS = ("metric", "variant", "baseline", "value", "change", "relative", "change_p5", "change_p95", "same")


def as_dict(cmp: Comparison, patterns: Sequence[str] = ()) -> dict:
    """What ``sim compare --json`` prints and ``--out`` writes as ``comparison.json``."""
    table = rows(cmp, patterns)
    metrics: dict[str, dict] = {}
    same: dict[str, bool] = {}
    for r in table:
        same[r["metric"]] = same.get(r["metric"], True) and r["same"]
        entry = metrics.setdefault(r["metric"], {"baseline": r["baseline"], "variants": {}})
        entry["variants"][r["variant"]] = {k: r[k] for k in ("value", "change", "relative", "change_p5",
                                                             "change_p95") if k in r}
    return {"baseline": _case_dict(cmp.baseline), "variants": [_case_dict(c) for c in cmp.variants],
            "seeds": cmp.seeds, "metrics": metrics,
            "unchanged": sum(same.values())}


def _case_dict(c: Case) -> dict:
    return {"label": c.label, "scenario_file": c.path, "set": list(c.overrides)}


def _signed(value: float) -> str:
    return "-" if not math.isfinite(value) else ("+" if value >= 0 else "") + number(value)


def _change(r: dict, factor: float, unit: str) -> str:
    """The change in the metric's unit (percentage points for a share), its relative size beside it, the 5th and
    95th percentiles of the paired differences when there are several seeds."""
    d = r["change"] * factor
    if r["same"]:
        return "="
    text = _signed(d) + (" pts" if unit == "%" else "")
    if unit != "%" and math.isfinite(r["relative"]):
        text += f" ({r['relative']:+.1%})"
    if "change_p5" in r and math.isfinite(r["change_p5"]):
        text += f" [{_signed(r['change_p5'] * factor)}, {_signed(r['change_p95'] * factor)}]"
    return text




def _column_names(variants: Sequence[Case]) -> list[str]:
    """The variants' column heads: a label when it fits, else the variant's number (``variant 2``); a head that would
    repeat another (or the baseline's) is the number too."""
    heads = [c.label if len(c.label) <= 11 and c.label != BASELINE else f"variant {i + 1}"
             for i, c in enumerate(variants)]
    while len(set(heads)) < len(heads):  # a label such as 'variant 2' met a number: numbers are distinct
        heads = [h if heads.count(h) == 1 else f"variant {i + 1}" for i, h in enumerate(heads)]
    return heads


def _wrapped(title: str, case: Case) -> list[str]:
    """``title`` and the case's file and changes, continued on indented lines when longer than the width."""
    words = [case.path, *(f"--set {o}" for o in case.overrides)]
    lines, line = [], title
    for w in words:
        if len(line) + 1 + len(w) > WIDTH and line.strip():
            lines.append(line)
            line = "   "
        line += " " + w
    return lines + [line]


def text(cmp: Comparison, patterns: Sequence[str] = (), show_all: bool = False) -> str:
    """The comparison as a table: a row per metric, the baseline and each variant with its change; at most 120
    columns (variants beyond what fits go to further blocks)."""
    seeds = cmp.seeds
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}, medians; changes paired"
    lines = _wrapped(f"baseline ({seed_text}):", cmp.baseline)
    for i, c in enumerate(cmp.variants, 1):
        named = c.label != "; ".join(c.overrides)
        lines += _wrapped(f"variant {i}" + (f" ({c.label}):" if named else ":"), c)
    table = rows(cmp, patterns, changed_only=not show_all)
    metrics = list(dict.fromkeys(r["metric"] for r in table))
    by_metric: dict[str, list[dict]] = {}
    for r in table:
        by_metric.setdefault(r["metric"], []).append(r)
    name_w = min(max([len(m) for m in metrics] + [6]), 60) + 2
    left = []  # metric, unit, baseline
    cells: list[list[tuple[str, str]]] = []  # per metric, per variant: (value, change)
    for m in metrics:
        unit, factor = unit_of(m)
        name = m if len(m) <= name_w - 2 else m[: name_w - 3] + "~"
        left.append(f"{name:<{name_w}}{unit:<8}{number(by_metric[m][0]['baseline'] * factor):>12}")
        cells.append([(number(r["value"] * factor), _change(r, factor, unit)) for r in by_metric[m]])
    heads = _column_names(cmp.variants)
    widths = [max([len(heads[i]), 8] + [len(row[i][0]) for row in cells]) + 2 for i in range(len(cmp.variants))]
    change_w = [max([6] + [len(row[i][1]) for row in cells]) + 2 for i in range(len(cmp.variants))]
    start = 0
    while start < len(cmp.variants):
        end, used = start, name_w + 20
        while end < len(cmp.variants) and (end == start or used + widths[end] + change_w[end] <= WIDTH):
            used += widths[end] + change_w[end]
            end += 1
        lines.append("")
        head = f"{'metric':<{name_w}}{'unit':<8}{'baseline':>12}"
        for i in range(start, end):
            head += f"{heads[i]:>{widths[i]}}  {'change':<{change_w[i] - 2}}"
        lines.append(head.rstrip())
        for k, row in enumerate(cells):
            line = left[k]
            for i in range(start, end):
                line += f"{row[i][0]:>{widths[i]}}  {row[i][1]:<{change_w[i] - 2}}"
            lines.append(line.rstrip())
        start = end
    if not show_all and not patterns:
        same = len(cmp.metrics) - len(metrics)
        lines.append("")
        lines.append(f"{len(metrics)} of {len(cmp.metrics)} metrics differ" + (
            f"; {same} equal in every case (--all shows them)" if same else ""))
    return "\n".join(lines) + "\n"


def _brief_change(r: dict, factor: float, unit: str) -> str:
    """`` (+5.4%)``, `` (-0.61 pts)`` for a share, nothing when unchanged."""
    d = r["change"] * factor
    if r["same"] or not math.isfinite(d):
        return ""
    if unit == "%":
        return f" ({_signed(d)} pts)"
    return f" ({r['relative']:+.1%})" if math.isfinite(r["relative"]) else f" ({_signed(d)})"


def markdown(cmp: Comparison, patterns: Sequence[str] = ()) -> str:
    """The comparison as a Markdown table the README's what-if tables are made of: a row per case (the baseline
    first), a column per metric, each variant's value with its change beside it."""
    table = rows(cmp, patterns, changed_only=not patterns)
    metrics = list(dict.fromkeys(r["metric"] for r in table))
    by_metric: dict[str, list[dict]] = {}
    for r in table:
        by_metric.setdefault(r["metric"], []).append(r)
    heads = []
    for m in metrics:
        unit, _ = unit_of(m)
        heads.append(f"{m} ({unit})" if unit else m)
    lines = ["| case | " + " | ".join(heads) + " |", "|---" * (len(metrics) + 1) + "|"]
    base = [number(by_metric[m][0]["baseline"] * unit_of(m)[1]) for m in metrics]
    lines.append("| baseline | " + " | ".join(base) + " |")
    for i, c in enumerate(cmp.variants):
        values = []
        for m in metrics:
            unit, factor = unit_of(m)
            r = by_metric[m][i]
            values.append(number(r["value"] * factor) + _brief_change(r, factor, unit))
        lines.append(f"| {c.label} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"
