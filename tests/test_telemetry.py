"""One per-request telemetry schema: the stored columns, the records, the engines' sums and the requests table all come
from it, one name per quantity, and a quantity is defined the same way everywhere (undefined where its denominator
is zero or the request was not served)."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
from conftest import ROOT

import sim
from sim.moe.decode_batch import FIELDS
from sim.serving.served import RequestRecord, ServedRequests
from sim.serving.telemetry import DERIVED, QUANTITIES, STEP_SUMS, STORED, SUM_NAMES, TABLE

GEN3 = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
DENSE = os.path.join(ROOT, "scenarios", "a100_llama2_7b.yaml")


def test_one_name_per_quantity_and_the_table_holds_each_once():
    names = [q.name for q in STORED + DERIVED]
    assert len(names) == len(set(names)) == len(QUANTITIES)
    assert sorted(TABLE) == sorted(names) and len(TABLE) == len(set(TABLE))
    assert [f.name for f in dataclasses.fields(RequestRecord)] == [q.name for q in STORED]
    assert set(SUM_NAMES) <= set(FIELDS)  # what the vectorised decode returns covers every engine sum
    assert all(q.unit or q.kind == "str" or q.name in ("request", "client") for q in QUANTITIES.values())


def test_every_engine_writes_the_same_columns_and_requests_csv_is_the_schema(tmp_path):
    for path in (GEN3, DENSE):
        run = sim.load(path, {"serve.requests": 30}).run(seed=1)
        assert set(run.served.columns) == {q.name for q in STORED}
        frame = run.requests
        assert list(frame.columns) == list(TABLE)
        rows = list(run.result.serving.requests.table_rows())
        assert list(rows[0]) == list(TABLE) and len(rows) == 30


def test_derived_quantities_are_defined_once():
    base = {q.name: (0 if q.kind == "int" else "stop" if q.kind == "str" else 0.0) for q in STORED}
    rec = RequestRecord(**{**base, "lookups": 10, "vram_hits": 9, "routed": 4, "pcie_reads": 1, "output_tokens": 20,
                           "decode_s": 0.5, "sent_s": 1.0, "end_s": 3.0})
    assert (rec.hit_rate, rec.pcie_share, rec.decode_tok_s, rec.e2e_s) == (0.9, 0.25, 40.0, 2.0)
    dense_like = RequestRecord(**{**base, "output_tokens": 20, "decode_s": 0.5})
    assert math.isnan(dense_like.hit_rate) and math.isnan(dense_like.pcie_share)  # no lookups: no hit rate
    rejected = RequestRecord(**{**base, "end": "rejected", "lookups": 10, "vram_hits": 9})
    assert math.isnan(rejected.hit_rate) and math.isnan(rejected.decode_tok_s)
    cols = ServedRequests.from_records([rec, dense_like, rejected])
    for name in ("hit_rate", "pcie_share", "decode_tok_s"):  # the columns say what the records say
        expect = [getattr(r, name) for r in (rec, dense_like, rejected)]
        np.testing.assert_array_equal(getattr(cols, name), expect)
    assert [q.name for q in STEP_SUMS if q.kind == "float"] == ["decode_s", "compute_s", "stall_s", "eager_s",
                                                                 "host_s"]
