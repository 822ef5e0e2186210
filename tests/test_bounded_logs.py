"""Impossible values read from engine logs and llama-bench outputs (issue 31): a value outside the range its quantity
can take (sim.formats.quantities), or a printed rate that is not its tokens over its time, makes its line one not
understood (engine logs) or an unreadable row (llama-bench, sweep-bench, batched-bench), with the reason; never a
row, never half of a row paired with another line. ``sim fit-offload`` leaves such rows out with a warning (refuses a
file with nothing else), and refuses a public table holding one."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
from bounded import ROOT, run_bounded
from click.testing import CliRunner

from sim.calibration import llamacpp_cases
from sim.cli import main
from sim.core.errors import ScenarioError
from sim.formats import bench_ranges, quantities
from sim.formats import engine_log_values as logs_values
from sim.formats.batched_bench import read_batched_output
from sim.formats.engine_logs import read_logs
from sim.formats.engine_logs_io import check_text_file
from sim.formats.llama_bench import read_bench_output

BASALT = ("[server] s1 done pp=11951/0c 2.2s 5492t/s  tg=1153 490.4t/s acc=73%  ttft=2.2s  end=stop  hit=99.3%  "
          "pcie=4.5%")
STRATA = ("strata serve: prompt 26 tokens = 10 reused + 16 read in 40 ms, 100 generated in 500 ms (200.0 tok/s), "
          "drafts accepted ...")
STRATA_HIT = ("strata serve: decode expert cache hit rate: 90.0% (900 hits / 1000 lookups); 5 more read by the GPU "
              "over PCIe or from another GPU (0.50% of all 1000 routed)")
PROMPT = "prompt eval time =     123.45 ms /    26 tokens (    4.75 ms per token,   210.61 tokens per second)"
EVAL = "       eval time =     810.00 ms /    64 tokens (   12.66 ms per token,    79.01 tokens per second)"
TOTAL = "      total time =     933.45 ms /    90 tokens"
MODEL = "| qwen3moe 30B.A3B Q4_K - Medium | 16.49 GiB | 30.53 B | CUDA | 99 "
MD_HEAD = "| model | size | params | backend | ngl | test | t/s |\n| --- | ---: | ---: | --- | --: | --: | --: |\n"
CSV_HEAD = "model_type,model_size,model_n_params,n_gpu_layers,n_prompt,n_gen,n_depth,avg_ns,avg_ts,stddev_ts\n"
CSV_ROW = "qwen3moe,17704000000,30532122624,99,512,0,0,{ns},{ts},1.5"
GOOD_CSV = dict(ns="336077796", ts="1523.45")


def report(name: str, o) -> None:
    print(f"{name}: exit {o.code}, {o.seconds:.2f} s, peak {o.peak_mib:.0f} MiB")


def bounded(args: list[str]):
    o = run_bounded(args, timeout_s=30, memory_mib=1024)
    report(" ".join(args[:2]), o)
    assert o.seconds < 5 and o.peak_mib < 200, (o.seconds, o.peak_mib)
    return o


def not_understood(line: str, reason: str, *before: str) -> None:
    """``line`` (after ``before``) counted as not understood with ``reason``; no row from it nor paired across it."""
    t = read_logs([("t.log", [*before, line])])
    assert t.rows == [] and t.facts == [] and t.not_understood == 1, (t.rows, t.examples)
    assert t.examples[0][3] and reason in t.examples[0][3], t.examples


# 1. sim logs: engine logs --------------------------------------------------------------------------------------

def test_llama_server_decode_rate_not_its_tokens_over_its_time(tmp_path):
    """64 tokens in 810 ms printed at 1e11 tok/s: not understood, and the prompt line before it is no row."""
    log = tmp_path / "server.log"
    bad = EVAL.replace("79.01 tokens", "100000000000.00 tokens")
    log.write_text("\n".join([PROMPT, bad, TOTAL]) + "\n")
    o = bounded(["logs", str(log), "--json"])
    doc = json.loads(o.stdout)
    assert o.code == 0 and doc["rows"] == [] and doc["not_understood"] == 1 and doc["incomplete"] == 1
    assert doc["examples"][0]["reason"] == "decode_tok_s 100,000,000,000 tok/s: expected a token rate from 0 to " \
        "10,000,000 tok/s"


@pytest.mark.parametrize("line, reason", [
    (EVAL.replace("79.01 tokens", "158.02 tokens"), "decode_tok_s 158.02 tok/s is not 64 tokens / 0.81 s"),
    (EVAL.replace("12.66 ms per", "1.00 ms per"), "ms per token 1 is not 810 ms / 64 tokens"),
    (EVAL.replace("810.00 ms", "0.00 ms").replace("79.01 tokens", "100000000000.00 tokens"),
     "decode_tok_s 100,000,000,000 tok/s: expected a token rate from 0 to 10,000,000 tok/s"),
    ("       eval time =       0.01 ms /    64 tokens", "decode_tok_s 6.4e+06"),  # derived: in range, kept (below)
    ("       eval time =    1000.00 ms / 9999999999 tokens", "output_tokens 9,999,999,999 tokens: expected a token "
     "count from 0 to 1,000,000,000 tokens"),
    (PROMPT.replace("210.61 tokens", "2106.10 tokens"),
     "prefill_tok_s 2,106.1 tok/s is not 26 tokens / 0.12345 s = 210.61 tok/s"),
])
def test_llama_cpp_timing_lines_checked_against_their_parts(line, reason):
    if "0.01 ms" in line:  # 64 tokens in 10 us is 6.4e6 tok/s: impossible-looking but inside the range
        t = read_logs([("t.log", [PROMPT, line, TOTAL])])
        assert len(t.rows) == 1 and t.not_understood == 0
        return
    not_understood(line, reason, *([PROMPT] if "eval time" in line and "prompt" not in line else []))
    t = read_logs([("t.log", [PROMPT, line, TOTAL, PROMPT, EVAL, TOTAL])])
    assert len(t.rows) == 1 and t.rows[0]["decode_tok_s"] == 79.01 and t.rows[0]["line"] == "t.log:4"


def test_one_bad_entry_of_a_line_leaves_nothing_of_the_line():
    """A line with a good eval then an impossible one: nothing of it pairs with the prompt before it."""
    both = EVAL + " " + EVAL.replace("79.01 tokens", "7901.00 tokens")
    t = read_logs([("t.log", [PROMPT, both, TOTAL])])
    assert t.rows == [] and t.not_understood == 1 and "decode_tok_s 7,901 tok/s" in t.examples[0][3]
    draft = "draft acceptance rate = 0.57000 (  171 accepted /   300 generated) " + EVAL.replace("79.01", "7901.00")
    t = read_logs([("t.log", [PROMPT, EVAL, TOTAL, draft])])
    assert len(t.rows) == 1 and t.rows[0]["acceptance"] is None and t.not_understood == 1


@pytest.mark.parametrize("line, reason", [
    (BASALT.replace("pp=11951/0c", "pp=100/200c"), "cached_tokens 200 is more than prompt_tokens 100"),
    (BASALT.replace("5492t/s", "1e300t/s"), "prefill_tok_s 1e+300 tok/s"),
    (BASALT.replace("5492t/s", "9000t/s"), "prefill_tok_s 9,000 tok/s is not 11,951 tokens / 2.2 s"),
    (BASALT.replace("490.4t/s", "1e11t/s"), "decode_tok_s 100,000,000,000 tok/s: expected a token rate"),
    (BASALT.replace("ttft=2.2s", "ttft=1e300s"), "ttft_s 1e+300 s: expected a time from 0 to 10,000,000 s"),
    (BASALT.replace("tg=1153", "tg=99999999999"), "output_tokens 99,999,999,999 tokens"),
])
def test_basalt_impossible_values(line, reason):
    not_understood(line, reason)


@pytest.mark.parametrize("prompt, hit, reason", [
    (STRATA.replace("10 reused", "50 reused"), STRATA_HIT, "cached_tokens 50 is more than prompt_tokens 26"),
    (STRATA.replace("16 read", "60 read"), STRATA_HIT, "60 read is more than prompt_tokens 26"),
    (STRATA.replace("200.0 tok/s", "1e11 tok/s"), STRATA_HIT, "decode_tok_s 100,000,000,000 tok/s"),
    (STRATA.replace("200.0 tok/s", "20.0 tok/s"), STRATA_HIT, "decode_tok_s 20 tok/s is not 100 tokens / 0.5 s"),
    (STRATA, STRATA_HIT.replace("900 hits", "1900 hits"), "1,900 hits are more than 1,000 lookups"),
    (STRATA, STRATA_HIT.replace("90.0%", "50.0%"), "expert_hit_rate 50% is not 900 hits / 1,000 lookups"),
    (STRATA, STRATA_HIT.replace("0.50%", "5.00%"), "pcie_share 5% is not 5 more read / 1,000 routed"),
])
def test_strata_impossible_values(tmp_path, prompt, hit, reason):
    t = read_logs([("t.log", [prompt, hit])])
    assert t.rows == [] and t.not_understood == 1 and reason in t.examples[0][3], t.examples


def test_basalt_and_strata_more_cached_than_prompt_in_sim_logs(tmp_path):
    log = tmp_path / "sb.log"
    log.write_text("\n".join([BASALT.replace("pp=11951/0c", "pp=100/200c"), BASALT,
                              STRATA.replace("10 reused", "50 reused"), STRATA_HIT]) + "\n")
    o = bounded(["logs", str(log)])
    assert o.code == 0 and "4 lines: 1 row," in o.stdout and "2 not understood" in o.stdout, o.stdout
    assert "not understood (cached_tokens 200 is more than prompt_tokens 100)" in o.stdout
    assert "not understood (cached_tokens 50 is more than prompt_tokens 26)" in o.stdout


@pytest.mark.parametrize("line, reason", [
    ("strata generate: PCIe probe: 0.0 GB/s host->device", "gbps 0 GB/s: expected a bandwidth above 0"),
    ("strata generate: PCIe probe: 1e300 GB/s host->device", "gbps 1e+300 GB/s"),
    ("loaded 1e300GiB 16.3s cuda0=28.0GiB", "loaded gib 1e+300 GiB"),
    ("auto resident=27.2GB pool=99999999999", "auto pool 99,999,999,999: expected a count"),
    ("INFO 05-01 [core.py:1] init engine (profile, create kv cache, warmup model) took 1e300 seconds",
     "phase seconds 1e+300 s"),
    ("Avg prompt throughput: 1e300 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs",
     "prompt_throughput_tok_s 1e+300 tok/s"),
    ("Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 99999999999 reqs",
     "running 99,999,999,999: expected a count"),
])
def test_facts_and_statistics_out_of_range(line, reason):
    not_understood(line, reason)


def test_valid_shipped_logs_are_still_read_whole():
    for name, rows in (("basalt_serve_sample.log", 12), ("strata_sample.log", 1)):
        path = os.path.join(ROOT, "calibration", "logs", name)
        with open(path, encoding="utf-8") as fh:
            t = read_logs([(path, fh.read().splitlines())])
        assert t.not_understood == 0 and len(t.rows) == rows


def test_every_field_has_one_quantity_from_the_input_layer():
    from sim.formats.engine_logs import ROW_FIELDS

    numbers = set(ROW_FIELDS) - {"engine", "line", "end_reason"}
    assert numbers <= set(logs_values.FIELDS)
    assert logs_values.FIELDS["decode_tok_s"].hi == quantities.TOKENS_PER_S.hi
    assert logs_values.FIELDS["prompt_tokens"] is quantities.TOKENS
    assert logs_values.FACTS["gbps"] is quantities.BANDWIDTH_GBPS
    assert bench_ranges.RANGES["avg_ts"] is quantities.TOKENS_PER_S
    assert bench_ranges.RANGES["n_prompt"] is quantities.TOKENS
    assert bench_ranges.RANGES["model_size_bytes"] is quantities.SIZE_BYTES
    assert bench_ranges.RANGES["model_n_params"] is quantities.PARAMETERS
    assert bench_ranges.RANGES["seconds"] is quantities.SECONDS
    assert bench_ranges.BATCHED_RANGES["pp"] is quantities.TOKENS
    assert bench_ranges.BATCHED_RANGES["s_tg_tok_s"].hi == 1e7


# 1. sim logs and 3. every llama-bench format ------------------------------------------------------------------

def test_sim_logs_llama_bench_1e300_and_model_size_minus_one(tmp_path):
    md, csv = tmp_path / "bench.md", tmp_path / "bench.csv"
    md.write_text(MD_HEAD + f"{MODEL}| pp512 | 1e300 ± 12.34 |\n{MODEL}| tg128 | 150.12 ± 0.50 |\n")
    csv.write_text(CSV_HEAD + CSV_ROW.format(**GOOD_CSV).replace("17704000000", "-1") + "\n"
                   + CSV_ROW.format(**GOOD_CSV) + "\n")
    o = bounded(["logs", str(md), "--json"])
    doc = json.loads(o.stdout)
    assert o.code == 0 and [r["test"] for r in doc["rows"]] == ["tg128"]
    assert doc["files"][str(md)]["bad"] == [{"line": 3, "reason": "t/s 1e+300 tok/s: expected a token rate above 0 "
                                             "and at most 10,000,000 tok/s"}]
    r = CliRunner().invoke(main, ["logs", str(csv)])
    assert r.exit_code == 0 and "1 tests, 0 other lines, 1 unreadable rows" in r.output
    assert "line 2: model_size -1 bytes: expected a size above 0" in r.output


def md(ts: str = "1523.45 ± 1.00", size: str = "16.49 GiB", params: str = "30.53 B", test: str = "pp512") -> str:
    return MD_HEAD + f"| qwen3moe | {size} | {params} | CUDA | 99 | {test} | {ts} |"


def csv(**cells: str) -> str:
    return CSV_HEAD + CSV_ROW.format(**(GOOD_CSV | cells))


def fields(ts: object = 1523.45, **more: object) -> dict:
    return {"model_type": "qwen3moe", "model_size": 17704000000, "model_n_params": 30532122624, "n_prompt": 512,
            "n_gen": 0, "n_depth": 0, "avg_ns": 336077796, "avg_ts": ts, "stddev_ts": 1.5} | more


def sql(values: dict) -> str:
    def cell(v: object) -> str:
        return f"'{v}'" if isinstance(v, str) else str(v)
    return (f"INSERT INTO llama_bench ({', '.join(values)}) VALUES ({', '.join(cell(v) for v in values.values())});")


SWEEP_HEAD = "|    PP |     TG |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |\n|---|---|---|---|---|---|---|\n"


def sweep(pp: str = "512", t_pp: str = "0.512", s_pp: str = "1000.00", tg: str = "128", n_kv: str = "0") -> str:
    return SWEEP_HEAD + f"| {pp} | {tg} | {n_kv} | {t_pp} | {s_pp} | 2.560 | 50.00 |"


def sweep_json(**more: object) -> str:
    item = {"pp": 512, "tg": 128, "n_kv": 0, "t_pp": 0.512, "speed_pp": 1000.0, "t_tg": 2.56, "speed_tg": 50.0}
    return json.dumps(item | more)


BENCH_CASES = {
    "md 1e300": (md("1e300 ± 1.00"), "t/s 1e+300 tok/s"),
    "md nan": (md("nan ± 1.00"), "t/s is not a number: 'nan'"),
    "md zero": (md("0.00 ± 0.00"), "t/s 0 tok/s: expected a token rate above 0"),
    "md negative": (md("-5.00 ± 1.00"), "t/s is not a finite non-negative number"),
    "md huge stddev": (md("5.00 ± 1e300"), "t/s stddev 1e+300 tok/s"),
    "md zero size": (md(size="0.00 GiB"), "size 0 bytes: expected a size above 0"),
    "md 1e20 size": (md(size="1e20 GiB"), "not a value like"),
    "md 1 PB size": (md(size="2000 TiB"), "size 2.199e+15 bytes: expected a size above 0 and at most 1e+15 bytes"),
    "md zero params": (md(params="0.00 B"), "params 0 parameters"),
    "md 1e15 params": (md(params="1000 T"), "params 1e+15 parameters"),
    "csv 1e300": (csv(ts="1e300"), "avg_ts 1e+300 tok/s"),
    "csv inf": (csv(ts="inf"), "avg_ts is not a number: 'inf'"),
    "csv zero": (csv(ts="0"), "avg_ts 0 tok/s"),
    "csv avg_ns 1e300": (csv(ns="1e300"), "avg_ns / 1e9 1e+291 s: expected a time"),
    "csv avg_ns zero": (csv(ns="0"), "avg_ns / 1e9 0 s: expected a time above 0"),
    "csv model_size -1": (csv().replace("17704000000", "-1"), "model_size -1 bytes"),
    "csv model_size 0": (csv().replace("17704000000", "0"), "model_size 0 bytes"),
    "csv params -1": (csv().replace("30532122624", "-1"), "model_n_params -1 parameters"),
    "csv n_prompt huge": (csv().replace(",512,", ",99999999999,"), "n_prompt 99,999,999,999 tokens: expected a "
                          "token count from 0 to 1,000,000,000 tokens"),
    "json 1e300": ("[\n" + json.dumps(fields(1e300)) + "\n]", "avg_ts 1e+300 tok/s"),
    "json NaN": ("[\n" + json.dumps(fields(float("nan"))) + "\n]", "avg_ts is not a finite non-negative number"),
    "json n_gen huge": ("[\n" + json.dumps(fields(n_prompt=0, n_gen=10**12)) + "\n]", "n_gen 1,000,000,000,000 tokens"),
    "json depth huge": ("[\n" + json.dumps(fields(n_depth=2 * 10**9)) + "\n]", "n_depth 2,000,000,000 tokens"),
    "jsonl 1e300": (json.dumps(fields(1e300)), "avg_ts 1e+300 tok/s"),
    "jsonl size -1": (json.dumps(fields(model_size=-1)), "model_size -1 bytes"),
    "jsonl ubatch huge": (json.dumps(fields(n_ubatch=10**12)), "n_ubatch 1,000,000,000,000 tokens"),
    "sql 1e300": (sql(fields("1e300")), "avg_ts 1e+300 tok/s"),
    "sql size -1": (sql(fields(model_size="-1")), "model_size -1 bytes"),
    "sweep 1e300": (sweep(s_pp="1e300"), "S_PP t/s 1e+300 tok/s"),
    "sweep time 1e300": (sweep(t_pp="1e300", s_pp="0.00"), "T_PP s 1e+300 s"),
    "sweep tokens huge": (sweep(pp="99999999999", t_pp="99999.000", s_pp="1000000.00"), "PP 99,999,999,999 tokens"),
    "sweep n_kv huge": (sweep(n_kv="99999999999"), "N_KV 99,999,999,999 tokens"),
    "sweep jsonl 1e300": (sweep_json(speed_tg=1e300), "S_TG t/s 1e+300 tok/s"),
    "sweep jsonl inf": (sweep_json(t_tg=float("inf")), "T_TG s is not a finite non-negative number"),
}


@pytest.mark.parametrize("case", sorted(BENCH_CASES))
def test_llama_bench_impossible_values_in_every_format(case):
    text, reason = BENCH_CASES[case]
    runs = read_bench_output(text, "t")
    assert runs.records == [] and len(runs.bad) == 1, (runs.records, runs.bad)
    assert reason in runs.bad[0].reason, runs.bad


def test_llama_bench_valid_rows_of_every_format_still_read():
    for text in (md(), csv(), "[\n" + json.dumps(fields()) + "\n]", json.dumps(fields()), sql(fields()), sweep(),
                 sweep_json()):
        runs = read_bench_output(text, "t")
        assert runs.records and not runs.bad, (text, runs.bad)


BATCHED_HEAD = ("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n"
                "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n")
BATCHED_ROW = "|   256 |     64 |    1 |    320 |    0.256 |  1000.00 |    1.280 |    50.00 |    1.536 |   208.33 |"
BATCHED_JSON = {"pp": 512, "tg": 128, "pl": 4, "n_kv": 2560, "t_pp": 0.512, "speed_pp": 4000.0, "t_tg": 2.56,
                "speed_tg": 200.0, "t": 3.072, "speed": 833.333333}


def batched(**cells: str) -> str:
    row = BATCHED_ROW
    for old, new in cells.items():
        row = row.replace(old, new)
    return BATCHED_HEAD + row


BATCHED_CASES = {
    "S_TG 1e300 over 0.000 s": (batched(**{"1.280": "0.000", "50.00": "1e300", "1.536": "0.256"}),
                                "S_TG t/s 1e+300 tok/s: expected a token rate from 0 to 10,000,000 tok/s"),
    "T_TG 1e300": (batched(**{"1.280": "1e300"}), "T_TG s 1e+300 s: expected a time from 0 to 10,000,000 s"),
    "PP huge": (batched(**{"|   256 |": "| 1999999999 |", "|    320 |": "| 2000000063 |"}),
                "PP 1,999,999,999 tokens: expected a token count"),
    "jsonl speed 1e300": (json.dumps(BATCHED_JSON | {"t_tg": 0.0, "speed_tg": 1e300, "t": 0.512}),
                          "S_TG t/s 1e+300 tok/s"),
    "jsonl n_kv_max huge": (json.dumps(BATCHED_JSON | {"n_kv_max": 2 * 10**9}), "n_kv_max 2,000,000,000 tokens"),
    "main: line n_kv_max huge": ("main: n_kv_max = 2000000000, n_batch = 2048\n" + batched(),
                                 "n_kv_max 2,000,000,000 tokens"),
}


@pytest.mark.parametrize("case", sorted(BATCHED_CASES))
def test_batched_bench_impossible_values(case):
    text, reason = BATCHED_CASES[case]
    runs = read_batched_output(text, "t")
    assert len(runs.bad) == 1 and reason in runs.bad[0].reason, runs.bad
    if "main:" not in case:
        assert runs.records == []
    good = read_batched_output(batched(), "t")
    assert len(good.records) == 1 and not good.bad
    assert len(read_batched_output(json.dumps(BATCHED_JSON), "t").records) == 1


def test_sim_logs_a_file_of_bad_rows_only_is_still_a_bench_output(tmp_path):
    path = tmp_path / "bench.md"
    path.write_text(md("1e300 ± 1.00") + "\n")
    r = CliRunner().invoke(main, ["logs", str(path)])
    assert r.exit_code == 0 and "0 tests, 0 other lines, 1 unreadable rows" in r.output
    assert "line 3: t/s 1e+300 tok/s" in r.output


# 2. sim fit-offload --bench and the public tables -----------------------------------------------------------------

def box_scenario(tmp_path) -> str:
    scenario = tmp_path / "box.yaml"
    text = open(os.path.join(ROOT, "scenarios", "llamacpp_3070ti.yaml"), encoding="utf-8").read()
    scenario.write_text(text.replace("../calibration/models/", os.path.join(ROOT, "calibration", "models") + "/"))
    return str(scenario)


FIT_MODEL = "| qwen3moe 30B.A3B Q4_K - Medium | 17.28 GiB | 30.53 B | CUDA | 99 "
FIT_HEAD = ("| model | size | params | backend | ngl | n_cpu_moe | test | t/s |\n"
            "| --- | ---: | ---: | --- | --: | --: | --: | --: |\n")


def test_fit_offload_leaves_an_impossible_row_out_with_a_warning(tmp_path):
    """The reader skips an unreadable row (its contract for every bad row: nan, 'fast', 1e300): the fit says so on
    stderr and fits to the other rows exactly as it would without it."""
    scenario = box_scenario(tmp_path)
    runs, clean = tmp_path / "runs.md", tmp_path / "clean.md"
    rows = [f"{FIT_MODEL}| 33 | pp512 | 160.00 ± 3.00 |", f"{FIT_MODEL}| 40 | tg128 | 28.00 ± 0.50 |"]
    runs.write_text(FIT_HEAD + "\n".join([rows[0], f"{FIT_MODEL}| 33 | tg128 | 1e300 ± 0.50 |", rows[1]]) + "\n")
    clean.write_text(FIT_HEAD + "\n".join(rows) + "\n")
    runner = CliRunner()
    r = runner.invoke(main, ["fit-offload", "--scenario", scenario, "--bench", str(runs), "--out",
                             str(tmp_path / "a.yaml")])
    assert r.exit_code == 0, r.output
    assert f"sim: warning: {runs}: line 4: t/s 1e+300 tok/s: expected a token rate above 0 and at most 10,000,000 " \
           "tok/s (row left out)" in r.stderr
    assert "1e+300" not in r.stdout and "100000000" not in r.stdout
    r = runner.invoke(main, ["fit-offload", "--scenario", scenario, "--bench", str(clean), "--out",
                             str(tmp_path / "b.yaml")])
    assert r.exit_code == 0
    fitted = [open(tmp_path / n, encoding="utf-8").read().split("\n", 1)[1] for n in ("a.yaml", "b.yaml")]
    assert fitted[0].replace(str(runs), "X").split("runs:")[0] == fitted[1].replace(str(clean), "X").split("runs:")[0]


def test_fit_offload_refuses_a_file_of_impossible_rows_only(tmp_path):
    scenario = box_scenario(tmp_path)
    runs = tmp_path / "runs.md"
    runs.write_text(FIT_HEAD + f"{FIT_MODEL}| 33 | tg128 | 1e300 ± 0.50 |\n")
    o = bounded(["fit-offload", "--scenario", scenario, "--bench", str(runs), "--out", str(tmp_path / "a.yaml")])
    assert o.one_line_error() and not (tmp_path / "a.yaml").exists()
    assert o.stderr.strip() == f"sim: error: {runs}: line 3: t/s 1e+300 tok/s: expected a token rate above 0 and at " \
                               "most 10,000,000 tok/s", o.stderr


def public_root(tmp_path, column: str, value: str) -> str:
    """A root whose offload_sweeps.csv is the shipped one's first row with ``column`` set to ``value``."""
    root = tmp_path / "root"
    (root / "calibration" / "public").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, llamacpp_cases.SETUPS), root / llamacpp_cases.SETUPS)
    os.symlink(os.path.join(ROOT, "calibration", "models"), root / "calibration" / "models")
    import csv as csvlib

    with open(os.path.join(ROOT, "calibration", "public", "offload_sweeps.csv"), encoding="utf-8") as fh:
        reader = csvlib.DictReader(fh)
        row = next(r for r in reader if r["tg_tok_s"] and r["n_gen"])
        names = reader.fieldnames
    row[column] = value
    with open(root / "calibration" / "public" / "offload_sweeps.csv", "w", encoding="utf-8", newline="") as fh:
        w = csvlib.DictWriter(fh, names)
        w.writeheader()
        w.writerow(row)
    return str(root)


@pytest.mark.parametrize("column, value, reason", [
    ("tg_tok_s", "1e300", "1e+300 tok/s: expected a token rate above 0"),
    ("tg_tok_s", "-3", "-3 tok/s: expected a token rate above 0"),
    ("n_gen", "99999999999", "99,999,999,999 tokens: expected a token count"),
    ("vram_used_gib", "1e300", "1e+300 GiB: expected a size above 0"),
])
def test_public_tables_refuse_impossible_values(tmp_path, column, value, reason):
    root = public_root(tmp_path, column, value)
    with pytest.raises(ScenarioError) as caught:
        llamacpp_cases.read_cases(root, ("offload_sweeps.csv",))
    text = str(caught.value)
    assert text.startswith(os.path.join(root, "calibration", "public", "offload_sweeps.csv") + ": row ")
    assert f".{column}: " in text and reason in text and "\n" not in text, text


def test_fit_offload_public_table_with_1e300_exits_2(tmp_path):
    root = public_root(tmp_path, "tg_tok_s", "1e300")
    r = CliRunner().invoke(main, ["fit-offload", "--root", root, "--out", str(tmp_path / "out.yaml")])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("sim: error: "), r.output
    assert "offload_sweeps.csv: row " in lines[0] and "1e+300 tok/s" in lines[0]
    assert not (tmp_path / "out.yaml").exists()


# 4. logs_io on the input layer --------------------------------------------------------------------------------------

def test_log_files_are_checked_by_the_input_layer(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    for path, message in ((str(tmp_path / "a\0b.log"), "the file name holds a NUL byte"),
                          (str(tmp_path / "missing.log"), "missing.log: file not found"),
                          (str(tmp_path), "is a directory, expected a text log"),
                          (str(fifo), "not a regular file (a FIFO): expected a text log")):
        with pytest.raises(ScenarioError) as caught:
            check_text_file(path)
        assert message in str(caught.value) and "\n" not in str(caught.value)
    o = bounded(["logs", str(fifo)])
    assert o.one_line_error() and "not a regular file (a FIFO)" in o.stderr


def test_a_multibyte_character_cut_at_the_sniffed_head_is_not_binary(tmp_path):
    from sim.formats import engine_logs_io as logs_io

    path = tmp_path / "utf8.log"
    path.write_bytes(b"x" * (logs_io.SNIFF - 1) + "é".encode() + b"\n" + BASALT.encode() + b"\n")
    check_text_file(str(path))
    path.write_bytes(b"x" * 10 + b"\xff\n")
    with pytest.raises(ScenarioError, match="not a text log \\(binary data at byte 10\\)"):
        check_text_file(str(path))


def test_own_runs_that_do_not_load_are_left_out_with_a_note(monkeypatch):
    """A user's test the simulator cannot load (nan) says nothing about the costs: fit-offload leaves it out with a
    note rather than fitting its capped error."""
    from sim.calibration import own_runs as own

    runs = [own.OwnRun(1, "pp", 512, 0, 160.0, None), own.OwnRun(2, "tg", 128, 999_999, 30.0, None)]
    monkeypatch.setattr(own, "simulate", lambda scn, machine, run, params: 150.0 if run.line == 1 else math.nan)
    kept, notes = own.loadable(None, "box", runs, None)
    assert kept == runs[:1]
    assert notes == ["line 2: tg128 @ d999999: does not load on this machine in the simulator (left out)"]
