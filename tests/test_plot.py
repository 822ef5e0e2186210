"""`sim plot`: every preset draws from a sweep, figures are the same bytes for the same data, bad columns are one
line, and the dispatch figure's break-even is the closed form."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

import sim
from sim.cli import main
from sim.sweeps.run import run_sweep
from sim.sweeps.spec import build_plan

SWEEPS = os.path.join(ROOT, "scenarios", "sweeps")
FAST = ["serve.requests=12", "serve.output_tokens_min=20", "serve.output_tokens_max=40"]
SMALL = {  # each shipped sweep at a few points, with few requests
    "gen3_5090_pcie_vram.yaml": (["free_vram=6,24", "pcie_gen=3,5"], FAST),
    "concurrency_slots.yaml": (["clients=1,4", "slots=1,2"], ["serve.requests=40"]),
    "home_lab_job_length.yaml": (["tokens=0..40000:10000"], []),
    "basalt_peer_reserve.yaml": (["reserve_mib=600,1536"], ["serve.requests=6"]),
    "cache_policy_coverage.yaml": (["free_vram=4,20", "policy=static,lru"], FAST),
}


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    out = {}
    for name, (axes, sets) in SMALL.items():
        folder = str(tmp_path_factory.mktemp(name.split(".")[0]))
        unc = 4 if name.startswith("home_lab") else None
        run_sweep(build_plan(os.path.join(SWEEPS, name), axes, zip_axes=False, seeds=None, uncertainty=unc,
                             cli_sets=sets), folder, 0, quiet=True)
        out[name] = folder
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_each_shipped_sweep_draws_its_figure_deterministically(sweeps, tmp_path, name):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    # the home lab's measured points are load rates: its load-time figure draws them
    extra = ["--preset", "load_breakdown"] if name.startswith("home_lab") else []
    for f in (a, b):
        r = invoke("plot", sweeps[name], *extra, "-o", str(f))
        assert r.exit_code == 0, r.output
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    labels = {p["label"] for p in json.load(open(os.path.join(sweeps[name], "sweep.json")))["measured"]}
    assert any(f"measured: {label}" in text for label in labels) and "<dc:date>" not in text
    png = tmp_path / "f.png"
    assert invoke("plot", sweeps[name], "-o", str(png)).exit_code == 0 and png.stat().st_size > 10_000


def test_load_breakdown_and_generic_plots(sweeps, tmp_path):
    folder = sweeps["home_lab_job_length.yaml"]
    assert invoke("plot", folder, "--preset", "load_breakdown", "-o", str(tmp_path / "l.pdf")).exit_code == 0
    r = invoke("plot", sweeps["cache_policy_coverage.yaml"], "--x", "free_vram", "--y", "decode_tok_s", "--y",
               "expert_hit_rate", "--hue", "policy", "-o", str(tmp_path / "g.svg"))
    assert r.exit_code == 0
    r = invoke("plot", sweeps["concurrency_slots.yaml"], "--x", "clients", "--y", "ttft_mean_s", "--facet", "slots",
               "-o", str(tmp_path / "f.svg"))
    assert r.exit_code == 0


@pytest.mark.parametrize("args, words", [
    (["--y", "decod_tok_s"], "no column 'decod_tok_s'"),
    (["--preset", "pie"], "one of cliff"),
    (["--x", "nope", "--y", "decode_tok_s"], "no column 'nope'"),
])
def test_bad_columns_are_one_line_exit_2(sweeps, tmp_path, args, words):
    r = invoke("plot", sweeps["gen3_5090_pcie_vram.yaml"], *args, "-o", str(tmp_path / "x.png"))
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_output_and_folder_are_one_line(sweeps, tmp_path):
    r = invoke("plot", sweeps["gen3_5090_pcie_vram.yaml"], "-o", str(tmp_path / "x.jpg"))
    assert r.exit_code == 2 and ".png" in r.stderr
    r = invoke("plot", str(tmp_path), "-o", str(tmp_path / "x.png"))
    assert r.exit_code == 2 and "no sweep.json" in r.stderr


def test_dispatch_break_even_is_the_closed_form(sweeps):
    """Estimates are linear in tokens, so where the two lines cross between sweep points is the break-even."""
    import pandas as pd

    from sim.lab.breakeven import breakeven
    from sim.viz.presets import _crossing

    frame = pd.read_parquet(os.path.join(sweeps["home_lab_job_length.yaml"], "results.parquet"))
    sub = frame[frame["draw"] == 0].sort_values("tokens")
    diff = (sub["job.job.estimate_s.mining_box"] - sub["job.job.estimate_s.rtx4090_box"]).to_numpy()
    cross = _crossing(sub["tokens"].to_numpy(dtype=float), diff)
    params = {c[len("param."):]: sub[c].iloc[0] for c in sub.columns if c.startswith("param.")}
    sets = [f"{k}={float(v)!r}" for k, v in params.items()]
    scn = sim.load(os.path.join(ROOT, "scenarios", "home_lab.yaml"), sets).config
    closed = breakeven(scn, "9B", "mining_box", "rtx4090_box", 0)["closed_form"]["breakeven_tokens"]
    assert cross == pytest.approx(closed, abs=1.0)


def test_an_incomplete_sweep_says_so(tmp_path):
    def stop(saved):
        if saved >= 2:
            raise KeyboardInterrupt

    run_sweep(build_plan(os.path.join(SWEEPS, "home_lab_job_length.yaml"), ["tokens=0..40000:10000"], zip_axes=False,
                         seeds=None, uncertainty=None, cli_sets=[]), str(tmp_path), 0, quiet=True, on_saved=stop)
    assert invoke("plot", str(tmp_path), "-o", str(tmp_path / "f.svg")).exit_code == 0
    assert "INCOMPLETE" in (tmp_path / "f.svg").read_text()


@pytest.mark.slow
def test_another_process_draws_the_same_bytes(sweeps, tmp_path):
    folder = sweeps["concurrency_slots.yaml"]
    here = tmp_path / "here.svg"
    assert invoke("plot", folder, "-o", str(here)).exit_code == 0
    there = tmp_path / "there.svg"
    subprocess.run([sys.executable, "-m", "sim", "plot", folder, "-o", str(there)], cwd=ROOT, check=True,
                   capture_output=True)
    assert here.read_bytes() == there.read_bytes()


def test_an_axis_not_drawn_is_not_pooled_into_a_band(sweeps, tmp_path):
    folder = sweeps["cache_policy_coverage.yaml"]
    r = invoke("plot", folder, "--x", "free_vram", "--y", "decode_tok_s", "-o", str(tmp_path / "x.png"))
    assert r.exit_code == 2 and "axis 'policy' takes 2 values but is not drawn" in r.stderr
    r = invoke("plot", folder, "--preset", "cliff", "--x", "free_vram", "--hue", "policy", "--facet", "policy",
               "-o", str(tmp_path / "x.png"))
    assert r.exit_code == 2 and "without --preset" in r.stderr


def test_measured_points_only_where_they_belong(sweeps):
    from sim.viz.plotting import load_sweep, overlay_fits

    points = load_sweep(sweeps["concurrency_slots.yaml"]).manifest["measured"]
    p = points[0]
    assert p["x_column"] == "clients" and p["hue_column"] == "slots" and p["hue"] == 1
    assert overlay_fits(p, "clients", "slots", None)
    assert not overlay_fits(p, "slots", "clients", None)  # another x
    assert overlay_fits(p, "clients", None, ("slots", 1)) and not overlay_fits(p, "clients", None, ("slots", 2))
