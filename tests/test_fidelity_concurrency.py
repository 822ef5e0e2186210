"""The serving-under-load domain of the fidelity benchmark: every row of the two concurrency tables either expressed
(calibration/serving_setups.yaml: vLLM on a DGX Spark, run by the MoE engine; vLLM on a Strix Halo, run by the dense
engine) or excluded once with the reason no
engine of the project expresses it; fit and predict work on any list."""

import csv
import math
import os

import pytest
from conftest import ROOT

from sim import ScenarioError
from sim.fidelity.concurrency import TABLES, ConcurrencyDomain
from sim.fidelity.domain import Observation

PUBLIC = os.path.join(ROOT, "calibration", "public")


@pytest.fixture(scope="module")
def domain():
    d = ConcurrencyDomain(PUBLIC)
    return d, *d.observations()


def test_every_row_of_both_tables_is_covered_exactly_once(domain):
    _, obs, excluded = domain
    rows = set()
    for table in TABLES:
        with open(os.path.join(PUBLIC, table), encoding="utf-8", newline="") as fh:
            rows |= {(table, r["row_id"]) for r in csv.DictReader(fh)}
    seen = [(e.table, e.row_id) for e in excluded] + sorted({(o.table, o.row_id) for o in obs})
    assert len(seen) == len(set(seen)) and set(seen) == rows
    assert all(e.why for e in excluded)


def test_each_row_says_why_no_engine_expresses_it(domain):
    _, obs, excluded = domain
    assert {o.source for o in obs} == {"IA-sweep-q36-i1k", "IA-sweep-q36-i512", "LHL-vllm-README"}
    assert {o.quantity for o in obs} == {"output_tok_s", "ttft_mean_ms", "tpot_mean_ms"}
    assert {o.row_id for o in obs if o.source == "LHL-vllm-README"} == {"UC0091", "UC0092", "UC0093"}
    why = {e.row_id: e.why for e in excluded}
    assert "W8A8 and GPTQ" in why["UC0094"] and "llama-server" in why["UC0099"]
    why = {e.source: e.why for e in excluded}
    assert "unified" in why["IA-sweep-q38fn-i512"]
    assert why["LCPP-benches-dgx-spark-batched"].startswith("llama.cpp domain: llama-batched-bench")
    assert "TP=2" in why["C3090-conc-sweep"] and "tensor parallelism" in why["C3090-conc-sweep"]
    assert "TP=3" in why["C3090-845-htsglang"]
    assert why["LCPP20586-4090"].startswith("llama.cpp domain")


def test_fit_and_predict_work_on_any_list(domain):
    d, _, _ = domain
    f = d.fit([])
    assert f == d.fit([]) and d.predict(f, []) == []
    o = Observation("concurrency.csv", "CC9999", "X", "X", "output_tok_s", "tok/s", 100.0)
    (p,) = d.predict(d.fit([o]), [o])
    assert math.isnan(p.value) and "not expressible" in p.mechanism


def test_a_missing_table_is_one_line_naming_it(tmp_path):
    with pytest.raises(ScenarioError, match="concurrency.csv: file not found"):
        ConcurrencyDomain(tmp_path).observations()


def test_vllm_on_a_spark_is_predicted_from_the_engine_defaults_and_the_mtp_prior(domain):
    """Held out, nothing is fitted (no other serving row runs MTP): the MoE engine's package step costs and the
    Strata engine's measured MTP acceptance predict the 8-client row of the 1k-prompt sweep."""
    from sim.fidelity.serving import MTP_ACCEPTANCE_PRIOR

    d, obs, _ = domain
    row = [o for o in obs if o.row_id == "CC0004"]
    fitted = d.fit([])
    assert fitted.mtp_acceptance == MTP_ACCEPTANCE_PRIOR
    got = {o.quantity: p.value / o.measured - 1 for o, p in zip(row, d.predict(fitted, row), strict=True)}
    assert abs(got["output_tok_s"]) < 0.15 and abs(got["tpot_mean_ms"]) < 0.15 and abs(got["ttft_mean_ms"]) < 0.3


def test_strix_halo_vllm_rows_run_on_the_dense_engine_at_their_derived_mean_lengths(domain):
    """The source states 17,809 input tokens over 64 requests and each row's rate and duration: a closed loop of
    278-token prompts and 174-176-token answers, served by the dense batching engine with no parameter fitted."""
    d, obs, _ = domain
    rows = [o for o in obs if o.source == "LHL-vllm-README"]
    assert {(o.key.prompt, o.key.output, o.key.clients) for o in rows} == {(278, 174, 1), (278, 174, 8),
                                                                          (278, 176, 16)}
    preds = d.predict(d.fit([]), rows)
    assert all(math.isfinite(p.value) and "dense engine" in p.mechanism for p in preds)
    tput = {o.key.clients: p.value for o, p in zip(rows, preds, strict=True) if o.quantity == "output_tok_s"}
    assert tput[1] < tput[8] < tput[16]  # batching: more clients, more throughput
