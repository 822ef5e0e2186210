"""`sim calibrate` recovers known parameters from synthetic requests, flags what the data cannot pin down, and
`sim run --uncertainty` samples the fitted distribution."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from test_moe_serve import moe_raw

import sim
from sim.calibration.calibrate import calibrate
from sim.calibration.observations import Observation, replay
from sim.cli import main
from sim.config.yaml_io import dump_yaml, parse_yaml, read_yaml

ENGINE = "machines.server.engine."


def write_scenario(folder, dense_s: float, prefill_tok_s: float, calibrations=()) -> str:
    raw = moe_raw()
    engine = raw["machines"]["server"]["engine"]
    engine["prefill_tok_s"] = prefill_tok_s
    engine["step"]["dense_s"] = dense_s
    raw["calibrate"] = {"free": {ENGINE + "step.dense_s": {"lo": 1e-4, "hi": 0.1},
                                 ENGINE + "prefill_tok_s": {"lo": 50, "hi": 50000},
                                 ENGINE + "power.idle_w": {"lo": 1, "hi": 100}}}
    raw["calibrations"] = list(calibrations)
    path = folder / "scenario.yaml"
    path.write_text(dump_yaml(raw))
    return str(path)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Requests 'measured' on an engine with dense_s 3 ms and 800 prompt tok/s (the scenario says 1 ms, 500)."""
    folder = tmp_path_factory.mktemp("cal")
    truth = sim.load(write_scenario(folder, 3e-3, 800.0)).config
    rng = np.random.default_rng(5)
    obs = [Observation("x", int(p), cached_tokens=0, output_tokens=int(o), acceptance=float("nan"), measured={})
           for p, o in zip(rng.integers(100, 2000, 40), rng.integers(40, 300, 40), strict=True)]
    measured = replay(truth, obs, seed=123)
    table = folder / "requests.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt_tokens", "cached_tokens", "output_tokens", "prefill_tok_s", "decode_tok_s"])
        for o, s in zip(obs, measured, strict=True):
            w.writerow([o.prompt_tokens, 0, o.output_tokens, s["prefill_tok_s"], s["decode_tok_s"]])
    return folder, write_scenario(folder, 1e-3, 500.0), str(table)


@pytest.mark.slow
def test_calibrate_recovers_known_parameters_and_flags_what_it_cannot_see(synthetic):
    folder, scenario, table = synthetic
    res = calibrate(scenario, [], [table], seed=0)
    assert res.parameters[ENGINE + "step.dense_s"] == pytest.approx(3e-3, rel=0.05)
    assert res.parameters[ENGINE + "prefill_tok_s"] == pytest.approx(800, rel=0.02)
    assert res.log_sd[ENGINE + "step.dense_s"] < 0.05
    assert any("power.idle_w" in w and "do not depend" in w for w in res.warnings)  # no observable sees it
    assert len(res.residuals) == 80 and all(r["role"] == "fit" for r in res.residuals)


@pytest.mark.slow
def test_calibrate_cli_writes_calibration_report_and_plot_and_uncertainty_samples_it(synthetic):
    folder, scenario, table = synthetic
    out = folder / "fit.yaml"
    r = CliRunner().invoke(main, ["calibrate", scenario, "--table", table, "--out", str(out)])
    assert r.exit_code == 0, r.output
    cal = parse_yaml(out.read_text())
    assert len(cal["log_cov"]) == 3 and (folder / "fit_report.md").exists() and (folder / "fit_plot.png").exists()
    assert cal["fitted"] == list(cal["parameters"]) and set(cal["bounds"]) == set(cal["fitted"])
    assert "sim calibrate " in out.read_text().splitlines()[1]
    # the scenario then uses the calibration; --uncertainty draws from its covariance
    fitted = write_scenario(folder, 1e-3, 500.0, calibrations=["fit.yaml"])
    raw = read_yaml(fitted)
    for key in ("prefill_tok_s", "step"):
        raw["machines"]["server"]["engine"].pop(key) if key == "prefill_tok_s" else \
            raw["machines"]["server"]["engine"]["step"].pop("dense_s")
    raw["machines"]["server"]["engine"]["power"].pop("idle_w")
    open(fitted, "w").write(dump_yaml(raw))
    r = CliRunner().invoke(main, ["run", fitted, "--uncertainty", "6", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    d = data["metrics"]["decode_tok_s"]
    assert d["p5"] <= d["median"] <= d["p95"] and d["p5"] < d["p95"]
    plain = CliRunner().invoke(main, ["run", write_scenario(folder, 1e-3, 500.0), "--uncertainty", "3"])
    assert plain.exit_code == 2 and "sim calibrate" in plain.output  # nothing to draw from: one-line error


def test_bad_calibration_inputs_are_one_line_errors(synthetic, tmp_path):
    from sim import ScenarioError
    from sim.calibration.uncertainty import calibrated_parameters

    folder, scenario, table = synthetic
    empty = tmp_path / "empty.csv"
    empty.write_text("prompt_tokens,output_tokens\n100,10\n")
    with pytest.raises(ScenarioError, match="something to fit to"):
        calibrate(scenario, [], [str(empty)])
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_tokens,cached_tokens,output_tokens,decode_tok_s\n10,20,5,100\n")
    with pytest.raises(ScenarioError, match="cached_tokens"):
        calibrate(scenario, [], [str(bad)])
    raw = read_yaml(scenario)
    raw["calibrate"]["free"] = {"machines.server.engine.step": {"lo": 1e-3, "hi": 1.0}}
    odd = tmp_path / "odd.yaml"
    odd.write_text(dump_yaml(raw))
    with pytest.raises(ScenarioError, match="positive number"):
        calibrate(str(odd), [], [table])
    cal = tmp_path / "cal.yaml"
    cal.write_text(dump_yaml({"parameters": {ENGINE + "step.dense_s": 1e-3}, "log_cov": [[0.1], [0.2]]}))
    raw = read_yaml(scenario)
    raw["calibrations"] = [str(cal)]
    raw["machines"]["server"]["engine"]["step"].pop("dense_s")
    uses = tmp_path / "uses.yaml"
    uses.write_text(dump_yaml(raw))
    with pytest.raises(ScenarioError, match="log_cov"):
        calibrated_parameters(str(uses), [])
    cal.write_text(dump_yaml({"parameters": {ENGINE + "step.dense_s": 1e-3}, "log_cov": [[-0.1]]}))
    with pytest.raises(ScenarioError, match="semi-definite"):
        calibrated_parameters(str(uses), [])
    cal.write_text(dump_yaml({"parameters": {ENGINE + "step.dense_s": 1e-3}, "log_cov": [[0.01]]}))
    names, mean, _, held, bounds = calibrated_parameters(str(uses), [])
    assert np.isinf(bounds).all()  # a file without bounds: draws are not clipped
    assert names == [ENGINE + "step.dense_s"] and held == [] and mean[0] == pytest.approx(np.log(1e-3))
    with pytest.raises(ScenarioError, match="to draw"):  # a value given with --set is not drawn: nothing left
        calibrated_parameters(str(uses), [f"{ENGINE}step.dense_s=0.002"])


# measured tables mapped onto a scenario (calibrate.tables): quantities, rows of settings, buckets


def table_scenario(folder, dense_s: float, extra: dict | None = None) -> str:
    """The small MoE engine with a table map: a quantities table (decode, a ratio to a variant with more drafts
    accepted), a rows table (decode at two acceptances, in percent) and the spill buckets pooled over both."""
    raw = moe_raw()
    raw["machines"]["server"]["engine"]["step"]["dense_s"] = dense_s
    raw["calibrate"] = {
        "free": {ENGINE + "step.dense_s": {"lo": 1e-4, "hi": 0.1, "start": 1e-3, "unit": "s"}},
        "held": {ENGINE + "step.host_s": {"value": 2e-4, "unit": "s", "why": "assumed"}},
        "variants": {"confident": {"set": {"models.moe.moe.draft.acceptance": 0.9}}},
        "tables": {
            "q.csv": {"kind": "quantities", "set": {"serve.requests": 60},
                      "cells": {"decode": {"metric": "decode_tok_s", "tolerance": 0.05},
                                "speedup": {"metric": "decode_tok_s", "variant": "confident", "ratio_to": "base",
                                            "tolerance": 0.05},
                                "slots": {"metric": "expert_slots", "tolerance": 0.01}}},
            "rows.csv": {"kind": "rows", "row_key": "acceptance", "set": {"serve.requests": 40},
                         "row_set": {"models.moe.moe.draft.acceptance": {"mean_of": ["acceptance"], "scale": 0.01}},
                         "cells": {"decode_tok_s": {"metric": "decode_tok_s_median", "tolerance": 0.1}}},
            "b.csv": {"kind": "buckets", "pool": ["base", "confident"], "set": {"serve.requests": 60},
                      "tolerance": 0.5}},
        "checks": {"q.csv slots": "VRAM arithmetic"},
        **(extra or {})}
    path = folder / "tables.yaml"
    path.write_text(dump_yaml(raw))
    return str(path)


def write_csv(path, header: str, rows: list[str]) -> str:
    path.write_text("# made by the test from a simulation with a known dense_s\n" + header + "\n" + "\n".join(rows)
                    + "\n")
    return str(path)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Tables 'measured' by simulating the engine with dense_s 4 ms, the map's own targets read back."""
    from sim.calibration.targets import TargetBuilder, run_experiments, simulated

    folder = tmp_path_factory.mktemp("tables")
    truth = table_scenario(folder, 4e-3)
    q = write_csv(folder / "q.csv", "quantity,value,unit", ["decode,1,tok/s", "speedup,1,ratio", "slots,312,slots"])
    rows = write_csv(folder / "rows.csv", "acceptance,decode_tok_s", ["50,1", "80,1"])
    b = write_csv(folder / "b.csv", "bucket_by,low_pct,high_pct,decode_tok_s", ["hit_rate,90,,1"])
    cal = read_calibrate_of(truth)
    targets = [t for p in (q, rows, b) for t in TargetBuilder(truth, cal, truth).table(p)]
    runs = run_experiments(targets, [f"{ENGINE}step.host_s=0.0002"], 7, None)  # the held value, as the fit holds it
    got = {t.name: simulated(t, runs) for t in targets}
    write_csv(folder / "q.csv", "quantity,value,unit", [f"decode,{got['q.csv decode']},tok/s",
                                                        f"speedup,{got['q.csv speedup']},ratio", "slots,312,slots"])
    write_csv(folder / "rows.csv", "acceptance,decode_tok_s", [f"50,{got['rows.csv 50 decode_tok_s']}",
                                                               f"80,{got['rows.csv 80 decode_tok_s']}"])
    write_csv(folder / "b.csv", "bucket_by,low_pct,high_pct,decode_tok_s",
              [f"hit_rate,90,,{got['b.csv hit_rate 90-up']}"])
    return folder, got, [q, rows, b]


def read_calibrate_of(path):
    from sim.config.load import read_calibrate

    return read_calibrate(path)


def test_tables_become_targets_with_their_experiments(tables):
    folder, got, _ = tables
    assert set(got) == {"q.csv decode", "q.csv speedup", "q.csv slots", "rows.csv 50 decode_tok_s",
                        "rows.csv 80 decode_tok_s", "b.csv hit_rate 90-up"}
    assert got["q.csv slots"] == 312  # (0.5 GiB free - reserves) / 1 MiB
    assert got["q.csv speedup"] > 1.2  # 90% of drafts accepted against 60%: a ratio of two runs
    assert got["rows.csv 80 decode_tok_s"] > 1.2 * got["rows.csv 50 decode_tok_s"]  # each row sets its acceptance


def test_calibrate_recovers_a_parameter_from_tables_alone(tables):
    folder, _, paths = tables
    res = calibrate(table_scenario(folder, 1e-3), [], paths, seed=7, max_evals=40)
    assert res.parameters[ENGINE + "step.dense_s"] == pytest.approx(4e-3, rel=0.05)
    assert res.held == {ENGINE + "step.host_s": 2e-4} and res.held_reason[ENGINE + "step.host_s"] == "assumed"
    roles = {r["target"]: r["role"] for r in res.residuals}
    assert roles["q.csv slots"] == "check" and roles["q.csv decode"] == "fit"
    assert all(abs(r["error"]) < 0.05 for r in res.residuals if r["role"] == "fit")


def test_the_calibration_being_written_is_left_out_while_fitting(tables, tmp_path):
    """--out names one of the scenario's calibrations: the fit must neither be filled by its values nor start from
    them."""
    from sim import ScenarioError

    folder, _, paths = tables
    stale = tmp_path / "fit.yaml"
    raw = read_yaml(table_scenario(folder, 1e-3))
    raw["calibrate"]["held"] = {}
    raw["calibrations"] = [str(stale)]
    scenario = tmp_path / "s.yaml"

    def fit(exclude, **values):
        stale.write_text(dump_yaml({"parameters": {ENGINE + f"step.{k}": v for k, v in values.items()}}))
        scenario.write_text(dump_yaml(raw))
        return calibrate(str(scenario), [], paths, seed=7, max_evals=0, starts=0, exclude=exclude)

    a, b = fit(str(stale), host_s=0.01), fit(str(stale), host_s=0.0)
    assert a.residuals == b.residuals  # the stale file's host time (a value the scenario leaves open) is not used
    assert fit(None, host_s=0.01).residuals != a.residuals  # ... as it would be without the exclusion
    # a free value without a start comes from the scenario as the fit sees it: without the file being written
    raw["calibrate"]["free"][ENGINE + "step.dense_s"].pop("start")
    raw["machines"]["server"]["engine"]["step"].pop("dense_s")
    with pytest.raises(ScenarioError, match="start value"):
        fit(str(stale), dense_s=0.05)
    assert fit(None, dense_s=0.05).parameters == {ENGINE + "step.dense_s": 0.05}


@pytest.mark.parametrize("change,match", [
    ({"tables": {}}, "calibrate.tables.q.csv"),
    ({"variants": {}}, "unknown variant 'confident'"),
    ({"stages": [["nope"]]}, "calibrate.stages.0"),
])
def test_table_map_mistakes_are_one_line_errors(tables, tmp_path, change, match):
    from sim import ScenarioError

    folder, _, paths = tables
    with pytest.raises(ScenarioError, match=match):
        calibrate(table_scenario(tmp_path, 1e-3, change), [], paths, max_evals=1, starts=0)


def test_a_missing_quantity_names_the_table_and_the_quantity(tables, tmp_path):
    folder, _, paths = tables
    q = write_csv(tmp_path / "q.csv", "quantity,value,unit", ["decode,10,tok/s", "slots,312,slots"])
    r = CliRunner().invoke(main, ["calibrate", table_scenario(tmp_path, 1e-3), "--table", q,
                                  "--out", str(tmp_path / "o.yaml")])
    assert r.exit_code == 2 and "q.csv: speedup: missing" in r.output and len(r.output.strip().splitlines()) == 1


def test_measured_values_read_numbers_ranges_and_runs():
    from sim import ScenarioError
    from sim.formats.measured_cells import measured_values

    assert measured_values("140.6", "t", "k") == [140.6]
    assert measured_values("35-44", "t", "k") == [35.0, 44.0]
    assert measured_values("417;421;455", "t", "k") == [417.0, 421.0, 455.0]
    assert measured_values("-3", "t", "k") == [-3.0]
    assert measured_values("1.5e-3", "t", "k") == [1.5e-3]
    assert measured_values("1e-3-2e-3", "t", "k") == [1e-3, 2e-3]
    with pytest.raises(ScenarioError, match="t: k: bad value"):
        measured_values("fast", "t", "k")


def test_replicas_compare_a_request_with_the_median_of_its_copies(synthetic):
    """Each replayed request simulated 5 times is the median of the same 5 copies replayed once each."""
    _, scenario, _ = synthetic
    scn = sim.load(scenario).config
    one = Observation("x", 400, cached_tokens=0, output_tokens=120, acceptance=float("nan"), measured={})
    copies = replay(scn, [one] * 5, seed=3)
    median = replay(scn, [one], seed=3, replicas=5)[0]
    for key in ("decode_tok_s", "expert_hit_rate", "pcie_share", "ttft_s"):
        assert median[key] == pytest.approx(float(np.median([c[key] for c in copies])))
    assert len({c["decode_tok_s"] for c in copies}) > 1  # the copies do differ: the median is not trivially one


def test_standard_errors_follow_each_inputs_own_agreement_and_the_robust_weights():
    """Residuals in tolerance units: an input of many cells that agrees ten times better than its tolerance pins a
    parameter about ten times tighter; an input of one cell keeps its tolerance; a far-off cell, which the soft-L1 fit
    down-weights, narrows the errors less than a plain least-squares count would say."""
    from types import SimpleNamespace

    from sim.calibration.covariance import standard_errors
    from sim.calibration.targets import Target

    def problem(groups: list[str]) -> SimpleNamespace:
        return SimpleNamespace(fit=[Target(f"c{i}", g, 1.0, "rate", 0.1, "m", ()) for i, g in enumerate(groups)])

    lo, hi, x = np.log([1e-3]), np.log([1.0]), np.log([0.1])
    jac = np.ones((40, 1))
    tight = standard_errors(problem(["a"] * 40), ["p"], x, lo, hi, jac, np.full(40, 0.1))[0][0]
    loose = standard_errors(problem(["a"] * 40), ["p"], x, lo, hi, jac, np.full(40, 1.0))[0][0]
    # 40 cells, 39 degrees of freedom, their mean square shrunk toward 1 with 2 cells' weight: sigma^2 =
    # (40 * 0.01 + 2) / 41 and (40 + 2) / 41; soft-L1 weights (1 + r^2)^(-1/4); sd = sigma / (weight * sqrt(40))
    tight_sigma, loose_sigma = math.sqrt((40 * 0.01 + 2) / 41), math.sqrt(42 / 41)
    expected = (loose_sigma / 2 ** -0.25) / (tight_sigma / 1.01 ** -0.25)
    assert loose / tight == pytest.approx(expected, rel=1e-9) and loose / tight > 4
    single = standard_errors(problem(["b"]), ["p"], x, lo, hi, np.ones((1, 1)), np.array([0.01]))[0][0]
    assert single == pytest.approx(1.0, rel=1e-3)  # one cell: its tolerance is its noise, however well it agrees
    near = standard_errors(problem(["b"]), ["p"], x, lo, hi, np.ones((1, 1)), np.array([0.0]))[0][0]
    far = standard_errors(problem(["b"]), ["p"], x, lo, hi, np.ones((1, 1)), np.array([5.0]))[0][0]
    assert far > 2 * near  # an outlier weighs less


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_measured_values_either_read_finite_numbers_or_say_why_in_one_line(text):
    from sim import ScenarioError
    from sim.formats.measured_cells import measured_values

    try:
        values = measured_values(text, "t.csv", "row 1.value")
    except ScenarioError as exc:
        assert str(exc).startswith("t.csv: row 1.value: ") and "\n" not in str(exc)
    else:
        assert values and all(math.isfinite(v) for v in values)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.001, 1e6), st.floats(0.001, 1e6))
def test_measured_ranges_and_runs_read_back(a, b):
    from sim.formats.measured_cells import measured_values

    lo, hi = sorted((a, b))
    assert measured_values(f"{lo!r}-{hi!r}", "t", "k") == [lo, hi]
    assert measured_values(f"{a!r};{b!r}", "t", "k") == [a, b]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pcie_spill", "hit_rate", "x", ""]),
                          *[st.sampled_from(["", "0", "5", "-1", "0.5", "x", "nan", "1e3", "up", "3-4"])] * 3),
                max_size=4))
def test_a_malformed_bucket_table_is_a_one_line_error(tmp_path_factory, rows):
    from sim import ScenarioError
    from sim.calibration.targets import TargetBuilder
    from sim.config.calibrate import Calibrate

    path = tmp_path_factory.mktemp("b") / "b.csv"
    path.write_text("bucket_by,low_pct,high_pct,decode_tok_s\n" + "\n".join(",".join(r) for r in rows) + "\n")
    cal = Calibrate.model_validate({"tables": {"b.csv": {"kind": "buckets"}}})
    try:
        targets = TargetBuilder("s.yaml", cal, "s.yaml").table(str(path))
    except ScenarioError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(t.measured > 0 for t in targets)


def test_table_map_and_input_mistakes_found_before_any_fit(tables, tmp_path):
    """A bucket table without its high_pct column, a row_variant naming no row, a start outside its bounds, an
    --out that cannot be written: each a one-line error, found before the fit."""
    from sim import ScenarioError
    from sim.calibration.targets import TargetBuilder
    from sim.config.load import read_calibrate

    folder, _, paths = tables
    b = write_csv(tmp_path / "b.csv", "bucket_by,low_pct,decode_tok_s", ["hit_rate,90,100"])
    scenario = table_scenario(tmp_path, 1e-3)
    with pytest.raises(ScenarioError, match="high_pct"):
        TargetBuilder(scenario, read_calibrate(scenario), scenario).table(b)
    rows_map = {"kind": "rows", "row_key": "acceptance", "row_variant": {"55": "confident"},
                "cells": {"decode_tok_s": {"metric": "decode_tok_s", "tolerance": 0.1}}}
    odd = table_scenario(tmp_path, 1e-3, {"tables": {"rows.csv": rows_map}})
    with pytest.raises(ScenarioError, match="row_variant.55"):
        TargetBuilder(odd, read_calibrate(odd), odd).table(paths[1])
    far = table_scenario(tmp_path, 1e-3, {"free": {ENGINE + "step.dense_s": {"lo": 1e-4, "hi": 0.01, "start": 0.5}}})
    with pytest.raises(ScenarioError, match="start"):
        calibrate(far, [], paths, max_evals=0, starts=0)
    blocker = tmp_path / "afile"
    blocker.write_text("")
    r = CliRunner().invoke(main, ["calibrate", scenario, "--table", paths[0], "--out",
                                  str(blocker / "fit.yaml")])
    assert r.exit_code == 2 and "--out" in r.output and len(r.output.strip().splitlines()) == 1


def test_request_tables_may_name_the_hit_rate_as_requests_csv_does(tmp_path):
    from sim.calibration.observations import observations

    t = write_csv(tmp_path / "r.csv", "prompt_tokens,output_tokens,hit_rate,decode_tok_s", ["100,50,0.9,120"])
    (o,) = observations([], [t])
    assert o.measured == {"decode_tok_s": 120.0, "expert_hit_rate": 0.9}
