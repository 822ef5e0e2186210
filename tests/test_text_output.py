"""The human text of ``sim run``, ``sim breakeven`` and ``sim validate``: every line within 120 columns, one unit per
quantity, plurals that agree with their numbers (sim.core.text, sim.report and the engines' report modules)."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

import pytest
from click.testing import CliRunner
from conftest import ROOT

import sim
from sim.cli import main
from sim.core.text import WIDTH, fmt_time, plural, table, time_unit, wrap
from sim.report import validate_text

SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")))
GEN3 = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
CONCURRENCY = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")
DENSE = os.path.join(ROOT, "scenarios", "a100_llama2_7b.yaml")
NOUNS = "requests|clients|runs|rows|drafts|tokens|jobs|draws|cells|sequences|iterations|preemptions|sessions|turns|" \
    "slots|experts"
ONE_PLURAL = re.compile(rf"(?<![\d.,])1 (?:[\w-]+ )?(?:{NOUNS})\b")


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_plural_agrees_with_the_number():
    assert plural(1, "request") == "1 request"
    assert plural(0, "request") == "0 requests"
    assert plural(2, "closed-loop client") == "2 closed-loop clients"
    assert plural(10_000, "row") == "10,000 rows"
    assert plural(1.0, "run", fmt=".0f") == "1 run"
    assert plural(1.5, "request", fmt=".1f") == "1.5 requests"
    assert plural(1, "batch", "batches") == "1 batch" and plural(3, "batch", "batches") == "3 batches"


def test_time_unit_is_one_for_a_group():
    assert time_unit(0.06, 0.07) == (1e3, "ms")
    assert time_unit(0.3, 1.2) == (1.0, "s")
    assert time_unit(None, float("nan")) == (1.0, "s")
    f, unit = time_unit(0.0603, 0.0004)
    assert fmt_time(0.0603, f, unit) == "60 ms" and fmt_time(0.0004, f, unit) == "0.4 ms"
    assert fmt_time(631.38, 1.0, "s") == "631.38 s" and fmt_time(None, 1.0, "s") == "-"


def test_wrap_keeps_the_words_and_the_width():
    line = "  workload: open loop, poisson arrivals at 1/s, 10,000 requests of lengths from " \
        "scenarios/traces/arxiv_summarization_lengths.csv, at most 4,096 tokens; into the batch while fewer than " \
        "max_num_seqs run, unbounded FIFO"
    parts = wrap(line, 80)
    assert len(parts) > 1 and all(len(p) <= 80 for p in parts)
    assert " ".join(p.strip() for p in parts).split() == line.split()
    assert all(p.startswith("      ") for p in parts[1:])  # indented 4 more than the line
    assert wrap("short", 80) == ["short"]
    assert wrap("x" * 130) == ["x" * 130]  # one word longer than the width stays whole


def test_table_aligns_columns_and_multiline_cells():
    lines = table([["a", "1.5"], ["long\nname", "22"]], [["what", "rate"], ["", "tok/s"]], "lr")
    assert lines == ["  what   rate", "        tok/s", "  a       1.5", "  long     22", "  name"]


@pytest.mark.parametrize("path", SCENARIOS, ids=os.path.basename)
def test_sim_run_text_of_every_shipped_scenario_fits_in_120_columns(path):
    r = CliRunner().invoke(main, ["run", path], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert widest(r.stdout) <= WIDTH, max(r.stdout.splitlines(), key=len)
    assert not ONE_PLURAL.search(r.stdout), ONE_PLURAL.search(r.stdout)
    assert " 0 drafts" not in r.stdout
    served = [line for line in r.stdout.splitlines() if line.startswith("  TTFT")]
    for line in served:  # TTFT and queue wait in one unit
        assert len(set(re.findall(r"\d (ms|s)\b", line))) == 1, line
    if "VRAM" in r.stdout:  # in GiB; a served engine's line names it per GPU, llama-bench's table per column
        assert "MiB used" not in r.stdout and ("VRAM per GPU (GiB)" in r.stdout or "| VRAM GiB |" in r.stdout)


def test_breakeven_text_fits_and_counts_jobs():
    r = CliRunner().invoke(main, ["breakeven", os.path.join(ROOT, "scenarios", "home_lab.yaml"), "--model", "9B",
                                  "--machine", "mining_box", "--machine", "rtx4090_box"], catch_exceptions=False)
    assert r.exit_code == 0 and widest(r.stdout) <= WIDTH
    assert re.search(r"\d+ simulated jobs\)", r.stdout) and "generated tokens" in r.stdout


def test_one_request_one_client_one_slot_read_in_the_singular():
    text = sim.load(GEN3, {"serve.requests": 1}).run(seed=0).text
    assert "1 request served, " in text and "1 request completed" in text and "tokens on average" not in text
    assert "1 closed-loop client (" in text and "1 decode slot (" in text and "experts each" not in text
    assert not ONE_PLURAL.search(text), ONE_PLURAL.search(text)
    assert "TTFT mean" in text and "TTFT median" not in text  # TTFT once, in one unit
    assert widest(text) <= WIDTH


def test_closed_loop_runs_and_clients_agree_with_their_numbers():
    scn = sim.load(CONCURRENCY, ["serve.workload.clients=1", "serve.requests=4", "serve.workload.runs=2"])
    text = scn.run(seed=0).text
    assert "1 closed-loop client (think 0 s), 4 requests in 2 runs of" in text
    text = scn.set({"serve.workload.clients": 3, "serve.workload.runs": 1, "serve.requests": 3}).run(seed=0).text
    assert "3 closed-loop clients (think 0 s), 3 requests of" in text and " in 1 run" not in text


def test_no_drafts_means_no_speculative_decoding():
    base = sim.load(GEN3, {"serve.requests": 2})
    none = base.set("models.moe125b.moe.draft.tokens", 0).run(seed=0).text
    assert "no speculative decoding" in none and "drafts at" not in none and "0.0% acceptance" not in none
    one = base.set("models.moe125b.moe.draft.tokens", 1).run(seed=0).text
    assert "1 draft at 63.7% acceptance" in one


@pytest.mark.parametrize("path, limits", [
    (DENSE, "max_num_seqs 128, max_num_batched_tokens 512"),
    (os.path.join(ROOT, "scenarios", "dgx_spark_vllm_qwen3_6.yaml"), "max_num_seqs 24, max_num_batched_tokens 32,768"),
], ids=["dense", "moe batching"])
def test_a_batching_engine_reads_as_a_batch_not_as_decode_slots(path, limits):
    """Its limits (max_num_seqs, the token budget), running and queued sequences (mean, peak), the KV pool (GiB,
    tokens) and its use, preemptions and swaps; never decode slots, which it has none of."""
    run = sim.load(path, {"serve.requests": 200}).run(seed=0)
    text, m = run.text, run.metrics
    assert f"  batch limits: {limits} (tokens an iteration)\n" in text
    assert (f"  running sequences (the batch): mean {m['running_mean']:.1f}, peak {m['running_peak']:,.0f}; "
            f"queued requests: mean {m['queued_mean']:.1f}, peak {m['queued_peak']:,.0f}\n") in text
    assert (f"  KV pool {m['kv_pool_gib']:.2f} GiB ({m['kv_pool_tokens']:,.0f} tokens): use mean "
            f"{m['kv_mean_share']:.1%}, peak {m['kv_peak_share']:.1%}; {int(m['kv_preemptions'])} preemption") in text
    assert re.search(r"\d+ preemptions?, \d+ swaps?\n", text)
    assert "decode slot" not in text and "admission: into the batch while fewer than max_num_seqs run" in text
    assert 1 <= m["running_peak"] <= int(limits.split()[1].rstrip(",")) and m["running_mean"] <= m["running_peak"]
    assert widest(text) <= WIDTH


def test_slots_taking_turns_keep_their_decode_slots():
    text = sim.load(CONCURRENCY, {"serve.requests": 80}).run(seed=0).text
    assert "admission: 1 decode slot (" in text and "batch limits" not in text and "running sequences" not in text


def test_dense_text_is_in_one_unit_per_quantity_and_fits():
    text = sim.load(DENSE, {"serve.requests": 1}).run(seed=0).text
    assert "us per token" not in text and "ms per token" in text  # the parts of an iteration in ms
    assert "1 request served" in text and "1 request completed" in text and widest(text) <= WIDTH
    assert "MiB" not in text


@dataclass
class FakeCell:
    table: str
    cell: str
    measured: float
    simulated: float
    tolerance: float
    kind: str = "rate"
    info: str = ""
    lo: float | None = None
    hi: float | None = None
    error: float = 0.0
    status: str = "ok"


def test_validate_text_one_unit_per_column_and_120_columns():
    cells = [FakeCell("a_table.csv", "round1_slots", 19530, 19523, 0.01, error=-0.0004),
             FakeCell("a_table.csv", "round1_coverage", 0.235, 0.2354, 0.005, kind="share", error=0.0004),
             FakeCell("b_table.csv", "a very long cell name " * 5, 0.85, 0.8408, 0.02, error=-0.011),
             FakeCell("b_table.csv", "600 decode_tok_s_values", 39.5, 39.18, 0.25, kind="range", lo=35, hi=44),
             FakeCell("b_table.csv", "bench_prefill", 5418, 7035, 0.15, info="not claimed: " + "why " * 40,
                      error=0.299, status="info"),
             FakeCell("c_table.csv", "ttft_s", 0.16, 0.5, 0.2, error=2.125, status="OUTSIDE")]
    text = validate_text(cells, {"notes.md": "text: checked by a test " * 6})
    lines = text.splitlines()
    assert widest(text) <= WIDTH, max(lines, key=len)
    assert lines[0].split() == ["status", "cell", "measured", "simulated", "error", "tol.", "error", "tol."]
    assert lines[1].split() == ["%", "%", "pts", "pts"]
    rows = [line for line in lines if line.lstrip().startswith(("ok ", "info ", "OUTSIDE "))]
    assert len(rows) == len(cells) and not any("%" in r or "pts" in r for r in rows)  # units in the header only
    share = next(line for line in lines if "round1_coverage" in line)
    rate = next(line for line in lines if "round1_slots" in line)
    assert share.split()[-2:] == ["+0.0", "0.5"] and share.index("+0.0") > rate.index("-0.0")
    assert "19,530" in rate and "e+" not in text and "35-44" in text
    assert any(line.strip().startswith("note: not claimed") for line in lines)
    assert "a_table.csv:" in lines and "not checked:" in lines
    assert lines[-1] == "6 cells: 4 ok, 1 outside, 1 reported only"
    assert validate_text(cells[:1], {}).splitlines()[-1] == "1 cell: 1 ok, 0 outside, 0 reported only"
