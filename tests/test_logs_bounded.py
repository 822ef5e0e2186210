"""``sim logs`` on hostile input (reproducers of a fuzz campaign): long lines read in linear time, large logs in
bounded memory, no pairing across interleaved sources, binary and endless files refused, impossible values not
taken as data. Each bounded run reports its exit code, seconds and peak MiB."""

from __future__ import annotations

import json
import os

import pytest
from bounded import run_bounded
from click.testing import CliRunner

from sim.cli import main
from sim.formats.engine_logs import read_logs

BASALT = ("[server] s1 done pp=11951/0c 2.2s 5492t/s  tg=1153 490.4t/s acc=73%  ttft=2.2s  end=stop  hit=99.3%  "
          "pcie=4.5%")
PROMPT = ("llama_perf_context_print: prompt eval time =     123.45 ms /    26 tokens (    4.75 ms per token,   210.61 "
          "tokens per second)")
EVAL = ("common_perf_print:        eval time =    4852.86 ms /   511 runs   (    9.50 ms per token,   105.30 tokens "
        "per second)")
VLLM = ("INFO 11-29 12:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation "
        "throughput: 45.2 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.3%, Prefix cache hit "
        "rate: 45.6%")


def report(name: str, o) -> None:
    print(f"{name}: exit {o.code}, {o.seconds:.2f} s, peak {o.peak_mib:.0f} MiB")


@pytest.mark.parametrize("unit", ["prompt eval time = 1.00 ms / 1 tokens ( ", "eval time = 1.00 ms / ",
                                  "SpecDecoding metrics: ", "Avg prompt throughput: 1.0 tokens/s, "])
def test_multi_megabyte_lines_read_in_seconds(tmp_path, unit):
    path = tmp_path / "long.log"
    path.write_text(unit * (3_000_000 // len(unit)) + "\n" + BASALT + "\n")
    o = run_bounded(["logs", str(path)], timeout_s=30, memory_mib=1024)
    report("3 MB line", o)
    assert o.code == 0 and o.seconds < 10, o.stderr
    assert "1 row," in o.stdout and "1 not understood" in o.stdout
    assert "line longer than 65,536 characters" in o.stdout


@pytest.mark.parametrize("unit", ["prompt eval time = 1.00 ms / 1 tokens ( ", "SpecDecoding metrics: ",
                                  "Speculative metrics: Draft acceptance rate: ", "s1 done pp=1/0c 1s tg=1 ",
                                  "strata serve: decode expert cache hit rate: 1% (1 hits / 1 lookups); 1 more read "])
def test_lines_just_under_the_cap_are_read_in_linear_time(unit):
    import time

    line = unit * (65_000 // len(unit))
    start = time.perf_counter()
    read_logs([("t.log", [line, line])])
    assert time.perf_counter() - start < 3.0


def test_large_log_json_csv_and_summary_in_bounded_memory(tmp_path):
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    small.write_text((BASALT + "\n") * 1_000)
    large.write_text((BASALT + "\n") * 25_000)
    peaks = {}
    for fmt in ("--json", "--csv", None):
        args = ["logs", str(large)] + ([fmt] if fmt else [])
        base = run_bounded(["logs", str(small)] + ([fmt] if fmt else []), timeout_s=60, memory_mib=1024)
        o = run_bounded(args, timeout_s=60, memory_mib=1024)
        report(f"25,000 lines {fmt or 'summary'}", o)
        assert o.code == 0 and base.code == 0, o.stderr
        peaks[fmt] = o.peak_mib - base.peak_mib
        if fmt == "--json":
            data = json.loads(o.stdout)
            assert len(data["rows"]) == 25_000 and data["rows"][-1]["line"].endswith(":25000")
        elif fmt == "--csv":
            assert len(o.stdout.splitlines()) == 25_001
        else:
            assert "25,000 lines: 25,000 rows" in o.stdout
    # held in memory per row: the summary's few numbers only (the rows themselves are written as they come)
    assert all(extra < 40 for extra in peaks.values()), peaks


def test_interleaved_sources_are_never_paired(tmp_path):
    lines = [PROMPT, BASALT, VLLM, EVAL, "common_perf_print:       total time =    4944.28 ms /   520 tokens"]
    t = read_logs([("t.log", lines)])
    assert [r["engine"] for r in t.rows] == ["basalt", "vllm"]
    assert t.incomplete == 2 and t.not_understood == 0  # the lone prompt and the lone eval
    # another llama.cpp source's eval right after a prompt, and a blank line between halves: not paired either
    t = read_logs([("t.log", [PROMPT, EVAL, PROMPT, "", PROMPT.replace("llama_perf_context_print:", "")])])
    assert t.rows == [] and t.incomplete == 4
    # a complete block beside a foreign line still pairs; the draft line goes to the block it follows
    eval9 = PROMPT.replace("prompt eval", "eval").replace("26 tokens (    4.75 ms per token,   210.61",
                                                          "9 runs (   13.72 ms per token,    72.90")
    t = read_logs([("t.log", [PROMPT, eval9,
                              "llama_perf_context_print:       total time =    2700.00 ms / 153 tokens", VLLM,
                              "draft acceptance rate = 0.57000 (  171 accepted /   300 generated)"])])
    assert [r["engine"] for r in t.rows] == ["llama.cpp", "vllm"] and t.rows[0]["acceptance"] is None
    assert (t.rows[0]["prompt_tokens"], t.rows[0]["output_tokens"]) == (26, 9)


def test_binary_and_non_regular_files_are_refused(tmp_path):
    blob = tmp_path / "blob.log"
    blob.write_bytes(b"INFO ok\n" + bytes(range(256)) * 4)
    bad_utf8 = tmp_path / "latin1.log"
    bad_utf8.write_bytes(b"caf\xe9 au lait\n")
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    for path, message in ((blob, "not a text log (binary data at byte 8)"),
                          (bad_utf8, "not a text log (binary data at byte 3)"),
                          ("/dev/zero", "not a regular file (a character device)"),
                          (fifo, "not a regular file (a FIFO)")):
        o = run_bounded(["logs", str(path), "--json"], timeout_s=30, memory_mib=1024)
        report(str(path), o)
        assert o.one_line_error() and message in o.stderr and o.stdout == "", (o.code, o.stderr)
        assert o.seconds < 10


@pytest.mark.parametrize("line, reason", [
    (BASALT.replace("hit=99.3%", "hit=-1%"), "expert_hit_rate -0.01: expected a share from 0 to 1"),
    (BASALT.replace("pcie=4.5%", "pcie=150%"), "pcie_share 1.5: expected a share from 0 to 1"),
    (BASALT.replace(" 2.2s 5492t/s", " -5s 5492t/s"), "prefill_s -5 s: expected a time from 0"),
    (BASALT.replace("hit=99.3%", "hit=1e299%"), "expert_hit_rate 1e+297: expected a share from 0 to 1"),
    (BASALT.replace("hit=99.3%", "hit=1e999%"), "1e999 is not a finite number"),
    (BASALT.replace("490.4t/s", "0t/s"), "decode_tok_s is 0 for 1153 tokens"),
    ("strata serve: decode expert cache hit rate: 190.0% (900 hits / 1000 lookups)", "expected a share from 0 to 1"),
    (VLLM.replace("12.3%", "-12.3%"), "kv_usage -0.123: expected a share from 0 to 1"),
    (VLLM.replace("120.5 tokens/s", "-1 tokens/s"), "prompt_throughput_tok_s -1 tok/s: expected a token rate from 0"),
    ("draft acceptance rate = 1.57000 (  171 accepted /   300 generated)", "acceptance 1.57: expected a share"),
    ("loaded 43.8GiB -16.3s cuda0=28.0GiB", "loaded seconds -16.3"),
])
def test_values_outside_their_range_are_not_data(tmp_path, line, reason):
    t = read_logs([("t.log", [line])])
    assert t.rows == [] and t.facts == [] and t.not_understood == 1
    assert reason in t.examples[0][3], t.examples
    log = tmp_path / "bad.log"
    log.write_text(line + "\n" + BASALT + "\n")
    # what `sim logs --json` makes of it (in process: nothing here is about time or memory, and a child costs 1 s)
    o = CliRunner().invoke(main, ["logs", str(log), "--json"])
    data = json.loads(o.stdout)
    assert o.exit_code == 0 and len(data["rows"]) == 1 and data["not_understood"] == 1
    assert reason in data["examples"][0]["reason"]
