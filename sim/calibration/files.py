"""What ``sim calibrate`` writes: the calibration file (YAML a scenario names under ``calibrations``), its report
(markdown) and its parity plot."""

from __future__ import annotations

import math
import os
import re

import numpy as np

from sim.calibration.result import CalibrationResult, outside


def calibration_yaml(res: CalibrationResult, command: str) -> str:
    from sim.config.yaml_io import dump_yaml
    from sim.formats.measured_tables import read_provenance

    header = ["# Written by `sim calibrate`; do not edit by hand. Reproduce from the project root with:",
              f"#   {command}"]
    if getattr(res, "interrupted", False):  # a fit stopped by Ctrl-C: the best values so far
        header.append(f"# INTERRUPTED in {res.stopped_in}: not converged (the first warning says where it stopped)")
    provenance = []
    for src in res.sources:
        if src.endswith(".csv") and os.path.exists(src):
            first = (read_provenance(src) or [""])[0]
            if first:
                provenance.append(f"#   {os.path.basename(src)}: {first[:100]}")
    if provenance:
        header += ["# Measurements (provenance as in each table's header):", *provenance]
    header += ["# log_sd: standard error of log(value), i.e. relative; log_cov: their covariance (order of `fitted`),",
               "# which `sim run --uncertainty N` samples from. Held values are assumptions, each with its reason."]
    rows = [{k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()}
            for r in res.residuals]
    body = {"kind": "calibrate", "parameters": {**res.held, **res.parameters}, "units": res.units,
            "fitted": list(res.parameters), "bounds": res.bounds, "held_reason": res.held_reason,
            "log_sd": res.log_sd,
            "log_cov": res.log_cov, "warnings": res.warnings, "cost": res.cost, "evaluations": res.evaluations,
            "residuals": rows}
    return "\n".join(header) + "\n" + dump_yaml(body)


def _sd(log_sd: float) -> str:
    return f"{log_sd:.1%}" if math.isfinite(log_sd) else "none (not pinned down)"


def report_markdown(res: CalibrationResult, command: str, plot: str | None) -> str:
    lines = ["# Calibration report", "", f"`{command}`", "", "| parameter | value | unit | relative standard error |",
             "|---|---|---|---|"]
    lines += [f"| `{n}` | {v:.6g} | {res.units.get(n, '')} | {_sd(res.log_sd[n])} |" for n, v in res.parameters.items()]
    if res.held:
        lines += ["", "| held | value | unit | why |", "|---|---|---|---|"]
        lines += [f"| `{n}` | {v:.6g} | {res.units.get(n, '')} | {res.held_reason.get(n, '')} |"
                  for n, v in res.held.items()]
    if res.warnings:
        lines += ["", "Warnings:", ""] + [f"- {w}" for w in res.warnings]
    lines += ["", "| target | role | measured | simulated | error | tolerance |", "|---|---|---|---|---|---|"]
    for r in res.residuals:
        share = r["kind"] == "share"
        err = f"{r['error'] * 100:+.2f} pts" if share else f"{r['error']:+.1%}"
        tol = f"{r['tolerance'] * 100:g} pts" if share else f"{r['tolerance'] * 100:.3g}%"
        meas = f"{r['measured']:.4g}" if "measured_lo" not in r else f"{r['measured_lo']:.4g}-{r['measured_hi']:.4g}"
        flag = " **outside**" if outside(r) else ""
        lines.append(f"| {r['target']} | {r['role']} | {meas} | {r['simulated']:.4g} | {err}{flag} | {tol} |")
    notes = [(r["target"], r["note"]) for r in res.residuals if r.get("note")]
    if notes:
        lines += ["", "Not fitted:", ""] + [f"- {n}: {why}" for n, why in notes]
    if plot:
        lines += ["", f"![measured against simulated]({os.path.basename(plot)})"]
    return "\n".join(lines) + "\n"


# a residual row carries no unit: its quantity (the last word of its target's name, or a bucket's last two) says it;
# the first pattern that matches wins. A share (kind share) is always a percentage, its tolerance in points.
UNITS = [
    (r"(pcie_spill|hit_rate) \S+-\S+", "tok/s"),  # a bucket: the mean decode rate of its requests
    (r".*slots", "slots"),
    (r".*(vram|_mib).*", "MiB"),
    (r".*ratio.*", "ratio"),
    (r"ttft.*|.*(_time|latency|wait).*", "s"),
    (r".*(tok_s|decode|prefill).*", "tok/s"),
    (r".*(share|rate|coverage|utili[sz]ation).*", "%"),
]
UNIT_ORDER = ["tok/s", "s", "MiB", "slots", "ratio", "%", ""]
ROLES = (("fit", "o", "#0072B2"), ("check", "s", "#E69F00"), ("unclaimed", "X", "#777777"))
TOLERANCE_GID = "sim-tolerance"


def residual_unit(row: dict) -> str:
    """The unit a residual row's values are in ("" when its name does not say): shares in percent."""
    if row["kind"] == "share":
        return "%"
    words = row["target"].split()[1:] or row["target"].split()
    for pattern, unit in UNITS:
        if any(re.fullmatch(pattern, q, flags=re.IGNORECASE) for q in (" ".join(words[-2:]), words[-1])):
            return unit
    return ""


def _tolerance(kind: str, tol: float) -> str:
    """A tolerance as the report gives it: points for a share, percent for a rate."""
    points = f"{tol * 100:.3g}"
    return f"±{points} point{'' if points == '1' else 's'}" if kind == "share" else f"±{points}%"


def _accepted(kind: str, lo: float, hi: float, tol: float) -> tuple[float, float]:
    """The simulated values a tolerance accepts for a measured value (or range lo..hi)."""
    return (lo - tol, hi + tol) if kind == "share" else (lo * (1 - tol), hi * (1 + tol))


def parity_figure(res: CalibrationResult):
    """Simulated against measured, one panel per unit (rates, times, MiB, ...; a rate-kind fraction apart from the
    shares, whose tolerance is in points), with y = x and its tolerance as a band: the tolerance of every row when
    they agree, else the widest, with each row's own as a bar (the simulated values it accepts)."""
    from matplotlib.figure import Figure  # not pyplot: no backend switched, no figure left open in the process

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in res.residuals:
        groups.setdefault((residual_unit(r), r["kind"]), []).append(r)
    keys = sorted(groups, key=lambda k: (UNIT_ORDER.index(k[0]) if k[0] in UNIT_ORDER else len(UNIT_ORDER), k))
    ncols = min(3, len(keys)) or 1
    nrows = max(1, math.ceil(len(keys) / ncols))
    fig = Figure(figsize=(4.2 * ncols, 5.4 * nrows))
    grid = fig.subplots(nrows, ncols, squeeze=False)
    flat = list(grid.ravel())
    for ax in flat[len(keys):]:
        fig.delaxes(ax)
    for ax, key in zip(flat, keys, strict=False):
        _parity_panel(ax, key, groups[key])
    fig.suptitle("simulated against measured, one panel per unit: the line is y = x, the band its tolerance",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _parity_panel(ax, key: tuple[str, str], rows: list[dict]) -> None:
    unit, kind = key
    scale = 100.0 if unit == "%" else 1.0
    drawn = [r for r in rows if r["simulated"] is not None and math.isfinite(r["simulated"])
             and (kind == "share" or r["simulated"] > 0)]
    tols = sorted({float(r["tolerance"]) for r in drawn})
    widest = tols[-1] if tols else 0.0
    vals = [v * scale for r in drawn for v in (r["measured"], r["simulated"], r.get("measured_lo"),
                                               r.get("measured_hi")) if v is not None]
    if not vals:
        vals = [0.0, 1.0] if kind == "share" else [1.0, 10.0]
    low, top = min(vals), max(vals)
    log = kind != "share" and low > 0 and top / low > 10
    if log:
        low, top = low / 1.25, top * 1.25
    else:  # values closer together than their tolerance: wide enough to show the band around them
        room = widest * scale if kind == "share" else widest * max(abs(low), abs(top))
        pad = max((top - low) * 0.08, room if top - low < room else 0.0, 1e-9)
        low, top = (max(low - pad, 0.0) if kind == "rate" and low > 0 else low - pad), top + pad
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    edge = np.array([low, top])
    band_lo, band_hi = _accepted(kind, edge / scale, edge / scale, widest)
    which = "" if len(tols) <= 1 else "widest, "
    ax.fill_between(edge, band_lo * scale, band_hi * scale, color="#999999", alpha=0.25, linewidth=0,
                    gid=TOLERANCE_GID, label=f"tolerance ({which}{_tolerance(kind, widest)})")
    ax.plot(edge, edge, color="#555555", lw=0.8, label="y = x")
    if len(tols) > 1:  # one bar per cell: the simulated values its own tolerance accepts
        spans = np.array([_accepted(kind, r.get("measured_lo", r["measured"]), r.get("measured_hi", r["measured"]),
                                    float(r["tolerance"])) for r in drawn]) * scale
        ax.vlines([r["measured"] * scale for r in drawn], spans[:, 0], spans[:, 1], color="#333333", lw=0.6,
                  alpha=0.6, zorder=2,
                  label="bars: each cell's own tolerance (" + ", ".join(_tolerance(kind, t) for t in tols) + ")")
    for role, marker, colour in ROLES:
        pts = [r for r in drawn if r["role"] == role]
        if not pts:
            continue
        xv = np.array([r["measured"] for r in pts]) * scale
        yv = np.array([r["simulated"] for r in pts]) * scale
        ranged = [r for r in pts if "measured_lo" in r]
        if ranged:
            ax.hlines([r["simulated"] * scale for r in ranged], [r["measured_lo"] * scale for r in ranged],
                      [r["measured_hi"] * scale for r in ranged], color=colour, lw=1.0, zorder=3,
                      label="measured range")
        ax.scatter(xv, yv, s=18, marker=marker, color=colour, label=f"{role} ({len(pts)})", zorder=4)
    bad = [r for r in drawn if outside(r)]
    if bad:
        ax.scatter([r["measured"] * scale for r in bad], [r["simulated"] * scale for r in bad], s=70,
                   facecolors="none", edgecolors="#D55E00", linewidths=1.1, zorder=5,
                   label=f"outside its tolerance ({len(bad)})")
    if not log:
        ax.ticklabel_format(useOffset=False)
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_aspect("equal", adjustable="box")
    note = ", log scale" if log else ""
    name = f"{unit}{note}" if unit else f"unit not known{note}"
    what = {"tok/s": "rates", "s": "times", "MiB": "VRAM", "slots": "expert cache slots", "ratio": "ratios",
            "%": "shares" if kind == "share" else "fractions (relative tolerance)"}.get(unit, "other")
    missing = len(rows) - len(drawn)
    ax.set_title(f"{what}: {len(drawn)} cell{'s' if len(drawn) != 1 else ''}"
                 + (f" ({missing} not simulated)" if missing else ""))
    ax.set_xlabel(f"measured ({name})")
    ax.set_ylabel(f"simulated ({name})")
    handles, labels = ax.get_legend_handles_labels()
    keep = dict(zip(labels, handles, strict=True))  # one entry per label (bars and ranges are drawn per cell)
    ax.legend(list(keep.values()), list(keep), loc="upper center", bbox_to_anchor=(0.5, -0.17), fontsize=7,
              frameon=False)


def plot_residuals(res: CalibrationResult, path: str) -> None:
    """Write the parity figure (:func:`parity_figure`) as PNG, atomically and the same bytes for the same rows."""
    fig = parity_figure(res)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=90, metadata={"Software": None})
    os.replace(tmp, path)
