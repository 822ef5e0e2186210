"""``sim plot``: any column against any other, and the standard figures of the shipped sweeps."""

from __future__ import annotations

import re

import numpy as np

from sim.core.errors import ScenarioError
from sim.viz.plotting import (
    MEASURED_GID,
    PALETTE,
    Styler,
    Sweep,
    axis_meta,
    figure_style,
    footnote,
    label_text,
    line_panel,
    measured_marker,
    setup,
)


def _styler(sweep: Sweep, hue: str | None) -> Styler | None:
    return Styler(list(sweep.frame[hue])) if hue else None


def _legend(fig, axes) -> None:
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(labels)),
                   frameon=False)


def _panels(figures, n: int, width: float = 4.2, height: float = 3.3):
    fig, axes = figures.subplots(1, n, figsize=(width * n, height), squeeze=False)
    return fig, list(axes[0])


def generic(sweep: Sweep, x: str, y: list[str], hue: str | None, facet: str | None):
    """One panel per y metric (or per facet value with one y), median line per hue value, bands, measured points."""
    figures = setup()
    for c, what in [(x, "--x"), (hue, "--hue"), (facet, "--facet")]:
        if c:
            sweep.column(c, what)
    for m in y:
        sweep.column(m, "--y", numeric=True)
    sweep.column(x, "--x", numeric=x not in sweep.axes)
    sweep.check_drawn({x, hue, facet} - {None}, x)
    styler = _styler(sweep, hue)
    if facet:
        values = list(dict.fromkeys(sweep.frame[facet]))
        fig, axes = _panels(figures, len(values) * len(y))
        i = 0
        for metric in y:
            for v in values:
                sub = sweep.frame[sweep.frame[facet].astype(str) == str(v)]
                line_panel(axes[i], sweep, x=x, y=metric, hue=hue, styler=styler, frame=sub, facet=(facet, v))
                axes[i].set_title(f"{axis_meta(facet, sweep.manifest)[0]} {v}")
                i += 1
        _share_y(axes, len(values))
    else:
        fig, axes = _panels(figures, len(y))
        for ax, metric in zip(axes, y, strict=True):
            line_panel(ax, sweep, x=x, y=metric, hue=hue, styler=styler)
    _legend(fig, axes)
    footnote(fig, sweep)
    return fig


def _share_y(axes, per_row: int) -> None:
    for start in range(0, len(axes), per_row):
        row = axes[start:start + per_row]
        lo = min(a.get_ylim()[0] for a in row)
        hi = max(a.get_ylim()[1] for a in row)
        for a in row:
            a.set_ylim(lo, hi)


def _need(sweep: Sweep, preset: str, role: str, name: str | None) -> str:
    if not name:
        raise ScenarioError(sweep.folder, f"--preset {preset}", f"a column for {role}: give --{role} "
                            f"(axes: {', '.join(sweep.axes)})")
    return sweep.column(name, f"--{role}")


def _metric_panels(sweep: Sweep, x: str, hue: str | None, panels: list[tuple[str, str]], hue_label=None):
    """One panel per (metric, title), lines per hue value: the figure, its panels."""
    figures = setup()
    sweep.check_drawn({x, hue} - {None}, x)
    styler = _styler(sweep, hue)
    fig, axes = _panels(figures, len(panels))
    for ax, (metric, title) in zip(axes, panels, strict=True):
        line_panel(ax, sweep, x=sweep.column(x, "--x"), y=sweep.column(metric, "y"), hue=hue, styler=styler,
                   hue_label=hue_label)
        ax.set_title(title)
    return fig, axes


def _finish(fig, axes, sweep: Sweep):
    _legend(fig, axes)
    footnote(fig, sweep)
    return fig


def cliff(sweep: Sweep, x: str | None, hue: str | None, facet: str | None):
    """Decode, hit rate and PCIe spill against free VRAM, one line per PCIe generation."""
    x, hue = _need(sweep, "cliff", "x", x), _need(sweep, "cliff", "hue", hue)
    fig, axes = _metric_panels(sweep, x, hue, [("decode_tok_s", "decode rate: the spill cliff and plateau"),
                                               ("expert_hit_rate", "where the expert lookups hit"),
                                               ("pcie_spill_share", "routed experts read over PCIe")],
                               "Gen" if "gen" in hue.lower() else None)
    axes[0].set_ylim(bottom=0)
    return _finish(fig, axes, sweep)


def hit_coverage(sweep: Sweep, x: str | None, hue: str | None, facet: str | None):
    """Hit rate and decode against cache coverage, one line per cache policy."""
    x, hue = x or "expert_coverage", _need(sweep, "hit_coverage", "hue", hue)
    fig, axes = _metric_panels(sweep, x, hue, [("expert_hit_rate", "hit rate against the share of experts cached"),
                                               ("decode_tok_s", "decode rate")], "")
    if x == "expert_coverage":
        axes[0].plot([0, 100], [0, 100], color="#999999", linewidth=0.8, linestyle=":", label="uniform popularity")
    return _finish(fig, axes, sweep)


def concurrency(sweep: Sweep, x: str | None, hue: str | None, facet: str | None):
    """Aggregate throughput and TTFT against concurrent clients, one line per decode-slot count."""
    x = _need(sweep, "concurrency", "x", x)
    fig, axes = _metric_panels(sweep, x, hue, [("throughput_tok_s", "throughput stays flat"),
                                               ("ttft_mean_s", "time to first token grows linearly"),
                                               ("ttft_p99_s", "the slowest 1%")])
    axes[0].set_ylim(bottom=0)
    return _finish(fig, axes, sweep)


def headroom(sweep: Sweep, x: str | None, hue: str | None, facet: str | None):
    """Decode (log scale) and the peer's free VRAM against the reserve left on it: the headroom cliff."""
    figures = setup()
    x = _need(sweep, "headroom", "x", x)
    sweep.check_drawn({x, hue} - {None}, x)
    styler = _styler(sweep, hue)
    free = [c for c in sweep.frame.columns if re.fullmatch(r"vram\.(.+)\.free_mib", c) and c != "vram.gpu0.free_mib"]
    fig, axes = _panels(figures, 1 + len(free[:1]))
    line_panel(axes[0], sweep, x=x, y=sweep.column("decode_tok_s", "y"), hue=hue, styler=styler)
    axes[0].set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    axes[0].set_title("decode: the headroom cliff")
    if free:
        line_panel(axes[1], sweep, x=x, y=free[0], hue=hue, styler=styler)
        axes[1].axhline(0, color="#D55E00", linewidth=1, linestyle="--", label="oversubscribed below: the driver pages")
        axes[1].set_title("VRAM left free on the peer once the encoder runs")
    _legend(fig, axes)
    footnote(fig, sweep)
    return fig


def _estimate_columns(sweep: Sweep) -> dict[str, str]:
    cols = {}
    for c in sweep.frame.columns:
        m = re.fullmatch(r"job\.(.+)\.estimate_s\.(.+)", c)
        if m:
            cols[m.group(2)] = c
    return cols


def _crossing(xs: np.ndarray, diff: np.ndarray) -> float | None:
    """First x where diff changes sign, by linear interpolation (estimates are linear in tokens between points)."""
    for i in range(1, len(xs)):
        if np.sign(diff[i - 1]) != np.sign(diff[i]) and diff[i - 1] != 0:
            return float(xs[i - 1] + (xs[i] - xs[i - 1]) * diff[i - 1] / (diff[i - 1] - diff[i]))
    return None


def dispatch(sweep: Sweep, x: str | None, hue: str | None, facet: str | None):
    """Each machine's estimated completion against job length, the break-even marked (with its 90% interval over
    the parameter draws), and the relative gap with the dispatcher's tie band."""
    figures = setup()
    x = _need(sweep, "dispatch", "x", x)
    sweep.check_drawn({x}, x)
    cols = _estimate_columns(sweep)
    if len(cols) < 2:
        raise ScenarioError(sweep.folder, "--preset dispatch", "estimates of one job on at least two machines "
                            "(columns job.ID.estimate_s.MACHINE)")
    machines = list(cols)[:2]
    frame = sweep.frame
    fig, axes = _panels(figures, 2, width=5.0)
    styler = Styler(machines)
    long = []
    for mname in machines:
        part = frame[[x, "point", *(c for c in ("draw", "seed") if c in frame.columns)]].copy()
        part["machine"] = mname
        part["estimate"] = frame[cols[mname]]
        long.append(part)
    import pandas as pd

    stacked = pd.concat(long, ignore_index=True)
    tmp = Sweep(sweep.folder, stacked, sweep.manifest)
    line_panel(axes[0], tmp, x=x, y="estimate", hue="machine", styler=styler, overlay=False, hue_label="")
    axes[0].set_ylabel(label_text(("estimated completion: wait + load + decode", "s", 1)))
    a, b = machines
    runs = frame.groupby([c for c in ("seed", "draw") if c in frame.columns], sort=False)
    crossings = []
    for _, sub in runs:
        sub = sub.sort_values(x)
        c = _crossing(sub[x].to_numpy(dtype=float), (sub[cols[a]] - sub[cols[b]]).to_numpy(dtype=float))
        crossings.append(np.inf if c is None else c)
    med = frame.groupby(x, sort=True)[[cols[a], cols[b]]].median()
    be = _crossing(med.index.to_numpy(dtype=float), (med[cols[a]] - med[cols[b]]).to_numpy(dtype=float))
    rel = frame[[x]].copy()
    rel["gap"] = 100 * (frame[cols[a]] - frame[cols[b]]) / np.minimum(frame[cols[a]], frame[cols[b]])
    rel["point"] = frame["point"]
    tmp2 = Sweep(sweep.folder, rel, sweep.manifest)
    line_panel(axes[1], tmp2, x=x, y="gap", hue=None, styler=None, overlay=False)
    axes[1].set_ylabel(label_text((f"({a} - {b}) / faster estimate", "%", 100)))
    tie = sweep.manifest.get("facts", {}).get("tie_threshold")
    if tie:
        axes[1].axhspan(-tie * 100, tie * 100, color="#999999", alpha=0.2, linewidth=0,
                        label=f"tie: within {tie:.0%}, the tie-break decides")
    axes[1].axhline(0, color="#000000", linewidth=0.8)
    for ax in axes:
        if be is not None:
            ax.axvline(be, color="#D55E00", linewidth=1.2, linestyle="--",
                       label=f"break-even {be:,.0f} tokens (median estimates)")
    finite = [c for c in crossings if np.isfinite(c)]
    if len(crossings) > 1 and finite:
        lo = float(np.percentile(crossings, 5, method="inverted_cdf"))
        hi = float(np.percentile(crossings, 95, method="inverted_cdf"))
        right = float(frame[x].max())
        never = f", never in {1 - len(finite) / len(crossings):.0%}" if len(finite) < len(crossings) else ""
        axes[1].hlines(0, lo, min(hi, right), color="#D55E00", linewidth=7, alpha=0.35,
                       label=f"where 90% of draws break even: {lo:,.0f} to "
                       + (f"{hi:,.0f}" if np.isfinite(hi) else "never") + never)
    axes[0].set_title("which machine finishes the job first")
    axes[1].set_title("how far apart the estimates are")
    _legend(fig, axes)
    footnote(fig, sweep)
    return fig


def load_breakdown(sweep: Sweep, x: str | None, hue: str | None, facet: str | None):
    """Cold and hot load time per machine, stacked by stage (disk, loader, PCIe link), with the measured cold and
    hot load times of the same bytes where the project has them."""
    figures = setup()
    frame = sweep.frame
    machines = list(dict.fromkeys(m.group(1) for c in frame.columns
                                  if (m := re.fullmatch(r"load\.(.+)\.cold\.disk_s", c))))
    if not machines:
        raise ScenarioError(sweep.folder, "--preset load_breakdown", "load metrics (load.MACHINE.cold.disk_s): a "
                            "scenario whose machines load a model")
    first = frame[frame["point"] == frame["point"].min()]
    fig, axes = _panels(figures, 1, width=6.5, height=3.6)
    ax = axes[0]
    drawn: set[str] = set()
    stages = [("disk", "disk -> page cache", "//"), ("loader", "loader (host CPU)", ".."), ("link", "PCIe link", "xx")]
    order = (sweep.manifest.get("facts") or {}).get("machines") or []
    machines.sort(key=lambda m: order.index(m) if m in order else len(order))
    pos, labels, centres = [], [], []
    for i, mname in enumerate(machines):
        centres.append(i * 2.6 + 0.5)
        for j, phase in enumerate(("cold", "hot")):
            xpos = i * 2.6 + j
            bottom = 0.0
            for k, (stage, name, hatch) in enumerate(stages):
                v = float(np.median(first[f"load.{mname}.{phase}.{stage}_s"]))
                ax.bar(xpos, v, bottom=bottom, width=0.85, color=PALETTE[k], hatch=hatch, edgecolor="white",
                       linewidth=0.5, label=name if i == 0 and j == 0 else None)
                bottom += v
            pos.append(xpos)
            labels.append(phase)
            for p in sweep.manifest.get("measured", []):
                rate = p["metrics"].get(f"{phase}_gbps")
                if p["x"] == mname and rate:
                    gb = float(np.median(first[f"load.{mname}.gb"]))
                    marker = measured_marker(sweep.manifest, p["label"])
                    ax.plot([xpos], [gb / rate["value"]], marker=marker, markersize=11 if marker == "*" else 8,
                            markerfacecolor="white", markeredgecolor="#000000", markeredgewidth=1.2,
                            linestyle="none", gid=MEASURED_GID, zorder=5,
                            label=f"measured: {p['label']} (same bytes at the measured GB/s)"
                            if p["label"] not in drawn else None)
                    drawn.add(p["label"])
    ax.set_xticks(pos, labels)
    for c, mname in zip(centres, machines, strict=True):
        ax.text(c, -0.12, mname, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=9)
    gb = float(np.median(first[f"load.{machines[0]}.gb"]))
    ax.set_ylabel(label_text((f"time to load {gb:.1f} GB", "s", 1)))
    ax.set_title("where load time goes (cold: page cache dropped; hot: file cached)")
    _legend(fig, axes)
    footnote(fig, sweep)
    return fig


PRESETS = {"cliff": cliff, "hit_coverage": hit_coverage, "concurrency": concurrency, "headroom": headroom,
           "dispatch": dispatch, "load_breakdown": load_breakdown}


def draw(sweep: Sweep, preset: str | None, x: str | None, y: list[str], hue: str | None, facet: str | None):
    """The figure `sim plot` writes: a preset (the sweep file's by default) or --x/--y, made in the style of
    :func:`sim.viz.plotting.figure_style` (and saved in it by :func:`sim.viz.plotting.save`)."""
    with figure_style():
        return _draw(sweep, preset, x, y, hue, facet)


def _draw(sweep: Sweep, preset: str | None, x: str | None, y: list[str], hue: str | None, facet: str | None):
    declared = sweep.manifest.get("plot") or {}
    if preset is None and not y:
        preset = declared.get("preset")
        if preset is None:
            raise ScenarioError(sweep.folder, "--y", f"a metric to plot (or --preset {'|'.join(PRESETS)})")
    if preset is not None:
        if preset not in PRESETS:
            raise ScenarioError("--preset", preset, f"one of {', '.join(PRESETS)}")
        if y or facet:
            raise ScenarioError("--preset", preset, "draws its own metrics in its own panels: give --y and --facet "
                                "without --preset")
        same = declared.get("preset") == preset
        x = x or (declared.get("x") if same else None)
        hue = hue or (declared.get("hue") if same else None)
        return PRESETS[preset](sweep, x, hue, facet)
    x = x or declared.get("x") or (sweep.axes[0] if sweep.axes else None)
    if x is None:
        raise ScenarioError(sweep.folder, "--x", "a column for the x axis")
    return generic(sweep, x, y, hue, facet)

