"""What ``sim calibrate`` writes: the calibration file (YAML a scenario names under ``calibrations``), its report
(markdown) and its parity plot."""

from __future__ import annotations

import math
import os

import numpy as np

from sim.calibration.result import CalibrationResult, outside


def calibration_yaml(res: CalibrationResult, command: str) -> str:
    import yaml

    from sim.core.tables import read_measured as _read

    header = ["# Written by `sim calibrate`; do not edit by hand. Reproduce from the project root with:",
              f"#   {command}"]
    provenance = []
    for src in res.sources:
        if src.endswith(".csv") and os.path.exists(src):
            first = (_read(src)[0] or [""])[0]
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
    return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)


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


def plot_residuals(res: CalibrationResult, path: str) -> None:
    """Measured against simulated, one panel per observable kind (rates on log axes), fitted and held-out cells
    marked apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def panel(r: dict) -> str:
        return "shares" if r["kind"] == "share" else "rates and times"

    keys = sorted({panel(r) for r in res.residuals})
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4.6), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for role, marker, colour in (("fit", "o", "#0072B2"), ("check", "s", "#E69F00"),
                                     ("unclaimed", "x", "#999999")):
            pts = [(r["measured"], r["simulated"]) for r in res.residuals
                   if panel(r) == key and r["role"] == role and r["simulated"] is not None
                   and math.isfinite(r["simulated"]) and (key == "shares" or r["simulated"] > 0)]
            if pts:
                xv, yv = np.array(pts).T
                ax.scatter(xv, yv, s=16, marker=marker, color=colour, label=role)
        vals = [v for r in res.residuals if panel(r) == key for v in (r["measured"], r["simulated"])
                if v is not None and math.isfinite(v) and (key == "shares" or v > 0)]
        if vals:
            low, top = min(vals), max(vals)
            if key != "shares":
                ax.set_xscale("log")
                ax.set_yscale("log")
                low, top = low / 1.2, top * 1.2
            else:
                pad = (top - low) * 0.05 or 0.01
                low, top = low - pad, top + pad
            ax.plot([low, top], [low, top], color="grey", lw=0.8)
            ax.set_xlim(low, top)
            ax.set_ylim(low, top)
        ax.set_title(key)
        ax.set_xlabel("measured")
        ax.set_ylabel("simulated")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)
