"""The typed readers of the public tables sim.fidelity reads (sim.formats.public_routing, public_loads,
public_serving): a good file gives typed records, a bad cell or a missing column one line naming it."""

from __future__ import annotations

import csv
import math
import os

import pytest
from conftest import ROOT

from sim import ScenarioError
from sim.formats.public_loads import WeightLoadRow, one_number, read_weight_loading
from sim.formats.public_routing import COLUMNS, ExpertCacheRow, leading_int, leading_number, read_expert_cache
from sim.formats.public_serving import REQUIRED, ServingSweepRow, read_serving_table

PUBLIC = os.path.join(ROOT, "calibration", "public")


def _write(path, rows: list[dict[str, str]]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


ROUTING = dict.fromkeys(COLUMNS, "") | {
    "row_id": "EC1", "source_id": "S", "setup_id": "X", "model": "M", "n_moe_layers": "48", "n_experts": "128",
    "top_k": "10+1 shared (model)", "cache_slots_per_layer": "S=72", "hit_rate_pct": "~67",
    "metric_name": "overlap vs distance d=1/8-16", "metric_value": "~0.45 / 0.30",
    "workload": "trace: 139 tokens/layer", "notes": "hits=10 misses=20 tensors=3"}


def test_expert_cache_cells_read_as_typed_numbers(tmp_path):
    [r] = read_expert_cache(_write(tmp_path / "expert_cache.csv", [ROUTING]))
    assert isinstance(r, ExpertCacheRow)
    assert (r.n_moe_layers, r.n_experts, r.top_k, r.cache_slots_per_layer, r.cache_slots_total) == (48, 128, 10, None,
                                                                                                    None)
    assert (r.hit_rate_pct, r.hit_rate_approx, r.hit_rate_text) == (67.0, True, "~67")
    assert r.prompt_tokens == 139.0 and r.stats_lookups == (10, 20, 3)
    assert r.distances == (("1", (1,)), ("8-16", (8, 16)))
    assert r.metric_parts == ((0.45, True), (0.30, False)) and r.metric_number == 0.45
    assert leading_number("~10 (uniform 6.2)") == 10.0 and leading_number("n/a") is None
    assert leading_int("16 of 896") == 16 and leading_int("~5159") is None


def test_expert_cache_range_and_statistics_cells(tmp_path):
    row = ROUTING | {"metric_name": "layer-0 distinct experts touched in 300 tokens",
                     "metric_value": "384 of 512; top-64 carry 41% of activations"}
    ranged = ROUTING | {"row_id": "EC2", "metric_name": "top-1 expert share", "metric_value": "3-9%"}
    a, b = read_expert_cache(_write(tmp_path / "expert_cache.csv", [row, ranged]))
    assert a.metric_tokens == 300 and a.distinct_top == (384, 64, 41.0) and a.metric_range is None
    assert b.metric_range == (3.0, 9.0) and math.isnan(read_expert_cache(_write(
        tmp_path / "blank.csv", [ROUTING | {"metric_value": ""}]))[0].metric_number)


@pytest.mark.parametrize(("cell", "value", "words"), [
    ("hit_rate_pct", "150", "row EC1.hit_rate_pct: 150 %: expected a percentage from 0 to 100 %"),
    ("n_experts", "99999999999", "row EC1.n_experts: 99,999,999,999: expected a count from 0 to 1,000,000,000"),
])
def test_expert_cache_number_out_of_range_is_one_line(tmp_path, cell, value, words):
    with pytest.raises(ScenarioError) as exc:
        read_expert_cache(_write(tmp_path / "expert_cache.csv", [ROUTING | {cell: value}]))
    assert words in _one_line(exc)


def test_expert_cache_missing_column_names_it(tmp_path):
    row = {k: v for k, v in ROUTING.items() if k != "top_k"}
    with pytest.raises(ScenarioError, match="top_k: a column of expert_cache.csv"):
        read_expert_cache(_write(tmp_path / "expert_cache.csv", [row]))


SERVING = {"row_id": "CC1", "source_id": "S", "setup_id": "X", "grade": "A", "gpu": "2x RTX 3090 (tp=2)",
           "gpu_count": "2", "engine": "vLLM", "concurrency": "16", "num_requests": "64", "input_tokens": "512",
           "output_tokens": "", "output_tok_s": "1037", "ttft_mean_ms": "272.709", "tpot_mean_ms": "",
           "t_total_s": "1.5"}


def test_serving_rows_read_counts_rates_and_times(tmp_path):
    [r] = read_serving_table(_write(tmp_path / "concurrency.csv", [SERVING]))
    assert isinstance(r, ServingSweepRow)
    assert (r.gpu_count, r.tensor_parallel, r.memory_arch) == (2, "TP=2", "")
    assert (r.concurrency, r.num_requests, r.input_tokens, r.output_tokens) == (16, 64, 512, None)
    assert (r.output_tok_s, r.ttft_mean_ms, r.tpot_mean_ms, r.t_total_s) == (1037.0, 272.709, None, 1.5)
    assert r.cells["engine"] == "vLLM"


@pytest.mark.parametrize(("cell", "value", "words"), [
    ("ttft_mean_ms", "fast", "row CC1.ttft_mean_ms: bad value 'fast': expected a time above 0"),
    ("output_tok_s", "-3", "row CC1.output_tok_s: -3 tok/s: expected a token rate above 0"),
    ("concurrency", "1e12", "row CC1.concurrency: 1,000,000,000,000: expected a number of clients or requests"),
])
def test_serving_bad_cell_is_one_line(tmp_path, cell, value, words):
    with pytest.raises(ScenarioError) as exc:
        read_serving_table(_write(tmp_path / "concurrency.csv", [SERVING | {cell: value}]))
    assert words in _one_line(exc)


def test_serving_missing_column_keeps_its_message(tmp_path):
    row = {k: v for k, v in SERVING.items() if k != "gpu_count"}
    with pytest.raises(ScenarioError, match="gpu_count: a column of the concurrency tables"):
        read_serving_table(_write(tmp_path / "concurrency.csv", [row]))
    assert set(REQUIRED) <= set(SERVING)


LOAD = {"row_id": "WL1", "source_id": "S", "setup_id": "X", "grade": "A", "gpu": "2x NVIDIA GeForce RTX 3090",
        "disk": "nvme", "engine": "vLLM", "model": "M", "model_bytes_gib": "6.0 GB (5.97 GB file)",
        "measurement": "load threads 8 block 64 MB backend=fastsafetensors", "page_cache_state": "cold",
        "transfer_size": "buffer 2147483648 B, chunk 4096 B", "value": "428-464", "unit": "ms"}


def test_weight_loading_rows_read_values_units_and_cells(tmp_path):
    two = LOAD | {"row_id": "WL2", "value": "292 vs 5", "unit": "s"}
    rate = LOAD | {"row_id": "WL3", "value": "1,222", "unit": "MB/s"}
    a, b, c = read_weight_loading(_write(tmp_path / "weight_loading.csv", [LOAD, two, rate]))
    assert isinstance(a, WeightLoadRow)
    assert (a.value, a.measured, a.unit, a.value_text) == (446.0, 446.0 * 1e-3, "ms", "428-464")
    assert (a.model_bytes_gib, a.gpu_ranks, a.chunk_bytes, a.threads, a.block_mb, a.backend) == (
        6.0, 2, 4096, 8, 64, "fastsafetensors")
    assert a.cells["disk"] == "nvme"
    assert b.value is None and b.measured is None
    assert c.value == 1222.0 and c.measured == 1222.0 * 1e-3
    assert one_number("~110") == 110.0 and one_number("") is None


def test_weight_loading_value_out_of_range_is_one_line(tmp_path):
    with pytest.raises(ScenarioError) as exc:
        read_weight_loading(_write(tmp_path / "weight_loading.csv", [LOAD | {"value": "1e9", "unit": "GB/s"}]))
    assert "row WL1.value: 1,000,000,000 GB/s: expected a bandwidth above 0 and at most 100,000 GB/s" in _one_line(exc)


def test_the_shipped_public_tables_read():
    assert len(read_expert_cache(os.path.join(PUBLIC, "expert_cache.csv"))) > 0
    for table in ("concurrency.csv", "unified_memory_concurrency.csv"):
        assert read_serving_table(os.path.join(PUBLIC, table))
    for table in ("weight_loading.csv", "weight_loading_more.csv", "unified_memory_bandwidth.csv"):
        assert all(r.measured is None or r.measured > 0 for r in read_weight_loading(os.path.join(PUBLIC, table)))
