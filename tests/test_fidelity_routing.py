"""The expert-cache and routing domain of the fidelity benchmark: every row of expert_cache.csv observed or excluded
once, a deterministic fit, finite predictions, and a held-out source's rows never reaching their own prediction."""

import csv
import dataclasses
import math
import os
import random

import pytest
from conftest import ROOT

from sim import ScenarioError
from sim.calibration.routing_fit import Params
from sim.fidelity.routing import TABLE, RouteRow, RoutingDomain, RoutingFit

PUBLIC = os.path.join(ROOT, "calibration", "public")
# the routing law sim fit-routing ships (calibration/routing.yaml), as a fixed fit: predictions without fitting
SHIPPED = RoutingFit(Params({"Qwen3-30B-A3B": 1.42887, "gpt-oss-20b": 1.31109}, locality=0.20085,
                            exponent_spread=0.123371, exponent_depth_slope=0.0, drift_weight=0.325714,
                            drift_hot_fraction=0.179626), 1.37, "mean of the 2 fitted models", 0, 0.0, 0)


@pytest.fixture(scope="module")
def domain():
    d = RoutingDomain(PUBLIC)
    return d, *d.observations()


def test_every_row_is_observed_or_excluded_exactly_once(domain):
    _, obs, excluded = domain
    with open(os.path.join(PUBLIC, TABLE), encoding="utf-8", newline="") as fh:
        rows = [r["row_id"] for r in csv.DictReader(fh)]
    seen = {o.row_id for o in obs}
    out = [e.row_id for e in excluded]
    assert len(out) == len(set(out)) and not seen & set(out)
    assert seen | set(out) == set(rows) and len(rows) == len(set(rows))
    assert len({o.id for o in obs}) == len(obs)  # one observation per row and quantity
    assert all(e.why and e.table == TABLE for e in excluded)
    assert all(isinstance(o.key, RouteRow) and o.table == TABLE and math.isfinite(o.measured) for o in obs)


def test_rows_are_read_as_their_sources_say(domain):
    _, obs, excluded = domain
    by = {o.id: o for o in obs}
    why = {e.row_id: e.why for e in excluded}
    assert by["EC0001.hit_rate"].measured == pytest.approx(42.25) and by["EC0001.hit_rate"].unit == "%"
    assert by["EC0001.hit_rate"].key.capacity == 8 and by["EC0001.hit_rate"].key.tokens[0] == 139
    # kekzl/imp: three (projection, expert) keys per expert
    assert by["EC0106.hit_rate"].key.capacity == pytest.approx(73 / 3)
    assert by["EC0106.hit_rate"].key.tokens == (256.0,) * 10
    assert by["EC0099.hit_rate"].key.tolerance == pytest.approx(3.0)  # "~67"
    assert not by["EC0099.hit_rate"].key.layers_stated
    assert by["EC0130.hit_rate"].key.capacity == pytest.approx(500 / 61)  # "C = cache_size/num_layers"
    assert by["EC0046.hit_rate"].key.tokens[0] == pytest.approx(142.0)  # 81792 lookups / (72 tensors x 8)
    assert not by["EC0046.hit_rate"].key.fitted and by["EC0105.hit_rate"].key.fitted
    assert {by["EC0042.top1_share_lo"].measured, by["EC0042.top1_share_hi"].measured} == {3.0, 9.0}
    assert "RAM over disk" in why["EC0150"] and "FATE" in why["EC0064"] and "model not stated" in why["EC0103"]
    assert "hybrid" in why["EC0113"] and "tensor parallel" in why["EC0134"]


def test_fit_is_deterministic_and_ignores_order(domain):
    d, obs, _ = domain
    train = [o for o in obs if o.key.model == "gpt-oss-20b" and o.quantity == "hit_rate"]
    a = d.fit(train)
    b = d.fit(list(reversed(train)))
    assert a == b and a.rows == len(train)
    assert set(a.params.exponents) == {"gpt-oss-20b"}
    assert a.default_exponent == a.params.exponents["gpt-oss-20b"]
    # the fitted rows come close: about a point each (sim fit-routing's tolerance)
    pred = d.predict(a, train)
    assert max(abs(p.value - o.measured) for p, o in zip(pred, train, strict=True)) < 3.0


def test_predictions_are_finite_for_every_expressible_row(domain):
    d, obs, _ = domain
    pred = d.predict(SHIPPED, obs)
    assert len(pred) == len(obs)
    assert all(math.isfinite(p.value) and p.mechanism for p in pred)
    by = dict(zip((o.id for o in obs), pred, strict=True))
    assert by["EC0001.hit_rate"].value == pytest.approx(42.25, abs=1.0)  # the shipped law on its own rows
    assert "fitted" in by["EC0001.hit_rate"].mechanism
    # a model no training row covers takes the shared default, and says so
    assert "shared default exponent" in by["EC0130.hit_rate"].mechanism
    assert "layers not stated" in by["EC0112.hit_rate"].mechanism


def test_no_training_rows_gives_the_package_defaults(domain):
    d, obs, _ = domain
    f = d.fit([])
    assert f.params.exponents == {} and f.default_exponent == 1.0 and f.params.locality == 0.0
    assert d.predict(f, []) == []
    assert all(math.isfinite(p.value) for p in d.predict(f, obs[:3]))


def _perturbed(obs):
    rng = random.Random(1)
    return [dataclasses.replace(o, measured=o.measured * rng.uniform(0.5, 1.5) + 7.0) for o in obs]


def test_a_held_out_sources_rows_never_reach_their_prediction(domain):
    d, obs, _ = domain
    held = [o for o in obs if o.machine == "IMP-kekzl"]
    train = [o for o in obs if o.machine != "IMP-kekzl" and o.key.model == "gpt-oss-20b" and o.quantity == "hit_rate"]
    fitted = d.fit(train)
    before = d.predict(fitted, held)
    after = d.predict(fitted, _perturbed(held))
    assert [p.value for p in before] == [p.value for p in after]
    # nor does their measured value reach the fit: the training set is the same, so the fit is
    assert d.fit(train) == fitted
    # per-prompt overlaps: a held-out prompt's prediction does not depend on its or its neighbours' values
    overlaps = [o for o in obs if o.quantity == "overlap"]
    assert [p.value for p in d.predict(SHIPPED, overlaps)] == [p.value for p in d.predict(SHIPPED,
                                                                                          _perturbed(overlaps))]


def test_a_model_fitted_on_one_source_predicts_another_sources_rows(domain):
    d, obs, _ = domain
    lru = [o for o in obs if o.key.model == "gpt-oss-20b" and o.quantity == "hit_rate"]
    elsewhere = [dataclasses.replace(o, source="OTHER", machine="OTHER-BOX") for o in lru]  # the same rows, elsewhere
    fitted = d.fit(elsewhere)
    assert fitted == d.fit(lru)  # a model's exponent is the model's, whichever source measured it
    held = [o for o in obs if o.key.model == "gpt-oss-20b" and o.quantity == "overlap"]
    assert all("exponent" in p.mechanism and "fitted" in p.mechanism for p in d.predict(fitted, held))


def test_a_missing_table_is_one_line_naming_it(tmp_path):
    with pytest.raises(ScenarioError, match="expert_cache.csv: file not found"):
        RoutingDomain(tmp_path).observations()
    (tmp_path / TABLE).write_text("row_id,source_id\nEC1,X\n")
    with pytest.raises(ScenarioError, match="a column of expert_cache.csv"):
        RoutingDomain(tmp_path).observations()
