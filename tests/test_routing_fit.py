"""Fitting the routing law to routing statistics: the table's rows as read, recovery of known parameters from the
companions' own numbers, the shipped fit reproduced, the command and its errors."""

import os
import sys

import numpy as np
import pytest
from conftest import ROOT

from sim import ScenarioError
from sim.calibration.routing_fit import Observation, Params, error, fit, predict, read_table, simulated, workloads
from sim.config.yaml_io import parse_yaml, read_yaml

TABLE = os.path.join(ROOT, "calibration", "routing_public.csv")
sys.path.insert(0, os.path.join(ROOT, "tests"))


def test_the_public_table_reads_as_its_rows_say():
    obs = read_table(TABLE)
    by = {o.row_id: o for o in obs}
    assert by["EC0001"].quantity == "lru_hit_rate" and by["EC0001"].capacity == 8
    assert by["EC0001"].measured == pytest.approx(0.4225) and by["EC0001"].role == "fit"
    assert by["EC0002"].role == "check"  # every other capacity held out
    assert by["EC0010"].quantity == "overlap" and by["EC0010"].tokens == 139
    assert by["EC0010"].prompt == "trace-chat-advice"
    assert all(o.role == "check" for o in obs if o.model == "gpt-oss-20b" and o.quantity == "overlap")
    assert by["EC0045/d8-16"].distances == (8, 16) and by["EC0045/d8-16"].tolerance == 0.03
    assert by["EC0041"].measured == (78.0, 106.0) and by["EC0042"].measured == pytest.approx((0.03, 0.09))
    assert by["BVDOC-S48"].quantity == "static_hit_rate" and by["BVDOC-S48"].role == "check"
    assert {o.model for o in obs} == {"Qwen3-30B-A3B", "gpt-oss-20b"}
    assert {(o.layers, o.experts, o.top_k) for o in obs} == {(48, 128, 8), (24, 32, 4)}


@pytest.mark.parametrize("edit, where", [
    (lambda r: r.replace("42.25", "142.25", 1), "row EC0001.hit_rate_pct"),
    (lambda r: r.replace(",fit\n", ",maybe\n", 1), "row EC0001.role"),
    (lambda r: r.replace("mean consecutive-token expert overlap", "something else", 1), "row EC0010.metric_name"),
    (lambda r: r.replace("Q4_K_M,48,128,8", "Q4_K_M,48,128,x", 1), "row EC0001.top_k"),
])
def test_bad_cells_are_errors_naming_the_row_and_column(tmp_path, edit, where):
    path = tmp_path / "t.csv"
    path.write_text(edit(open(TABLE, encoding="utf-8").read()))
    with pytest.raises(ScenarioError, match=where.replace(".", r"\.")):
        read_table(str(path))


def synthetic(truth: Params) -> list[Observation]:
    """One model's rows as the companions give them under ``truth`` (the fit must find it back)."""
    geo = dict(model="m", layers=16, experts=64, top_k=4)
    obs = [Observation(f"lru{c}", quantity="lru_hit_rate", capacity=c, measured=0.0, role="fit", **geo)
           for c in (4, 8, 16, 24, 32, 48)]
    obs += [Observation(f"o{i}", quantity="overlap", measured=float(i), tokens=120, prompt=str(i), role="fit", **geo)
            for i in range(10)]
    obs += [Observation("d2", quantity="overlap_d", distances=(2,), measured=0.0, role="fit", **geo),
            Observation("d8", quantity="overlap_d", distances=(8, 16), measured=0.0, role="fit", **geo)]
    pred = predict(obs, truth, workloads(obs), full=False)
    return [Observation(**{**o.__dict__, "measured": float(simulated(o, pred, obs))}) for o in obs]


def test_known_parameters_are_recovered_from_their_own_statistics():
    truth = Params({"m": 1.2}, locality=0.3, exponent_spread=0.15, exponent_depth_slope=0.0, drift_weight=0.3,
                   drift_hot_fraction=0.2)
    res = fit(synthetic(truth), seed=0, sample=False, starts=1)
    p = res.params
    assert p.exponents["m"] == pytest.approx(1.2, abs=0.05)
    assert p.locality == pytest.approx(0.3, abs=0.02)
    assert p.exponent_spread == pytest.approx(0.15, abs=0.03)
    assert max(abs(r["error"]) for r in res.rows) < 0.002
    assert set(res.held) == {"exponent_depth_slope"} and p.exponent_depth_slope == 0.0


def test_a_range_is_met_inside_and_missed_by_its_distance():
    o = Observation("r", quantity="top1_range", measured=(0.03, 0.09), role="check", model="m", layers=1,
                    experts=8, top_k=2)
    assert error(o, (0.04, 0.08)) == 0.0
    assert error(o, (0.05, 0.12)) == pytest.approx(0.03) and error(o, (0.01, 0.05)) == pytest.approx(-0.02)


@pytest.mark.slow
def test_the_shipped_fit_holds_its_rows():
    """Fitted rows within two tolerances, the held-out LRU capacities within two points."""
    shipped = read_yaml(os.path.join(ROOT, "calibration", "routing.yaml"))
    rows = shipped["residuals"]
    assert all(abs(r["error"]) <= 2 * r["tolerance"] for r in rows if r["role"] == "fit"), rows
    assert all(abs(r["error"]) <= 0.02 for r in rows if r["role"] == "check" and r["quantity"] == "lru_hit_rate")
    for name in ("locality", "exponent_spread", "drift_weight", "drift_hot_fraction", "exponent_depth_slope"):
        entry = shipped["parameters"][name]
        assert entry["lo"] <= entry["value"] <= entry["hi"] and entry["unit"] in ("1", "fraction")
        assert "stderr" in entry or "held" in entry


def test_fit_routing_on_a_trace_and_its_errors(tmp_path):
    from bounded import run_bounded
    from test_route_trace import write_csv

    from sim.calibration.route_sampler import sampled_trace
    from sim.moe.routing import RoutingLaw

    law = RoutingLaw(layers=4, experts=32, top_k=4, exponent=1.2, locality=0.3)
    # four prompts of 50 tokens: the fit converges in about 250 evaluations (of 100 tokens: 1,200, most of 13 s)
    write_csv(tmp_path / "t.csv", sampled_trace(law, np.full(4, 50), np.ones(4), np.random.default_rng(1)))
    out = run_bounded(["fit-routing", "--trace", str(tmp_path / "t.csv"), "--model", "small", "--no-sample",
                       "--out", str(tmp_path / "fit.yaml")], timeout_s=120)
    assert out.code == 0, out.stderr
    fitted = parse_yaml((tmp_path / "fit.yaml").read_text())
    assert fitted["models"]["small"]["geometry"] == {"layers": 4, "experts_per_layer": 32, "top_k": 4}
    assert 0.1 < fitted["parameters"]["locality"]["value"] < 0.5
    assert (tmp_path / "fit_report.md").exists()
    neither = run_bounded(["fit-routing"])
    assert neither.one_line_error() and "--table" in neither.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("row_id,model\nX,y\n")
    wrong = run_bounded(["fit-routing", "--table", str(bad)])
    assert wrong.one_line_error() and "bad.csv" in wrong.stderr
