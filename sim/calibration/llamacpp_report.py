"""What ``sim fit-offload`` writes: calibration/llamacpp.yaml (every parameter with its unit and whether it was
fitted, the in-sample summary, the rows not expressed) and llamacpp_report.md (every row's in-sample residual)."""

from __future__ import annotations

import math

import numpy as np

from sim.calibration.llamacpp_case import CaseTable
from sim.calibration.llamacpp_fit import SpeedFit
from sim.llamacpp.params import ASSUMED, unit


def _error(measured: float, simulated: float, quantity: str) -> float:
    if not math.isfinite(simulated):
        return float("nan")
    return simulated - measured if quantity == "vram_gib" else simulated / measured - 1


def summary(table: CaseTable, predictions: list[tuple[float, str]]) -> dict[str, dict]:
    """In-sample median |error| (relative; GiB for VRAM) and rows, per table and quantity."""
    groups: dict[str, list[float]] = {}
    for c, (v, _) in zip(table.cases, predictions, strict=True):
        e = _error(c.measured, v, c.quantity)
        groups.setdefault(f"{c.table}.{c.quantity}", []).append(abs(e) if math.isfinite(e) else math.inf)
    return {k: {"rows": len(v), "median_abs_error": float(f"{np.median(v):.4g}")} for k, v in sorted(groups.items())}


def result_yaml(result: SpeedFit, table: CaseTable, predictions: list[tuple[float, str]], command: str) -> dict:
    values = result.params.as_dict()
    return {
        "fitted_by": command,
        "data": "calibration/public/ (every llama-bench table, each row with its source_url), mapped by "
                "calibration/llamacpp_setups.yaml",
        "parameters": {k: {"value": float(f"{v:.6g}"), "unit": unit(k), "fitted": k in result.fitted,
                           **({"why_not_fitted": ASSUMED[k]} if k in ASSUMED else {})}
                       for k, v in values.items()},
        "summary": summary(table, predictions),
        "not_loading": sorted(result.not_loading),
        "excluded": {f"{t}:{r}": why for t, r, _, _, why in table.excluded},
    }


def report_markdown(result: SpeedFit, table: CaseTable, predictions: list[tuple[float, str]]) -> str:
    lines = ["# llama.cpp fit: in-sample residuals", "",
             "`sim fit-offload` (sim/calibration/llamacpp_fit.py): one set of parameters for every public llama-bench "
             "row. error = simulated / measured - 1 (VRAM: simulated - measured, GiB). These are the fit's own rows: "
             "how it does on sources it never saw is docs/fidelity.md (`sim validate --public`).", "",
             "| table.quantity | rows | median abs error |", "|---|---|---|"]
    for k, v in summary(table, predictions).items():
        lines.append(f"| {k} | {v['rows']} | {v['median_abs_error']:.4g} |")
    lines += ["", "## Parameters", "", "| parameter | value | unit | fitted |", "|---|---|---|---|"]
    for k, v in result.params.as_dict().items():
        lines.append(f"| {k} | {v:.4g} | {unit(k)} | {'yes' if k in result.fitted else 'no'} |")
    lines += ["", "## Rows", "", "| table | row | source | backend | quantity | tokens | depth | measured | simulated "
              "| error | mechanism |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, (v, why) in zip(table.cases, predictions, strict=True):
        e = _error(c.measured, v, c.quantity)
        shown = "does not load" if not math.isfinite(e) else (f"{e:+.2f} GiB" if c.quantity == "vram_gib"
                                                              else f"{e:+.1%}")
        lines.append(f"| {c.table} | {c.row_id} | {c.source} | {c.backend} | {c.quantity} | {c.tokens} | {c.depth} "
                     f"| {c.measured:.4g} | {v:.4g} | {shown} | {why.replace('|', '/')} |")
    lines += ["", "## Not expressed", ""] + [f"- {t} {r}: {why}" for t, r, _, _, why in table.excluded]
    return "\n".join(lines) + "\n"
