"""The dense engine through the same calibration and validation paths as the MoE engine: `sim calibrate` recovers
known iteration costs from synthetic requests and from a synthetic serving table, and `sim validate` checks a
scenario's own table cell by cell."""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT
from test_dense_serve import dense_raw

import sim
from sim.calibration.calibrate import calibrate
from sim.calibration.observations import Observation, replay
from sim.cli import main
from sim.config.yaml_io import dump_yaml, parse_yaml, read_yaml

IT = "machines.box.engine.iteration."
TRUTH = {"memory_efficiency": 0.6, "compute_efficiency": 0.35, "overhead_s": 0.002}
TABLE = "dense_serving.csv"


FREE = {IT + "memory_efficiency": {"lo": 0.1, "hi": 1.0, "start": 0.8, "unit": "fraction"},
        IT + "compute_efficiency": {"lo": 0.05, "hi": 1.0, "start": 0.5, "unit": "fraction"},
        IT + "overhead_s": {"lo": 1e-5, "hi": 0.05, "start": 0.001, "unit": "s"}}


def write_scenario(folder, values: dict | None, name: str = "scenario.yaml", held: tuple[str, ...] = ()) -> str:
    """The small dense scenario of test_dense_serve with ``values`` for the iteration costs (None: left to the
    fit's starting values), its calibrate section declaring them free (those in ``held`` held at their true values),
    and a serving table mapped by rate."""
    raw = dense_raw()
    iteration = raw["machines"]["box"]["engine"]["iteration"]
    for key in TRUTH:
        iteration.pop(key)
    iteration.update(values or {})
    raw["calibrate"] = {
        "free": {k: v for k, v in FREE.items() if k.removeprefix(IT) not in held},
        "held": {IT + k: {"value": TRUTH[k], "why": "known"} for k in held},
        "tables": {TABLE: {"kind": "rows", "row_key": "rate_per_s",
                           "row_set": {"serve.workload.rate_per_s": "rate_per_s"}, "set": {"serve.requests": 600},
                           "cells": {"throughput_tok_s": {"metric": "throughput_tok_s", "tolerance": 0.1},
                                     "ttft_p50_s": {"metric": "ttft_p50_s", "tolerance": 0.25},
                                     "tpot_p50_s": {"metric": "tpot_p50_s", "tolerance": 0.1}}}}}
    path = folder / name
    path.write_text(dump_yaml(sorted_keys(raw)))  # as the fits below were tuned: free parameters in name order
    return str(path)


def sorted_keys(tree):
    """``tree`` with every map's keys in sorted order (the order a fit declares its free parameters in is the order
    it searches them in; the assertions below hold for this order)."""
    if isinstance(tree, dict):
        return {k: sorted_keys(tree[k]) for k in sorted(tree)}
    return [sorted_keys(v) for v in tree] if isinstance(tree, list) else tree


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """Requests and a serving table 'measured' on the engine at TRUTH; the scenario to fit starts elsewhere."""
    folder = tmp_path_factory.mktemp("dense_cal")
    truth = write_scenario(folder, TRUTH, "truth.yaml")
    rng = np.random.default_rng(5)
    obs = [Observation("x", int(p), cached_tokens=0, output_tokens=int(o), acceptance=float("nan"), measured={})
           for p, o in zip(rng.integers(50, 3000, 30), rng.integers(20, 300, 30), strict=True)]
    measured = replay(sim.load(truth).config, obs, seed=123)
    requests = folder / "requests.csv"
    with open(requests, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt_tokens", "cached_tokens", "output_tokens", "prefill_tok_s", "decode_tok_s", "ttft_s"])
        for o, s in zip(obs, measured, strict=True):
            w.writerow([o.prompt_tokens, 0, o.output_tokens, s["prefill_tok_s"], s["decode_tok_s"], s["ttft_s"]])
    rows = []
    for rate in (0.5, 1.0):
        m = sim.load(truth, {"serve.requests": 600, "serve.workload.rate_per_s": rate}).run(seed=11).metrics
        rows.append({"rate_per_s": rate, **{k: m[k] for k in ("throughput_tok_s", "ttft_p50_s", "tpot_p50_s")}})
    table = folder / TABLE
    with open(table, "w", newline="") as fh:
        fh.write("# synthetic: the engine at memory 0.6, compute 0.35, 2 ms per iteration (tests only)\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return folder, truth, write_scenario(folder, None), str(requests), str(table)


def test_calibrate_recovers_a_dense_engines_iteration_costs_from_its_requests(dense):
    """Lone requests pin the compute rate (prefill) and the memory rate (decode) once the per-iteration overhead is
    known; with it free too, they pin only memory rate and overhead together (both add to every decode iteration),
    and the fit says so."""
    folder, _, _, requests, _ = dense
    held = write_scenario(folder, None, "held.yaml", held=("overhead_s",))
    res = calibrate(held, [], [requests], seed=0, max_evals=120)
    for key in ("memory_efficiency", "compute_efficiency"):
        assert res.parameters[IT + key] == pytest.approx(TRUTH[key], rel=0.03), key
        assert res.log_sd[IT + key] < 0.1
    assert len(res.residuals) == 90 and all(r["role"] == "fit" for r in res.residuals)
    free = calibrate(write_scenario(folder, None), [], [requests], seed=0, max_evals=120)
    assert free.parameters[IT + "compute_efficiency"] == pytest.approx(TRUTH["compute_efficiency"], rel=0.03)
    assert any("overhead_s" in w and "not pinned down" in w for w in free.warnings)


@pytest.mark.slow
def test_calibrate_recovers_them_from_a_serving_table_and_validate_checks_it(dense):
    """A benchmark at two request rates (another random realisation of the workload than the fit's), the overhead
    held as above."""
    folder, _, _, _, table = dense
    scenario = write_scenario(folder, None, "held.yaml", held=("overhead_s",))
    out = folder / "fit.yaml"
    # 30 Nelder-Mead steps land within 2% of both (60 moved them by under 0.1%, for 6 s more)
    r = CliRunner().invoke(main, ["calibrate", scenario, "--table", table, "--max-evals", "30",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    fit = parse_yaml(out.read_text())
    assert fit["parameters"][IT + "memory_efficiency"] == pytest.approx(0.6, rel=0.08)
    assert fit["parameters"][IT + "compute_efficiency"] == pytest.approx(0.35, rel=0.15)
    # the scenario with its fitted values validates against the table; the same table with one cell off does not
    raw = read_yaml(scenario)
    raw["calibrations"] = ["fit.yaml"]
    fitted = folder / "fitted.yaml"
    fitted.write_text(dump_yaml(raw))
    ok = CliRunner().invoke(main, ["validate", str(fitted), "--table", table, "--json"])
    assert ok.exit_code == 0, ok.output
    cells = json.loads(ok.output)["cells"]
    assert len(cells) == 6 and all(c["status"] == "ok" for c in cells)
    rows = list(csv.DictReader(line for line in open(table) if not line.startswith("#")))
    rows[1]["tpot_p50_s"] = str(float(rows[1]["tpot_p50_s"]) * 1.5)
    off = folder / "off" / TABLE
    off.parent.mkdir()
    with open(off, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    bad = CliRunner().invoke(main, ["validate", str(fitted), "--table", str(off)])
    assert bad.exit_code == 1 and "OUTSIDE" in bad.output and "tpot_p50_s" in bad.output


def test_the_shipped_dense_scenario_declares_what_a_fit_of_it_needs():
    """Its three iteration costs come from a calibration file (two fitted to kernel timings, the overhead assumed),
    also where `sim calibrate` writes; the fit starts from them and the scenario maps a serving table."""
    shipped = os.path.join(ROOT, "scenarios", "a100_llama2_7b.yaml")
    s = sim.load(shipped)
    iteration = "machines.a100_box.engine.iteration."
    assert [s.get(iteration + k) for k in TRUTH] == [0.674, 0.696, 0.001]
    cal = s.config.calibrate
    assert {k.removeprefix(iteration) for k in cal.free} == set(TRUTH)
    assert all(math.isclose(cal.free[iteration + k].start, s.get(iteration + k)) for k in TRUTH)
    assert "a100_llama2_7b_serving.csv" in cal.tables
    r = CliRunner().invoke(main, ["validate", shipped, "--root", ROOT])
    assert r.exit_code == 2 and "--table" in r.output  # no measured table ships: it says what to give
