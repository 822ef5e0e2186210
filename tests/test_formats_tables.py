"""The typed readers of measured tables in sim.formats: a good file gives typed records, each kind of bad cell the
one-line error it gave when calibration read the cells itself."""

from __future__ import annotations

import csv
import dataclasses
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.errors import ScenarioError
from sim.formats.llama_bench_tables import BenchTableRow, read_bench_table
from sim.formats.load_times import QUANTITIES, LoadRate, LoadTime, read_load_rates, read_load_times
from sim.formats.measured_cells import read_buckets, read_quantities
from sim.formats.measured_tables import NumberRow, read_numbers, read_provenance
from sim.formats.quantities import BANDWIDTH_GBPS
from sim.formats.request_tables import RequestRow, is_request_table, read_request_table
from sim.formats.routing_stats import RoutingStatistic, bounded_number, read_routing_table, whole_number

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAL = os.path.join(ROOT, "calibration")


def _error(reader, *args, **kwargs) -> str:
    with pytest.raises(ScenarioError) as exc:
        reader(*args, **kwargs)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def _changed(tmp_path, name: str, old: str, new: str) -> str:
    """A copy of calibration/<name> with the first ``old`` replaced by ``new``."""
    text = open(os.path.join(CAL, name), encoding="utf-8").read()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return str(path)


def _typed(record, types: dict[str, tuple]) -> None:
    for f in dataclasses.fields(record):
        if f.name in types:
            assert isinstance(getattr(record, f.name), types[f.name]), (f.name, getattr(record, f.name))


def test_routing_table_gives_typed_statistics():
    stats = read_routing_table(os.path.join(CAL, "routing_public.csv"))
    assert all(isinstance(s, RoutingStatistic) for s in stats)
    for s in stats:
        _typed(s, {"layers": (int,), "experts": (int,), "top_k": (int,), "capacity": (int,), "distances": (tuple,)})
        assert s.role in ("fit", "check") and s.top_k <= s.experts
        if s.statistic.endswith("_range"):
            assert isinstance(s.value, tuple) and s.value[0] <= s.value[1]
        else:
            assert isinstance(s.value, float) and math.isfinite(s.value)
    kinds = {s.statistic for s in stats}
    assert {"lru_hit_rate", "overlap", "overlap_d", "reuse_median", "top1_range", "entropy_range"} <= kinds
    assert any(s.approximate for s in stats if s.statistic == "overlap_d")
    assert all(s.unit == "tokens" for s in stats if s.statistic.startswith("reuse"))


@pytest.mark.parametrize("old, new, message", [
    (",48,128,8,", ",48,x,8,", "row EC0001.n_experts: 'x': expected a whole number from 1 to 999,999"),
    (",48,128,8,", ",48,128,0,", "row EC0001.top_k: 0: expected a whole number from 1 to 999,999"),
    (",48,128,8,", ",48,4,8,", "row EC0001.top_k: more than n_experts"),
    (",6.2,42.25,", ",6.2,142.25,", "row EC0001.hit_rate_pct: 142.25: expected a number from 0 to 100"),
    (",check\n", ",maybe\n", "row EC0002.role: 'maybe': expected fit or check"),
])
def test_routing_table_bad_cells_say_so_in_one_line(tmp_path, old, new, message):
    path = _changed(tmp_path, "routing_public.csv", old, new)
    assert _error(read_routing_table, path) == f"{path}: {message}"


def test_routing_table_refuses_a_table_of_no_rows_and_a_missing_column(tmp_path):
    path = tmp_path / "r.csv"
    header = open(os.path.join(CAL, "routing_public.csv"), encoding="utf-8").read().split("\nEC0001")[0]
    path.write_text(header + "\n", encoding="utf-8")
    assert _error(read_routing_table, str(path)) == f"{path}: no rows"
    path.write_text(header.replace(",top_k,", ",topk,") + "\n", encoding="utf-8")
    assert _error(read_routing_table, str(path)) == f"{path}: top_k: a column of the routing table (the columns " \
        "of expert_cache.csv)"


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=12))
def test_routing_cells_are_a_number_in_range_or_one_line(text):
    for read, args in ((whole_number, ()), (bounded_number, (0, 1))):
        try:
            value = read(text, "r.csv", "row E1.x", *args)
        except ScenarioError as exc:
            assert str(exc).startswith("r.csv: row E1.x: ") and "\n" not in str(exc)
        else:
            assert (0 < value < 10**6) if read is whole_number else (0 <= value <= 1)


def test_load_times_give_typed_rows(tmp_path):
    rows = read_load_times(os.path.join(CAL, "public_loads.csv"))
    assert rows and all(isinstance(r, LoadTime) for r in rows)
    for r in rows:
        assert r.quantity in QUANTITIES and r.role in ("fit", "check") and r.cache in ("cold", "warm")
        assert isinstance(r.measured, float) and isinstance(r.parameters, tuple)
        assert (r.file_gb is not None) if r.quantity == "start_s" else True
        assert (r.request_kib is not None) if r.quantity == "direct_read_gbps" else True
    assert [r.line for r in rows] == list(range(1, len(rows) + 1))
    assert len({r.row_id for r in rows}) == len(rows)


def test_load_time_bad_cells_say_so_in_one_line(tmp_path):
    table = os.path.join(CAL, "public_loads.csv")
    first = read_load_times(table)[0]
    path = tmp_path / "public_loads.csv"
    text = open(table, encoding="utf-8").read()
    path.write_text(text.replace(f",{first.quantity},", ",speed,", 1), encoding="utf-8")
    assert _error(read_load_times, str(path)) == f"{path}: row 1.quantity: 'speed': expected one of " \
        f"{', '.join(QUANTITIES)}"
    path.write_text("row_id,machine\nr1,m\n", encoding="utf-8")
    assert _error(read_load_times, str(path)) == f"{path}: expected columns row_id, machine, quantity, measured, " \
        "role (and disk, loader, request_kib, file_gb, gpu_gb, cache, parameters); missing ['quantity', 'measured', " \
        "'role']"
    path.write_text("row_id,machine,quantity,measured,role,parameters\nr1,m,copy_gbps,1e9,fit,a.b\n",
                    encoding="utf-8")
    assert _error(read_load_times, str(path)) == f"{path}: row 1.measured: {BANDWIDTH_GBPS.problem(1e9)}"
    path.write_text("row_id,machine,quantity,measured,role\nr1,m,copy_gbps,3,fit\n", encoding="utf-8")
    assert _error(read_load_times, str(path)) == f"{path}: row 1.parameters: blank: a fit row names the " \
        "parameters it pins"


def test_load_rates_give_typed_rows(tmp_path):
    rows = read_load_rates(os.path.join(CAL, "loading_stages.csv"))
    assert rows and all(isinstance(r, LoadRate) for r in rows)
    assert all(isinstance(r.cold_gbps, float) and isinstance(r.hot_gbps, float) for r in rows)
    path = tmp_path / "l.csv"
    path.write_text("machine,cold_gbps,hot_gbps\nm,fast,2\n", encoding="utf-8")
    assert _error(read_load_rates, str(path)) == f"{path}: row 1.cold_gbps: bad value 'fast': expected " \
        f"{BANDWIDTH_GBPS.expected()}"
    path.write_text("machine,cold_gbps\n", encoding="utf-8")
    assert _error(read_load_rates, str(path)) == f"{path}: expected columns machine, cold_gbps, hot_gbps (and " \
        "optionally link_gbps, file_gb) with at least one row; missing rows"


def test_request_tables_give_typed_rows(tmp_path):
    path = tmp_path / "req.csv"
    path.write_text("# measured\nprompt_tokens,cached_tokens,output_tokens,decode_tok_s,hit_rate,engine\n"
                    "100,20,10,35.5,0.9,vllm\n50,,5,n/a,,\n", encoding="utf-8")
    assert is_request_table(str(path))
    first, second = read_request_table(str(path))
    assert isinstance(first, RequestRow) and first.line == 1
    assert (first.prompt_tokens, first.cached_tokens, first.decode_tok_s, first.expert_hit_rate, first.engine) == \
        (100.0, 20.0, 35.5, 0.9, "vllm")
    assert (second.cached_tokens, second.decode_tok_s, second.expert_hit_rate, second.engine) == (None, None, None, "")
    path.write_text("prompt_tokens,output_tokens,pcie_share\n100,10,1.5\n", encoding="utf-8")
    assert _error(read_request_table, str(path)) == f"{path}: row 1.pcie_share: 1.5 : expected a share from 0 to " \
        "1".replace(" : ", ": ")


def test_public_llama_bench_tables_give_typed_rows(tmp_path):
    rows = read_bench_table(os.path.join(CAL, "public", "offload_sweeps.csv"))
    assert rows and all(isinstance(r, BenchTableRow) for r in rows)
    for r in rows:
        _typed(r, {"pp_tok_s": (float, type(None)), "tg_tok_s": (float, type(None)), "n_prompt": (int, type(None)),
                   "ngl": (int, type(None)), "engine": (str,), "notes": (str,)})
    assert any(r.tg_tok_s is not None for r in rows)
    first = rows[0]
    column = "tg_tok_s" if first.tg_tok_s is not None else "pp_tok_s"
    with open(os.path.join(CAL, "public", "offload_sweeps.csv"), encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    table[1][table[0].index(column)] = "1e12"
    os.makedirs(tmp_path / "public")
    with open(tmp_path / "public" / "t.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows(table[:2])
    message = _error(read_bench_table, str(tmp_path / "public" / "t.csv"))
    assert message == f"{tmp_path / 'public' / 't.csv'}: row {first.row_id}.{column}: 1,000,000,000,000 tok/s: " \
        "expected a token rate above 0 and at most 10,000,000 tok/s"


def test_read_numbers_gives_numbers_with_their_lines(tmp_path):
    rows = read_numbers(os.path.join(CAL, "loading_stages.csv"), {"cold_gbps": None, "file_gb": None},
                        text=("machine",), required=("machine", "cold_gbps"), what="a loading table")
    assert rows and all(isinstance(r, NumberRow) for r in rows)
    assert [r.line for r in rows] == list(range(1, len(rows) + 1))
    assert all(isinstance(r.numbers["cold_gbps"], float) and r.text["machine"] for r in rows)
    path = tmp_path / "t.csv"
    path.write_text("machine,cold_gbps\nm,-3\n", encoding="utf-8")
    assert _error(read_numbers, str(path), {"cold_gbps": None}) == f"{path}: row 1.cold_gbps: bad value '-3': " \
        "expected a finite positive number"
    assert _error(read_numbers, str(path), {"cold_gbps": BANDWIDTH_GBPS}) == f"{path}: row 1.cold_gbps: " \
        f"{BANDWIDTH_GBPS.problem(-3)}"
    assert _error(read_numbers, str(path), {}, required=("hot_gbps",), what="a loading table") == \
        f"{path}: header.hot_gbps: missing column hot_gbps (a loading table); the header has machine, cold_gbps"
    assert read_provenance(os.path.join(CAL, "loading_stages.csv"))


def test_quantities_and_buckets_tables(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("quantity,value\nslots,35-44\nslots,3\n", encoding="utf-8")
    assert _error(read_quantities, str(path)) == f"{path}: row 2.quantity: 'slots' appears twice"
    path.write_text("quantity,value\nslots,35-44\n", encoding="utf-8")
    assert read_quantities(str(path))["slots"].value == "35-44"
    path.write_text("bucket_by,low_pct,high_pct,decode_tok_s\npcie_spill,0,,40\nhit_rate,90,95,35.5\n",
                    encoding="utf-8")
    a, b = read_buckets(str(path))
    assert (a.by, a.low_pct, a.high_pct, a.decode_tok_s) == ("pcie_spill", 0.0, None, 40.0)
    assert (b.line, b.high_pct) == (2, 95.0)
    path.write_text("bucket_by,low_pct,high_pct,decode_tok_s\nhit_rate,95,90,35\n", encoding="utf-8")
    assert _error(read_buckets, str(path)) == f"{path}: row 1.high_pct: bad value 90: expected more than low_pct " \
        "(95) (an inverted or empty bucket; 0 and 0: requests of exactly zero)"
    path.write_text("bucket_by,low_pct,high_pct,decode_tok_s\nspeed,0,5,35\n", encoding="utf-8")
    assert _error(read_buckets, str(path)) == f"{path}: row 1.bucket_by: bad value 'speed': expected pcie_spill or " \
        "hit_rate"
