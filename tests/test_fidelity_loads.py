"""The weight-loading fidelity domain (sim.fidelity.loads): every row of the three public tables observed or
excluded, a deterministic fit of shared parameters, finite leave-one-source-out predictions."""

from __future__ import annotations

import csv
import math
import os

import pytest
from conftest import CALIBRATION

from sim.fidelity.domain import Excluded, Observation
from sim.fidelity.loads import (
    PARAMETERS,
    TABLES,
    LoadsDomain,
    groups,
    loso_summary,
    predict_one,
    start_values,
)
from sim.fidelity.loso import Result

PUBLIC = os.path.join(CALIBRATION, "public")


@pytest.fixture(scope="module")
def domain() -> LoadsDomain:
    return LoadsDomain()


@pytest.fixture(scope="module")
def obs(domain) -> tuple[list[Observation], list[Excluded]]:
    return domain.observations()


def test_every_row_of_the_tables_is_observed_or_excluded_once(obs):
    observed, excluded = obs
    assert observed and excluded
    rows = set()
    for table in TABLES:
        with open(os.path.join(PUBLIC, table), encoding="utf-8", newline="") as f:
            rows |= {(table, r["row_id"]) for r in csv.DictReader(f)}
    seen = [(o.table, o.row_id) for o in observed] + [(e.table, e.row_id) for e in excluded]
    assert sorted(seen) == sorted(rows)  # each once
    assert all(e.why and "\n" not in e.why for e in excluded)
    assert {o.quantity for o in observed} >= {"load_s", "direct_read_gbps", "h2d_pinned_gbps", "copy_gbps"}
    assert all(o.measured > 0 and o.unit in ("s", "GB/s") for o in observed)
    # load times of every kind of loader the tables measure, tensor-parallel ones among them
    kinds = {o.key.how.split(" on ")[0] for o in observed if o.quantity == "load_s"}
    assert kinds >= {"vllm", "fastsafetensors", "runai_streamer", "instanttensor", "llamacpp_mmap", "llamacpp_no_mmap"}
    assert any("8 ranks" in o.key.how for o in observed)


def test_the_start_values_predict_every_row_finite(obs):
    p = start_values()
    for o in obs[0]:
        pr = predict_one(p, o.key)
        assert math.isfinite(pr.value) and pr.value > 0 and pr.mechanism, o.row_id


def test_a_fit_is_deterministic_and_shared(domain, obs):
    train = [o for o in obs[0] if o.source in ("BV-syschar", "NVBW15", "RMS-bench-g5", "FST-amd-perf")]
    a, b = domain.fit(train), domain.fit(train)
    assert a.values == b.values and a.fitted == b.fitted
    assert set(a.values) == set(PARAMETERS) and "pcie_efficiency" in a.fitted
    for name, v in a.values.items():
        assert PARAMETERS[name][1] <= v <= PARAMETERS[name][2], name
    untouched = set(PARAMETERS) - set(a.fitted)  # no training row depends on these: the stated starts
    assert untouched and all(a.values[n] == PARAMETERS[n][0] for n in untouched)


def test_held_out_predictions_are_finite_and_groups_join_sources_of_one_machine(domain, obs):
    observed = obs[0]
    gs = groups(observed)
    assert ["BV-load-fork", "BV-syschar"] in gs and ["HR107", "HR114-ssd-leg", "HR116-stick-leg"] in gs
    assert sorted(s for g in gs for s in g) == sorted({o.source for o in observed})
    held = [o for o in observed if o.source == "ITENSOR-bench"]
    fitted = domain.fit([o for o in observed if o.source in ("RMS-bench-g5", "FST-amd-perf", "NVBW15")])
    preds = domain.predict(fitted, held)
    assert len(preds) == len(held)
    assert all(math.isfinite(p.value) and p.value > 0 for p in preds)
    rows = [Result(o, "ITENSOR-bench", p) for o, p in zip(held, preds, strict=True)]
    summary = loso_summary(rows)  # the full run: sim.fidelity.loads.loso_summary() (minutes)
    assert summary["rows"] == len(held) and list(summary["sources"]) == ["ITENSOR-bench"]
    assert len(summary["worst"]) == min(10, len(held)) and summary["median_abs_error"] >= 0


def test_the_mechanism_names_what_dominates(obs):
    p = start_values()
    by_id = {o.row_id: o for o in obs[0]}
    cold = predict_one(p, by_id["WL0076"].key)  # 6.65 GB off a 23.5 MB/s USB stick
    assert cold.mechanism.startswith("disk")
    tp = predict_one(p, by_id["WL2-0014"].key)  # DeepSeek-R1 from tmpfs on 8 ranks
    assert "8 ranks" in tp.mechanism and "per-tensor" in tp.mechanism
