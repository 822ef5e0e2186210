"""What the figures draw, read from the matplotlib objects of sweeps built in memory: one marker per measured series,
lines that coincide both visible, log axes that say so, captions that describe only what was drawn, and parity plots
with one panel per unit and the tolerance as a band."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from sim.calibration.files import parity_figure, plot_residuals, residual_unit
from sim.calibration.result import CalibrationResult
from sim.viz import presets
from sim.viz.plotting import Sweep, label_log_axes, save, setup

STAR_LIKE = {"*", "P", "X", "h", "d", "p", "8"}  # white-filled markers a measured point may take


def axis(name: str, values: list, label: str, unit: str | None = None) -> dict:
    return {"name": name, "values": values, "label": label, "unit": unit}


def measured(label: str, x, metrics: dict, x_column: str | None = None, hue_column: str | None = None,
             hue=None) -> dict:
    """A measured point as sweep.json holds it (a single value: lo = hi = value)."""
    return {"label": label, "source": "t.csv", "x_column": x_column, "hue_column": hue_column, "hue": hue, "x": x,
            "metrics": {k: {"value": v, "lo": v, "hi": v} for k, v in metrics.items()}}


def sweep(rows: list[dict], axes: list[dict], points: list[dict] = (), **manifest) -> Sweep:
    """A sweep table with one ``point`` per distinct combination of axis values."""
    frame = pd.DataFrame(rows)
    names = [a["name"] for a in axes]
    frame["point"] = frame.groupby(names, sort=False).ngroup()
    if "seed" not in frame.columns:
        frame["seed"] = 0
    return Sweep("mem", frame, {"axes": axes, "measured": list(points), "sweep_file": "mem.yaml",
                                "runs_done": len(frame), "complete": True, **manifest})


def legend_entries(fig) -> dict[str, str | None]:
    """Label -> marker of every entry of the figure's legends (the marker of the artist each entry stands for)."""
    shown = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    out: dict[str, str | None] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            artist = handle[0] if isinstance(handle, tuple) else handle  # an errorbar: its data line first
            if label in shown and label not in out:
                out[label] = artist.get_marker() if hasattr(artist, "get_marker") else None
    return out


def caption_of(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts)


def measured_markers_drawn(fig) -> list[str]:
    return [ln.get_marker() for ax in fig.axes for ln in ax.lines
            if ln.get_marker() in STAR_LIKE and ln.get_markerfacecolor() in ("white", "w", (1, 1, 1, 1))]


def bands_drawn(fig) -> bool:
    return any(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)


def cliff_sweep() -> Sweep:
    rows = []
    for gen, (i, free) in itertools.product((3, 5), enumerate((4, 8, 12, 16))):
        rows.append({"pcie_gen": gen, "free_vram": free, "decode_tok_s": [60, 120, 150, 190][i] * (1.6 if gen == 5 and
                     i == 0 else 1.0), "expert_hit_rate": [0.77, 0.86, 0.9, 0.93][i],
                     "pcie_spill_share": [0.08, 0.005, 0.0, 0.0][i]})
    axes = [axis("pcie_gen", [3, 5], "PCIe generation (x16)"), axis("free_vram", [4, 8, 12, 16], "free VRAM", "GiB")]
    points = [measured("round 1", 8.31, {"decode_tok_s": 140.6, "expert_hit_rate": 0.865}, "free_vram", "pcie_gen", 3),
              measured("round 2", 14.0, {"decode_tok_s": 170.0}, "free_vram", "pcie_gen", 3)]
    return sweep(rows, axes, points)


def load_sweep(draws: int = 3) -> Sweep:
    rows = []
    for tokens, draw in itertools.product((0, 10000), range(draws)):
        row = {"tokens": tokens, "draw": draw}
        for k, m in enumerate(("box_a", "box_b")):
            row[f"load.{m}.gb"] = 20.0
            for phase, stage in itertools.product(("cold", "hot"), ("disk", "loader", "link")):
                row[f"load.{m}.{phase}.{stage}_s"] = (1.0 + k) * (2.0 if phase == "cold" else 1.0) + 0.01 * draw
            row[f"job.job.estimate_s.{m}"] = (30 - 20 * k) + tokens * (0.006 + 0.002 * k) * (1 + 0.05 * draw)
        rows.append(row)
    points = [measured("real loader", "box_a", {"cold_gbps": 2.0, "hot_gbps": 5.0}, "tokens"),
              measured("one sample", "box_b", {"cold_gbps": 1.0, "hot_gbps": 2.5}, "tokens")]
    return sweep(rows, [axis("tokens", [0, 10000], "job length", "generated tokens")], points, uncertainty=draws,
                 facts={"tie_threshold": 0.1, "machines": ["box_a", "box_b"]})


# 1. two measured series never share a marker, and each legend entry names its series


@pytest.mark.parametrize("preset, make", [("cliff", cliff_sweep), ("load_breakdown", load_sweep)])
def test_each_measured_series_has_its_own_marker(preset, make):
    s = make()
    fig = presets.draw(s, preset, "free_vram" if preset == "cliff" else None, [],
                       "pcie_gen" if preset == "cliff" else None, None)
    entries = {label: marker for label, marker in legend_entries(fig).items() if label.startswith("measured")}
    labels = list(dict.fromkeys(p["label"] for p in s.manifest["measured"]))
    assert len(entries) == len(labels) == 2
    for label in labels:  # the entry says which series it is
        assert sum(label in text for text in entries) == 1
    assert len(set(entries.values())) == 2, entries
    assert len(set(measured_markers_drawn(fig))) == 2


# 2. lines that coincide stay visible: the later on top, thinner, other dashes, smaller markers


def test_coinciding_lines_both_stay_visible():
    rows = []
    for policy, (i, free) in itertools.product(("static", "lru", "lfu"), enumerate((4, 8, 14, 20))):
        cov = [0.1, 0.22, 0.41, 0.6][i]
        hit = [0.77, 0.86, 0.92, 0.95][i] - (0.08 if policy == "lru" else 0.0)  # lfu == static
        rows.append({"policy": policy, "free_vram": free, "expert_coverage": cov, "expert_hit_rate": hit,
                     "decode_tok_s": 300 * hit})
    s = sweep(rows, [axis("policy", ["static", "lru", "lfu"], "cache policy"),
                     axis("free_vram", [4, 8, 14, 20], "free VRAM", "GiB")])
    fig = presets.draw(s, "hit_coverage", None, [], "policy", None)
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.lines}
        static, lfu, lru = lines["static"], lines["lfu"], lines["lru"]
        np.testing.assert_allclose(static.get_ydata(), lfu.get_ydata())  # the data are not moved
        assert lfu.get_zorder() > static.get_zorder()  # the later line is drawn on top ...
        assert lfu.get_linewidth() <= 0.5 * static.get_linewidth()  # ... thin enough to show the other on both sides
        assert lfu.get_linestyle() != static.get_linestyle() and lfu.get_marker() != static.get_marker()
        assert lfu.get_markersize() < static.get_markersize()
        assert lru.get_linewidth() > 1.5  # a line that covers nothing keeps its width


# 3. a log axis says so


def test_log_axes_are_labelled_as_log():
    rows = [{"reserve_mib": r, "decode_tok_s": 35.0 if r < 1000 else 350.0, "vram.gpu1.free_mib": r - 1000.0}
            for r in (0, 500, 1000, 1500, 2000)]
    s = sweep(rows, [axis("reserve_mib", [0, 500, 1000, 1500, 2000], "VRAM reserve on the peer", "MiB")])
    fig = presets.draw(s, "headroom", "reserve_mib", [], None, None)
    for ax in fig.axes:
        for scale, label in ((ax.get_xscale(), ax.get_xlabel()), (ax.get_yscale(), ax.get_ylabel())):
            assert (scale == "log") == ("log scale" in label), (scale, label)
    assert fig.axes[0].get_yscale() == "log" and fig.axes[0].get_ylabel() == "decode (tok/s, log scale)"
    plt = setup()
    fig2, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlabel("job length")
    label_log_axes(fig2)
    label_log_axes(fig2)  # once only
    assert ax.get_xlabel() == "job length (log scale)" and ax.get_ylabel() == ""
    plt.close(fig2)


# 4. the caption promises only what is drawn


@pytest.mark.parametrize("preset", ["dispatch", "load_breakdown"])
def test_caption_describes_only_what_is_drawn(preset):
    s = load_sweep()
    fig = presets.draw(s, preset, "tokens" if preset == "dispatch" else None, [], None, None)
    text = caption_of(fig)
    assert ("band" in text) == bands_drawn(fig), text
    drawn = measured_markers_drawn(fig)
    assert ("star" in text) == ("*" in drawn) and ("plus" in text) == ("P" in drawn), text
    assert ("measured" in text) == bool(drawn), text
    if preset == "dispatch":  # the draws give bands; the load rates have no place on this figure
        assert bands_drawn(fig) and not drawn
    else:  # bars of medians, two measured series
        assert not bands_drawn(fig) and len(set(drawn)) == 2


def test_the_dispatch_break_even_band_is_drawn_where_its_legend_says():
    fig = presets.draw(load_sweep(draws=6), "dispatch", "tokens", [], None, None)
    labels = legend_entries(fig)
    promised = [lab for lab in labels if lab.startswith("where 90% of draws break even")]
    drawn = [c for c in fig.axes[1].collections if isinstance(c, LineCollection) and c.get_label() in promised]
    assert len(promised) == len(drawn)


# 5. parity plots: one panel per unit, y = x, the tolerance as a band


def row(target: str, measured_value: float, simulated: float, tolerance: float, kind: str = "rate",
        role: str = "fit") -> dict:
    return {"target": target, "role": role, "measured": measured_value, "simulated": simulated, "error": 0.0,
            "tolerance": tolerance, "kind": kind}


ROWS = [row("t.csv round1_decode_tok_s", 140.6, 134.4, 0.07), row("t.csv round1_prefill_tok_s", 8000, 8600, 0.3),
        row("b.csv pcie_spill 0-0.5", 141.4, 144.3, 0.15), row("x.log:5 ttft_s", 2.2, 1.9, 0.3, role="check"),
        row("t.csv round1_slots", 5784, 5785, 0.01, role="check"), row("t.csv round2_slots", 19530, 19523, 0.01),
        row("x.log:5 expert_hit_rate", 0.99, 0.98, 0.01, kind="share"),
        row("t.csv round1_coverage", 0.235, 0.2354, 0.005, kind="share", role="check"),
        row("x.log:5 pcie_share", 0.05, 0.048, 0.3)]


def test_residual_units_come_from_the_quantity():
    assert [residual_unit(r) for r in ROWS] == ["tok/s", "tok/s", "tok/s", "s", "slots", "slots", "%", "%", "%"]


def test_parity_plot_has_one_panel_per_unit_with_a_tolerance_band():
    fig = parity_figure(CalibrationResult({}, {}, [], ROWS))
    titles = [ax.get_title() for ax in fig.axes]
    # tok/s, s, slots, shares (points) and a rate-kind fraction (relative tolerance): five panels, no mixed units
    assert len(fig.axes) == 5, titles
    units = {ax.get_xlabel() for ax in fig.axes}
    assert len(units) == len(fig.axes) - 1  # the two percent panels differ in how their tolerance is measured
    for ax in fig.axes:
        assert ax.get_xlabel().startswith("measured (") and ax.get_ylabel().startswith("simulated (")
        assert (ax.get_xscale() == "log") == ("log scale" in ax.get_xlabel())
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == 1, ax.get_title()
        identity = [ln for ln in ax.lines if list(ln.get_xdata()) == list(ln.get_ydata())]
        assert identity, "the y = x line"
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith("tolerance") for t in legend)
        # the band is the tolerance: at the panel's right edge it spans x(1 - tol) .. x(1 + tol) (rates)
        verts = bands[0].get_paths()[0].vertices
        assert verts[:, 1].min() < verts[:, 0].min() or verts[:, 1].max() > verts[:, 0].max()
    rates = next(ax for ax in fig.axes if ax.get_xlabel().startswith("measured (tok/s"))
    legend = " ".join(t.get_text() for t in rates.get_legend().get_texts())
    assert "widest" in legend and "±30%" in legend and "±7%" in legend  # tolerances differ: said, and per-cell bars
    assert any(isinstance(c, LineCollection) and len(c.get_segments()) == 3 for c in rates.collections)
    xs = np.concatenate([c.get_offsets()[:, 0] for c in rates.collections if c.get_offsets().size
                         and not isinstance(c, (PolyCollection, LineCollection))])
    assert sorted(xs) == sorted([140.6, 8000, 141.4])  # the rates panel holds the rates only
    slots = next(ax for ax in fig.axes if ax.get_xlabel().startswith("measured (slots"))
    assert "widest" not in " ".join(t.get_text() for t in slots.get_legend().get_texts())
    verts = next(c for c in slots.collections if isinstance(c, PolyCollection)).get_paths()[0].vertices
    right = verts[:, 0].max()
    assert math.isclose(verts[verts[:, 0] == right][:, 1].max(), right * 1.01, rel_tol=1e-9)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_parity_plot_and_figures_are_the_same_bytes(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    for f in (a, b):
        plot_residuals(CalibrationResult({}, {}, [], ROWS), str(f))
    assert a.read_bytes() == b.read_bytes()
    for f in (a, b):
        save(presets.draw(cliff_sweep(), "cliff", "free_vram", [], "pcie_gen", None), str(f))
    assert a.read_bytes() == b.read_bytes()


def test_a_panel_of_close_values_is_wide_enough_to_show_its_band():
    fig = parity_figure(CalibrationResult({}, {}, [], [row("t.csv power_ratio_round2_over_round1", 1.47, 1.4699913,
                                                           0.02)]))
    (ax,) = fig.axes
    lo, hi = ax.get_xlim()
    assert lo <= 1.47 * 0.98 and hi >= 1.47 * 1.02 and ax.get_ylim() == (lo, hi)
    assert "ratio" in ax.get_xlabel()
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_drawing_changes_nothing_of_the_processs_matplotlib(tmp_path):
    """A notebook that draws its own figures keeps its backend, its rcParams and its open figures: sim's figures
    are made outside pyplot, in a style context (sim.viz.plotting.figure_style)."""
    import matplotlib

    before = dict(matplotlib.rcParams)
    backend = matplotlib.rcParams._get_backend_or_none()  # without resolving one (that would itself change state)
    save(presets.draw(cliff_sweep(), "cliff", "free_vram", [], "pcie_gen", None), str(tmp_path / "f.svg"))
    plot_residuals(CalibrationResult({}, {}, [], ROWS), str(tmp_path / "p.png"))
    assert dict(matplotlib.rcParams) == before and matplotlib.rcParams._get_backend_or_none() == backend
    assert "matplotlib.pyplot" not in sys.modules or not sys.modules["matplotlib.pyplot"].get_fignums()
