"""Figures of a sweep's table: labels with units, a colour-blind-safe palette, medians with 90% bands over seeds and
parameter draws, measured points overlaid, and files that are the same bytes for the same data."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.core.errors import ScenarioError
from sim.core.output import atomic_write_with
from sim.formats.inputs import check_file, read_text

# Okabe & Ito (2008), safe for the common colour-vision deficiencies; markers and dashes tell lines apart in grey too
MAX_MANIFEST_BYTES = 64 * 2**20  # a sweep's sweep.json (bytes; a 1,000-point sweep writes about 100 KB)
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
DASHES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
# the same dashes with wider gaps (in line widths), for a line drawn over another: the covered one shows in the gaps
OPEN_DASHES = [(0, (8, 3)), (0, (5, 4)), (0, (6, 3, 1.5, 3)), (0, (1.5, 3)), (0, (5, 3)), (0, (3, 3, 1, 3, 1, 3))]
FORMATS = ("png", "svg", "pdf")
# one white-filled marker per measured series (in the order the sweep file names them), and what the caption calls it
MEASURED_MARKERS = ["*", "P", "X", "h", "d", "p", "8"]
MARKER_NAMES = {"*": "stars", "P": "pluses", "X": "crosses", "h": "hexagons", "d": "diamonds", "p": "pentagons",
                "8": "octagons"}
# artists the caption describes are tagged, so that it says only what was drawn
BAND_GID = "sim-band"
MEASURED_GID = "sim-measured"
LOG_NOTE = "log scale"
COVERED_WIDTH = 3.6  # a line another runs on is drawn at least this wide (points), the other at 30% of it on top

# known metrics: (label, unit, factor applied before plotting)
METRICS: dict[str, tuple[str, str, float]] = {
    "decode_tok_s": ("decode", "tok/s", 1.0),
    "decode_tok_s_median": ("decode, median request", "tok/s", 1.0),
    "expert_hit_rate": ("expert hit rate", "%", 100.0),
    "pcie_spill_share": ("PCIe spill share of routed experts", "%", 100.0),
    "expert_coverage": ("expert cache coverage", "%", 100.0),
    "expert_slots": ("expert cache slots", "slots", 1.0),
    "offload_share": ("experts served off the engine GPU", "%", 100.0),
    "throughput_tok_s": ("throughput", "tok/s", 1.0),
    "prefill_tok_s": ("prefill", "tok/s", 1.0),
    "ttft_mean_s": ("TTFT, mean", "s", 1.0),
    "ttft_p50_s": ("TTFT, median", "s", 1.0),
    "ttft_p99_s": ("TTFT, p99", "s", 1.0),
    "ttft_s_median": ("TTFT, median request", "s", 1.0),
    "queue_wait_mean_s": ("queue wait, mean", "s", 1.0),
    "gpu_busy_share": ("GPU busy (driver)", "%", 100.0),
    "gpu_active_share": ("GPU active", "%", 100.0),
    "energy_j_per_token": ("energy", "J/token", 1.0),
    "gpu_power_w": ("GPU power", "W", 1.0),
    "stall_share": ("decode time stalled", "%", 100.0),
    "eager_share": ("decode time in eager steps", "%", 100.0),
    "compute_share": ("decode time computing", "%", 100.0),
    "free_vram_gib": ("free VRAM at start", "GiB", 1.0),
    "requests_rejected": ("requests rejected", "requests", 1.0),
    "requests_per_s": ("request rate", "requests/s", 1.0),
    "little_lambda_w": ("arrival rate x time in the engine", "requests", 1.0),
    "requests_in_engine_mean": ("requests in the engine, mean", "requests", 1.0),
}
_SUFFIXES = [("_tok_s", "tok/s", 1.0), ("_per_s", "/s", 1.0), ("_share", "%", 100.0), ("_rate", "%", 100.0),
             ("_gbps", "GB/s", 1.0), ("gbps", "GB/s", 1.0), ("_gib", "GiB", 1.0), ("_mib", "MiB", 1.0),
             ("_gb", "GB", 1.0), ("_w", "W", 1.0), ("_s", "s", 1.0)]


def metric_meta(name: str) -> tuple[str, str, float]:
    """(label, unit, factor) of a result column."""
    if name in METRICS:
        return METRICS[name]
    m = re.fullmatch(r"vram\.(.+)\.(free|used)_mib", name)
    if m:
        return (f"{m.group(2)} VRAM on {m.group(1)}", "MiB", 1.0)
    m = re.fullmatch(r"job\.(.+)\.estimate_s\.(.+)", name)
    if m:
        return (f"estimated completion on {m.group(2)}", "s", 1.0)
    text = name.removeprefix("param.").replace(".", " ")  # a dotted name keeps its parts: "load mac cold disk"
    for suffix, unit, factor in _SUFFIXES:
        if text.endswith(suffix):
            return ((text[: -len(suffix)].replace("_", " ").strip() or text), unit, factor)
    return (text.replace("_", " "), "", 1.0)


def axis_meta(name: str, manifest: dict) -> tuple[str, str, float]:
    """(label, unit, factor) of an axis column (from the sweep file's label and unit) or a metric."""
    for a in manifest.get("axes", []):
        if a["name"] == name:
            if a.get("label"):
                return a["label"], a.get("unit") or "", 1.0
            label, unit, factor = metric_meta(name)
            if factor != 1.0:  # axis values are plotted as given: a share is a fraction here, not percent
                unit = "fraction"
            return label, a.get("unit") or unit, 1.0
    return metric_meta(name)


def label_text(meta: tuple[str, str, float]) -> str:
    label, unit, _ = meta
    return f"{label} ({unit})" if unit and unit != label else label


@dataclass
class Sweep:
    folder: str
    frame: Any  # pandas.DataFrame
    manifest: dict

    @property
    def axes(self) -> list[str]:
        return [a["name"] for a in self.manifest.get("axes", [])]

    def column(self, name: str, what: str, numeric: bool = False) -> str:
        """``name`` if the results have it (and, with ``numeric``, it holds numbers); one line otherwise."""
        if name not in self.frame.columns:
            close = [c for c in self.frame.columns if name.lower() in c.lower()][:5]
            hint = f" (columns like it: {', '.join(close)})" if close else \
                f" (axes: {', '.join(self.axes)}; metrics such as decode_tok_s)"
            raise ScenarioError(self.folder, what, f"no column {name!r} in results{hint}")
        if numeric and not _is_numeric(list(self.frame[name])):
            raise ScenarioError(self.folder, what, f"column {name!r} holds text, not numbers to plot")
        return name

    def check_drawn(self, drawn: set[str], x: str) -> None:
        """Every axis that takes several values is drawn (x, hue or facet) when x is an axis: otherwise its values
        would be pooled into one median and its spread would pass for uncertainty."""
        if x not in self.axes:
            return  # x is a metric: every point is drawn on its own
        for a in self.axes:
            if a not in drawn and self.frame[a].nunique(dropna=False) > 1:
                raise ScenarioError(self.folder, "--hue", f"axis {a!r} takes {self.frame[a].nunique()} values but is "
                                    "not drawn: give it --hue or --facet, or sweep it at one value")


def load_sweep(folder: str) -> Sweep:
    import pandas as pd

    manifest_path = os.path.join(folder, "sweep.json")
    if not os.path.lexists(manifest_path) and "\0" not in folder:
        raise ScenarioError(folder, "", "not a sweep folder (no sweep.json): run sim sweep ... --out "
                            f"{folder} first")
    text = read_text(manifest_path, "", "the sweep.json sim sweep writes", max_bytes=MAX_MANIFEST_BYTES)
    try:
        manifest = json.loads(text)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("axes", []), list):
            raise ValueError("not the map sim sweep writes")
    except (ValueError, RecursionError) as exc:
        raise ScenarioError(manifest_path, "", f"cannot read: {str(exc)[:200]}") from None
    try:
        parquet = os.path.join(folder, "results.parquet")
        check_file(parquet, "", "the results table sim sweep writes")
        frame = pd.read_parquet(parquet)
    except Exception:  # noqa: BLE001 - no pyarrow, or the file is gone: the CSV holds the same table
        table = os.path.join(folder, "results.csv")
        check_file(table, "", "the results table sim sweep writes")  # never a FIFO or a device handed to pandas
        try:
            frame = pd.read_csv(table)
        except (OSError, ValueError) as exc:
            raise ScenarioError(folder, "results.csv", f"cannot read: {exc}") from None
    if frame.empty:
        raise ScenarioError(folder, "", "the sweep has no finished runs yet")
    if "error" in frame.columns:
        frame = frame[frame["error"].fillna("") == ""]
        if frame.empty:
            raise ScenarioError(folder, "error", "every run of this sweep failed (see results.csv)")
    return Sweep(folder, frame, manifest)


STYLE = {  # rcParams of every figure sim draws: fixed fonts and a fixed SVG id salt (same data, same bytes)
    "svg.hashsalt": "sim", "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "figure.dpi": 100, "savefig.dpi": 100, "path.simplify": False,
}


class Figures:
    """What the presets call of pyplot, without pyplot: a figure here belongs to no backend and no display, so
    drawing one changes nothing of a notebook's own matplotlib (its backend, its open figures, its rcParams)."""

    @staticmethod
    def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
                 squeeze: bool = True, **kwargs):
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize)
        return fig, fig.subplots(nrows, ncols, squeeze=squeeze, **kwargs)

    @staticmethod
    def close(fig) -> None:
        """Nothing to close: no figure is registered with pyplot."""


def figure_style():
    """A context in which figures are made and saved with :data:`STYLE` (matplotlib's rcParams as they were after
    it, for the rest of the process)."""
    import matplotlib

    return matplotlib.rc_context(STYLE)


def setup() -> type[Figures]:
    """How presets make figures (:class:`Figures`); make and save them inside :func:`figure_style`."""
    return Figures


def save(fig, path: str) -> None:
    """Write the figure atomically; metadata that would differ between runs (dates) left out."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise ScenarioError("-o", path, f"a file ending in .{', .'.join(FORMATS)}")
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}, "png": {"Software": None}}[ext]
    label_log_axes(fig)
    with figure_style():
        atomic_write_with(path, lambda tmp: fig.savefig(tmp, format=ext, metadata=metadata, bbox_inches="tight"))


def _is_numeric(values) -> bool:
    return all(isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) for v in values)


def summarise(frame, x: str, y: str, group: list[str], x_is_axis: bool):
    """Per group and x: median, 5th and 95th percentile of y, and the number of runs. When x is a metric (coverage)
    the runs of one point are summarised together, x as their median."""
    keys = group + ([x] if x_is_axis else ["point"])
    rows = []
    for key, sub in frame.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        ys = sub[y].to_numpy(dtype=float)
        ys = ys[np.isfinite(ys)]
        if ys.size == 0:
            continue
        xv = key[len(group)] if x_is_axis else float(np.median(sub[x].to_numpy(dtype=float)))
        rows.append({**dict(zip(group, key[:len(group)], strict=True)), "x": xv,
                     "median": float(np.median(ys)), "p5": float(np.percentile(ys, 5, method="inverted_cdf")),
                     "p95": float(np.percentile(ys, 95, method="inverted_cdf")), "n": int(ys.size)})
    return rows


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a) == str(b)


class Styler:
    """One colour, marker and dash per hue value, in the order the values first appear."""

    def __init__(self, values: list):
        self.values = list(dict.fromkeys(values))

    def index(self, value) -> int:
        for i, v in enumerate(self.values):
            if _same(v, value):
                return i
        return len(self.values)

    def colour(self, value) -> str:
        return PALETTE[self.index(value) % len(PALETTE)]

    def marker(self, value) -> str:
        return MARKERS[self.index(value) % len(MARKERS)]

    def dash(self, value):
        return DASHES[self.index(value) % len(DASHES)]


def _coincides(xs: np.ndarray, ys: np.ndarray, other: tuple[np.ndarray, np.ndarray], tol: float) -> bool:
    """Whether a line runs on top of another over at least one segment: two neighbouring x values they share where
    their medians are within ``tol`` (a line would hide the other there)."""
    oxs, oys = other
    close = [any(np.isclose(x, ox) and abs(y - oy) <= tol for ox, oy in zip(oxs, oys, strict=True))
             for x, y in zip(xs, ys, strict=True)]
    return any(a and b for a, b in zip(close, close[1:], strict=False))


def line_panel(ax, sweep: Sweep, x: str, y: str, hue: str | None, styler: Styler | None, frame=None,
               overlay: bool = True, hue_label: str | None = None, facet: tuple[str, Any] | None = None) -> None:
    """Median of y against x per hue value, a 90% band where a point has several runs, measured points on top
    (``facet``: the column and value of this panel, for the measured points that belong to it). A line that runs on
    an earlier one is drawn above it, at most 30% of its width (the covered line widened), with wider gaps in its
    dashes and smaller markers, so both stay visible."""
    frame = sweep.frame if frame is None else frame
    x_is_axis = x in sweep.axes
    xf = axis_meta(x, sweep.manifest)[2] if x_is_axis else metric_meta(x)[2]
    yf = metric_meta(y)[2]
    group = [hue] if hue else []
    rows = summarise(frame, x, y, group, x_is_axis)
    hues = [None] if not hue else list(dict.fromkeys(r[hue] for r in rows))
    numeric_x = _is_numeric([r["x"] for r in rows])
    cats = list(dict.fromkeys(r["x"] for r in rows)) if not numeric_x else []
    span = (max(r["median"] for r in rows) - min(r["median"] for r in rows)) * abs(yf) if rows else 0.0
    drawn: list[tuple[np.ndarray, np.ndarray, Any]] = []  # (xs, medians, line) of the lines drawn so far
    for hv in hues:
        part = [r for r in rows if hue is None or _same(r[hue], hv)]
        if not part:
            continue
        if numeric_x:
            part.sort(key=lambda r: r["x"])
            xs = np.array([r["x"] for r in part], dtype=float) * xf
        else:
            xs = np.array([cats.index(r["x"]) for r in part], dtype=float)
        med = np.array([r["median"] for r in part]) * yf
        colour = styler.colour(hv) if styler else PALETTE[0]
        prefix = axis_meta(hue, sweep.manifest)[0] if hue and hue_label is None else hue_label
        name = None if hv is None else (f"{prefix} {hv}" if prefix else str(hv))
        rank = styler.index(hv) if styler else 0
        width, size, z = max(2.8 - 0.5 * rank, 1.2), 3.5, 2 + 0.1 * rank
        dash = styler.dash(hv) if styler else "-"
        under = [d for d in drawn if _coincides(xs, med, (d[0], d[1]), max(span * 0.01, 1e-12))]
        if under:  # on top of the lines it covers, thinner than each, so they show on both sides of it
            for d in under:
                d[2].set_linewidth(max(d[2].get_linewidth(), COVERED_WIDTH))
            width = min(width, *(0.3 * d[2].get_linewidth() for d in under))
            size = min(size, *(0.6 * d[2].get_markersize() for d in under))
            z = max(z, *(d[2].get_zorder() + 0.05 for d in under))
            dash = OPEN_DASHES[(styler.index(hv) if styler else 0) % len(OPEN_DASHES)]
        (line,) = ax.plot(xs, med, color=colour, linestyle=dash,
                          marker=styler.marker(hv) if styler else "o", markersize=size, linewidth=width,
                          label=name, zorder=z)
        if under:  # a white edge parts it from the line below, whose colour may be close to its own
            from matplotlib import patheffects

            line.set_path_effects([patheffects.withStroke(linewidth=width + 1.4, foreground="white"),
                                   patheffects.Normal()])
        drawn.append((xs, med, line))
        if any(r["n"] > 1 for r in part):
            ax.fill_between(xs, np.array([r["p5"] for r in part]) * yf, np.array([r["p95"] for r in part]) * yf,
                            color=colour, alpha=0.18, linewidth=0, gid=BAND_GID)
    if cats:
        ax.set_xticks(range(len(cats)), [str(c) for c in cats])
    if overlay:
        measured_points(ax, sweep, x=x, y=y, hue=hue, facet=facet, styler=styler, xf=xf if numeric_x else None,
                        cats=cats)
    ax.set_xlabel(label_text(axis_meta(x, sweep.manifest) if x_is_axis else metric_meta(x)))
    ax.set_ylabel(label_text(metric_meta(y)))


def overlay_fits(p: dict, x: str, hue: str | None, facet: tuple[str, Any] | None) -> bool:
    """Whether a measured point belongs on a panel: its x is this x, and the axis value it was measured at (its
    hue) is this panel's line or facet; a panel split by another axis has no place for it."""
    if p.get("x_column") not in (None, x):
        return False
    if p.get("hue") is None:
        return facet is None
    column = p.get("hue_column")
    if facet is not None and facet[0] == column:
        return _same(facet[1], p["hue"])
    return facet is None and hue == column


def measured_marker(manifest: dict, label: str) -> str:
    """The marker of a measured series: one per label, in the order the sweep file lists them."""
    labels = list(dict.fromkeys(p["label"] for p in manifest.get("measured", [])))
    i = labels.index(label) if label in labels else len(labels)
    return MEASURED_MARKERS[i % len(MEASURED_MARKERS)]


def measured_points(ax, sweep: Sweep, x: str, y: str, hue: str | None, facet: tuple[str, Any] | None,
                    styler: Styler | None, xf: float | None, cats: list) -> None:
    """The sweep file's measured points for metric y: a white-filled marker per series (a star, a plus, ...), a bar
    over the measured range, in the colour of the line it belongs to."""
    yf = metric_meta(y)[2]
    seen: set[str] = set()
    for p in sweep.manifest.get("measured", []):
        m = p["metrics"].get(y)
        if m is None or not overlay_fits(p, x, hue, facet):
            continue
        if xf is None:
            if p["x"] not in cats:
                continue
            xv = float(cats.index(p["x"]))
        else:
            xv = float(p["x"]) * xf
        colour = styler.colour(p["hue"]) if styler and p.get("hue") is not None and hue else "#333333"
        label = None if p["label"] in seen else f"measured: {p['label']}"
        seen.add(p["label"])
        lo, hi, v = m["lo"] * yf, m["hi"] * yf, m["value"] * yf
        marker = measured_marker(sweep.manifest, p["label"])
        drawn = ax.errorbar([xv], [v], yerr=[[v - lo], [hi - v]] if hi > lo else None, fmt=marker,
                            markersize=10 if marker == "*" else 8, markerfacecolor="white", markeredgecolor=colour,
                            markeredgewidth=1.4, ecolor=colour, capsize=3, linestyle="none", label=label, zorder=5)
        drawn.lines[0].set_gid(MEASURED_GID)


def label_log_axes(fig) -> None:
    """Every axis drawn on a log scale says so in its label: "decode (tok/s, log scale)"."""
    for ax in fig.axes:
        for axis, scale, get, put in (("x", ax.get_xscale(), ax.get_xlabel, ax.set_xlabel),
                                      ("y", ax.get_yscale(), ax.get_ylabel, ax.set_ylabel)):
            text = get()
            if scale != "log" or LOG_NOTE in text:
                continue
            if text.endswith(")"):
                put(f"{text[:-1]}, {LOG_NOTE})")
            else:
                put(f"{text} ({LOG_NOTE})".strip() if text else f"{axis} ({LOG_NOTE})")


def caption(fig, sweep: Sweep) -> str:
    """The footnote's text: what was swept, and only the bands and measured markers the figure's panels draw."""
    m = sweep.manifest
    runs = m.get("runs_done", len(sweep.frame))
    draws = f", {m['uncertainty']} parameter draws per point" if m.get("uncertainty") else ""
    seeds = f", {m['seeds']} seeds per point" if m.get("seeds", 1) > 1 else ""
    bands = any(c.get_gid() == BAND_GID for ax in fig.axes for c in ax.collections)
    markers = list(dict.fromkeys(ln.get_marker() for ax in fig.axes for ln in ax.lines
                                 if ln.get_gid() == MEASURED_GID))
    text = f"sim sweep {m.get('sweep_file') or m.get('scenario')}: {runs} runs{draws}{seeds}"
    if bands:
        text += "; bands: 90% of the runs"
    if not m.get("complete", True):
        text += "; INCOMPLETE sweep"
    if markers:
        names = [MARKER_NAMES.get(str(k), "markers") for k in markers]
        text += f"; {' and '.join(names) if len(names) < 3 else ', '.join(names)}: measured"
    return text


def footnote(fig, sweep: Sweep) -> None:
    """Label log axes as such and write the caption; called once everything is drawn."""
    label_log_axes(fig)
    fig.text(0.0, 1.0, caption(fig, sweep), fontsize=7, color="#555555", ha="left", va="bottom",
             transform=fig.transFigure)
