"""What a fit gives: fitted and held values with units and reasons, errors and covariance, every residual."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.calibration.targets import Target, cell_error


@dataclass
class CalibrationResult:
    parameters: dict[str, float]  # fitted, by dotted path
    log_sd: dict[str, float]
    log_cov: list[list[float]]
    residuals: list[dict]  # every target: measured, simulated, error, tolerance, role
    held: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    held_reason: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    cost: float = 0.0
    evaluations: int = 0
    sources: list[str] = field(default_factory=list)
    bounds: dict[str, list[float]] = field(default_factory=dict)  # of the fitted: draws for --uncertainty stay inside


def residual_row(t: Target, sim: float) -> dict:
    err = cell_error(t.kind, t.measured, sim, t.lo, t.hi)  # a range: from its nearer edge, as validate judges it
    row = {"target": t.name, "role": t.role, "measured": float(t.measured), "simulated": float(sim),
           "error": float(err), "tolerance": t.tolerance, "kind": t.kind}
    if t.lo is not None:
        row |= {"measured_lo": t.lo, "measured_hi": t.hi}
    if t.note:
        row["note"] = t.note
    return row


def outside(row: dict) -> bool:
    """A fitted or checked row whose error exceeds its tolerance (a measured range counts from its nearer edge)."""
    if row["role"] == "unclaimed":
        return False
    sim = row["simulated"]
    if sim is None or not math.isfinite(sim):
        return True
    err = cell_error(row["kind"], row["measured"], sim, row.get("measured_lo"), row.get("measured_hi"))
    return not abs(err) <= row["tolerance"] + 1e-12
