"""Engine log parsers (sim.formats.engine_logs): the shipped real lines, each format's variants, and garbage."""

from __future__ import annotations

import os

import pytest
from conftest import CALIBRATION
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.formats.engine_logs import ROW_FIELDS, read_logs


def parse(*lines: str):
    return read_logs([("t.log", list(lines))])


def test_basalt_log_parses_completely_with_the_values_in_its_lines():
    path = os.path.join(CALIBRATION, "logs", "basalt_serve_sample.log")
    t = read_logs([(path, open(path, encoding="utf-8").read().splitlines())])
    assert t.not_understood == 0 and len(t.rows) == 12 and t.incomplete == 0
    first, cached = t.rows[0], t.rows[7]
    assert (first["prompt_tokens"], first["cached_tokens"], first["prefill_s"], first["prefill_tok_s"]) == (
        11951, 0, 2.2, 5492.0)
    assert (first["output_tokens"], first["decode_tok_s"], first["acceptance"], first["ttft_s"]) == (
        1153, 490.4, 0.73, 2.2)
    assert (first["end_reason"], first["expert_hit_rate"], first["pcie_share"]) == ("stop", 0.993, 0.045)
    assert first["decode_s"] == pytest.approx(1153 / 490.4)
    # the rate is not printed when almost all of the prompt was cached: derived from the new tokens
    assert (cached["prompt_tokens"], cached["cached_tokens"], cached["prefill_s"]) == (122575, 122548, 0.1)
    assert cached["prefill_tok_s"] == pytest.approx(27 / 0.1)
    loaded = next(f for f in t.facts if f["kind"] == "loaded")
    assert (loaded["gib"], loaded["seconds"], loaded["cuda0_gib"], loaded["ram_gib"], loaded["cuda1-copy_gib"],
            loaded["cuda2-copy_gib"]) == (43.8, 16.3, 28.0, 15.7, 10.7, 5.0)
    assert next(f for f in t.facts if f["kind"] == "auto") | {} == {
        "engine": "basalt", "line": f"{path}:2", "kind": "auto", "resident_gb": 27.2, "pool": 15}


def test_strata_log_parses_completely_with_the_values_in_its_lines():
    path = os.path.join(CALIBRATION, "logs", "strata_sample.log")
    t = read_logs([(path, open(path, encoding="utf-8").read().splitlines())])
    assert t.not_understood == 0 and len(t.rows) == 1 and t.incomplete == 0
    r = t.rows[0]
    assert (r["prompt_tokens"], r["cached_tokens"], r["prefill_s"], r["output_tokens"], r["decode_s"]) == (
        26, 0, 0.043, 192, 1.367)
    assert (r["decode_tok_s"], r["expert_hit_rate"], r["pcie_share"]) == (140.5, 0.863, 0.0231)
    slots = next(f for f in t.facts if f["kind"] == "expert_cache")
    assert (slots["free_gib"], slots["reserve_mib"], slots["head_mib"], slots["slots"]) == (8.31, 700, 184, 5784)
    assert next(f for f in t.facts if f["kind"] == "pcie_probe")["gbps"] == 13.9


BASALT = ("[server] s1 done pp=11951/0c 2.2s 5492t/s  tg=1153 490.4t/s acc=73%  ttft=2.2s  end=stop  hit=99.3%  "
          "pcie=4.5%")


def test_basalt_variants_odd_spacing_two_on_a_line_progress_and_truncation():
    odd = "s2   done pp = 100/20c   1.5s tg=10 50.0t/s acc=50% ttft=1.6s end=length hit=97%"
    t = parse(odd, BASALT + " " + BASALT.replace("[server] ", ""), "[server] s1 read 4096/11951", BASALT[:60])
    assert len(t.rows) == 3 and t.not_understood == 1  # the truncated line is counted, not guessed at
    assert t.rows[0]["end_reason"] == "length" and t.rows[0]["pcie_share"] is None
    assert t.rows[0]["prefill_tok_s"] == pytest.approx(80 / 1.5)


def test_strata_summary_needs_both_lines():
    prompt = ("strata serve: prompt 26 tokens = 10 reused + 16 read in 40 ms, 100 generated in 500 ms (200.0 tok/s), "
              "drafts accepted ...")
    hit = ("strata serve: decode expert cache hit rate: 90.0% (900 hits / 1000 lookups); 5 more read by the GPU over "
           "PCIe or from another GPU (0.50% of all 1000 routed)")
    t = parse(prompt, hit, prompt, prompt, hit, hit)
    assert len(t.rows) == 2 and t.incomplete == 2
    assert t.rows[0]["cached_tokens"] == 10 and t.rows[0]["prefill_tok_s"] == pytest.approx(16 / 0.04)


def test_llama_cpp_timing_blocks():
    block = [
        "llama_perf_context_print:        load time =    1234.56 ms",
        "llama_perf_context_print: prompt eval time =     123.45 ms /    26 tokens (    4.75 ms per token,   210.61 "
        "tokens per second)",
        "llama_perf_context_print:        eval time =    2540.00 ms /   127 runs   (   20.00 ms per token,    50.00 "
        "tokens per second)",
        "llama_perf_context_print:       total time =    2700.00 ms /   153 tokens",
    ]
    server = [
        "slot print_timings: id  0 | task 12 | ",
        "prompt eval time =      35.10 ms /    12 tokens (    2.93 ms per token,   341.88 tokens per second)",
        "       eval time =     812.40 ms /    64 tokens (   12.69 ms per token,    78.78 tokens per second)",
        "      total time =     847.50 ms /    76 tokens",
        "draft acceptance rate = 0.57000 (  171 accepted /   300 generated)",
    ]
    t = parse(*block, *server)
    assert len(t.rows) == 2, t.rows
    a, b = t.rows
    assert (a["prompt_tokens"], a["prefill_s"], a["prefill_tok_s"]) == (26, 0.12345, 210.61)
    assert (a["output_tokens"], a["decode_s"], a["decode_tok_s"]) == (127, 2.54, 50.0)
    assert (b["prompt_tokens"], b["output_tokens"], b["decode_tok_s"]) == (12, 64, 78.78)
    assert b["acceptance"] == 0.57 and a["acceptance"] is None  # the draft line follows its block's total
    assert t.not_understood == 0


def test_llama_server_generations_and_locales():
    """Newest llama-server (prefix and timestamp on every line), the 2024-2026 form, the pre-2024 LOG_INFO form,
    common_perf_print with 'peval', a decimal comma, ANSI colours (formats from the llama.cpp sources)."""
    newest = [
        "318.00.524.338 I slot print_timing: id  0 | task 409 | prompt eval time =    6265.20 ms /  4113 tokens (    "
        "1.52 ms per token,   656.48 tokens per second)",
        "318.00.524.341 I slot print_timing: id  0 | task 409 |        eval time =   24270.43 ms /   784 tokens (   "
        "30.96 ms per token,    32.30 tokens per second)",
        "318.00.524.342 I slot print_timing: id  0 | task 409 |       total time =   30535.63 ms /  4897 tokens",
        "318.00.524.344 I slot print_timing: id  0 | task 409 | draft acceptance = 0.70833 (  459 accepted /   648 "
        "generated), mean len =  2.42",
    ]
    legacy = [
        'INFO [           print_timings] prompt eval time     =      15.62 ms /    12 tokens (    1.30 ms per token,'
        '   768.49 tokens per second) | tid="1399" timestamp=1723569622 id_slot=0 id_task=0',
        'INFO [           print_timings] generation eval time =    3194.22 ms /   783 runs   (    4.08 ms per token,'
        '   245.13 tokens per second) | tid="1399" timestamp=1723569622 id_slot=0 id_task=0',
        'INFO [           print_timings]           total time =    3209.84 ms | tid="1399" t_total=3209.839',
    ]
    common = [
        "\x1b[32mcommon_perf_print:      peval time =      88,24 ms /     9 tokens (    9,80 ms per token,   102,00 "
        "tokens per second)\x1b[0m",
        "common_perf_print:        eval time =    4852.86 ms /   511 runs   (    9.50 ms per token,   105.30 tokens per"
        " second)",
        "common_perf_print: unaccounted time =       3.18 ms /   0.1 %      (total - sampling - peval - eval) / "
        "(total)",
        "common_perf_print:       total time =    4944.28 ms /   520 tokens",
        "llama_print_timings:       total time = 25431.49 ms",
    ]
    t = parse(*newest, *legacy, *common)
    assert t.not_understood == 0, t.examples
    a, b, c = t.rows
    assert (a["prompt_tokens"], a["prefill_tok_s"], a["output_tokens"], a["decode_tok_s"], a["acceptance"]) == (
        4113, 656.48, 784, 32.3, 0.70833)
    assert (b["prompt_tokens"], b["output_tokens"], b["decode_tok_s"]) == (12, 783, 245.13)
    assert (c["prompt_tokens"], c["prefill_s"], c["prefill_tok_s"], c["output_tokens"]) == (9, 0.08824, 102.0, 511)


def test_vllm_statistics_lines_v0_and_v1():
    v1 = ("INFO 11-29 12:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation "
          "throughput: 45.2 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.3%, Prefix cache hit "
          "rate: 45.6%")
    v0 = ("INFO 05-01 10:00:00 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.8 "
          "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.5%, CPU KV cache usage: "
          "0.0%.")
    t = parse(v1, v0)
    assert t.not_understood == 0 and len(t.rows) == 2
    a, b = t.rows
    assert (a["prompt_throughput_tok_s"], a["generation_throughput_tok_s"], a["running"], a["waiting"]) == (
        120.5, 45.2, 3, 1)
    assert a["kv_usage"] == pytest.approx(0.123) and a["prefix_hit_rate"] == pytest.approx(0.456)
    assert (b["running"], b["waiting"], b["prefix_hit_rate"]) == (1, 0, None)
    assert b["kv_usage"] == pytest.approx(0.005)


def test_vllm_variants_prefixes_extra_fields_prefix_and_spec_lines():
    lines = [
        "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, Preemptions: 2, GPU KV cache "
        "usage: 95.9%, Prefix cache hit rate: 0.0%, External prefix cache hit rate: 50.0%, MM cache hit rate: 7.0%  ",
        "INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.0 "
        "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: "
        "0.0%",
        "INFO 05-25 06:50:29 [metrics.py:502] Prefix cache hit rate: GPU: 12.50%, CPU: 90.00%",
        "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
        "0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, "
        "Number of emitted tokens: 10616.",
        "(APIServer pid=1) INFO 08-14 11:31:25 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 4.00, "
        "Accepted throughput: 187.08 tokens/s, Drafted throughput: 187.18 tokens/s, Accepted: 1871 tokens, Drafted: "
        "1872 tokens, Per-position acceptance rate: 1.000, 1.000, 0.998, Avg Draft acceptance rate: 99.9%",
    ]
    t = parse(*lines)
    assert t.not_understood == 0 and len(t.rows) == 4
    a, b, s0, s1 = t.rows
    assert (a["running"], a["waiting"], a["generation_throughput_tok_s"]) == (18, 43, 1055.3)
    assert a["kv_usage"] == pytest.approx(0.959) and a["prefix_hit_rate"] == 0.0  # not the external or MM rate
    assert (b["waiting"], b["prefix_hit_rate"]) == (3, 0.125)  # v0: from the line after
    assert s0["acceptance"] == pytest.approx(0.642) and s1["acceptance"] == pytest.approx(0.999)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.text(max_size=200) | st.sampled_from([BASALT, BASALT[:80], "prompt eval time = 1e999 ms / 3 "
                                                                  "tokens", "eval time = nan ms / 0 runs",
                                                                  "strata serve: decode expert cache hit rate: 1e400% "
                                                                  "(1 hits / 0 lookups)"]), max_size=12))
def test_any_input_is_read_without_raising(lines):
    t = parse(*lines)
    assert t.lines == len(lines) and t.not_understood <= len(lines)
    for row in t.rows:
        assert set(row) == set(ROW_FIELDS)


def test_cli_logs_summary_csv_and_json(tmp_path):
    import json

    from click.testing import CliRunner

    from sim.cli import main

    log = tmp_path / "mixed.log"
    log.write_text(BASALT + "\nnot a log line\n\x07\xff garbage\n")
    r = CliRunner().invoke(main, ["logs", str(log)])
    assert r.exit_code == 0 and "1 row," in r.output and "2 not understood" in r.output
    r = CliRunner().invoke(main, ["logs", str(log), "--json"])
    data = json.loads(r.output)
    assert data["rows"][0]["decode_tok_s"] == 490.4 and data["not_understood"] == 2
    r = CliRunner().invoke(main, ["logs", str(log), "--csv"])
    assert r.output.splitlines()[0].split(",") == list(ROW_FIELDS)
    r = CliRunner().invoke(main, ["logs", str(tmp_path / "missing.log")])
    assert r.exit_code == 2 and "missing.log: file not found" in r.output


def test_entries_run_together_and_odd_spacing_in_every_format():
    llama = ("prompt  eval time = 100.00 ms / 10 tokens (10.00 ms per token, 100.00 tokens per second) eval time = "
             "500.00 ms / 50 runs (10.00 ms per token, 100.00 tokens per second) total time = 600.00 ms / 60 tokens "
             "prompt\teval time = 200.00 ms / 20 tokens eval time = 800.00 ms / 80 runs total time = 1000.00 ms")
    strata = ("strata serve: prompt 30 tokens = 0 reused + 30 read in 50 ms, 40 generated in 2000 ms (20.0 tok/s) "
              "strata serve: decode expert cache hit rate: 85.0% (850 hits / 1000 lookups)")
    vllm = ("Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 "
            "reqs Avg prompt throughput: 3.0 tokens/s, Avg generation throughput: 4.0 tokens/s, Running: 5 reqs")
    t = parse(llama, strata, vllm)
    assert t.not_understood == 0 and t.incomplete == 0
    a, b, s, v1, v2 = t.rows
    assert (a["prompt_tokens"], a["output_tokens"], b["prompt_tokens"], b["output_tokens"]) == (10, 50, 20, 80)
    assert b["prefill_tok_s"] == pytest.approx(100.0) and b["decode_tok_s"] == pytest.approx(100.0)  # from n / ms
    assert (s["output_tokens"], s["expert_hit_rate"]) == (40, 0.85)
    assert (v1["running"], v2["running"], v2["generation_throughput_tok_s"]) == (1, 5, 4.0)


def test_pathological_digit_runs_read_quickly():
    import time

    start = time.perf_counter()
    parse("Avg prompt throughput: " + "9" * 20000, "strata serve: prompt " + "1" * 20000 + " tokens")
    assert time.perf_counter() - start < 1.0
