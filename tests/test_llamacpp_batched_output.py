"""llama-batched-bench output: a real excerpt (tests/data/llamacpp/batched_bench_dgx_spark.md, from llama.cpp's
benches/dgx-spark.md) gives the numbers it prints, synthetic tables and jsonl give every check a row must pass, rows
printed as the tool prints them read back, and any text gives records, skipped lines or bad lines, never an exception
(but the size limits). The llama-bench reader leaves batched-bench's rows alone."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.errors import ScenarioError
from sim.formats import batched_bench as batched_output
from sim.formats import llama_bench as bench_output
from sim.formats.batched_bench import BatchedRuns, read_batched_output
from sim.formats.llama_bench import read_bench_output
from sim.formats.quantities import TOKENS_PER_S

DATA = os.path.join(os.path.dirname(__file__), "data", "llamacpp")
HEADER = "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
RULE = "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"


def read(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as handle:
        return handle.read()


def accounted(text: str, runs: BatchedRuns) -> None:
    """No line is both skipped and bad, nor skipped or bad and a record's; every line number is in the text."""
    skipped, bad = set(runs.skipped), {b.line for b in runs.bad}
    records = {r.line for r in runs.records}
    n_lines = len(text.split("\n"))
    assert len(skipped) == len(runs.skipped) and len(records) == len(runs.records)
    assert not skipped & bad and not skipped & records and not bad & records
    assert all(1 <= line <= n_lines for line in skipped | bad | records)
    for line in skipped | bad:
        assert text.split("\n")[line - 1].strip(), "a blank line is never counted"


def consistent(r) -> None:
    """What every record satisfies, whatever text it came from."""
    assert r.b >= 1 and r.pp >= 0 and r.tg >= 0 and r.n_kv in (r.b * (r.pp + r.tg), r.pp + r.b * r.tg)
    for seconds in (r.t_pp_s, r.t_tg_s, r.t_s):
        assert math.isfinite(seconds) and seconds >= 0
    for speed in (r.s_pp_tok_s, r.s_tg_tok_s, r.s_tok_s):
        assert speed is None or (math.isfinite(speed) and speed >= 0)
    assert r.n_kv_max is None or r.n_kv <= r.n_kv_max


# the real excerpt ---------------------------------------------------------------------------------------------------

def test_dgx_spark_excerpt():
    text = read("batched_bench_dgx_spark.md")
    runs = read_batched_output(text, "dgx")
    accounted(text, runs)
    assert runs.format == "batched-bench" and not runs.bad and len(runs.records) == 21
    first = runs.records[0]  # |   512 |     32 |    1 |    544 |    0.390 |  1311.72 |    0.395 |    81.11 | ...
    assert (first.line, first.pp, first.tg, first.b, first.n_kv) == (13, 512, 32, 1, 544)
    assert (first.t_pp_s, first.s_pp_tok_s, first.t_tg_s, first.s_tg_tok_s, first.t_s, first.s_tok_s) == (
        0.390, 1311.72, 0.395, 81.11, 0.785, 693.12)
    # the main: line before the table gives the run's settings
    assert (first.n_kv_max, first.n_batch, first.n_ubatch, first.flash_attn, first.is_pp_shared) == (
        270336, 2048, 2048, True, False)
    assert (first.n_gpu_layers, first.n_threads, first.n_threads_batch, first.is_tg_separate) == (-1, 20, 20, None)
    big = runs.records[17]  # |  8192 |     32 |   32 | 263168 |   78.571 |  3336.40 |    3.002 |   341.16 | ...
    assert (big.pp, big.b, big.n_kv, big.t_pp_s, big.s_tg_tok_s, big.s_tok_s) == (8192, 32, 263168, 78.571, 341.16,
                                                                                   3226.19)
    assert [r.line for r in runs.records[-3:]] == [57, 58, 59]  # the 120b model's table, under its own main: line
    assert runs.records[-1].t_pp_s == 149.598 and runs.records[-1].n_kv_max == 270336
    # the llama-bench table, its build line, headings and prose are other lines
    assert {1, 2, 4, 6, 9, 37, 39, 40, 41, 42, 44, 46, 48, 50, 53} <= set(runs.skipped)


def test_the_llama_bench_reader_leaves_batched_rows_alone():
    """A batched-bench table has every sweep-bench column; it is not read as sweep-bench steps (whose S_TG = TG / T_TG
    would make every row with B > 1 a bad line)."""
    text = read("batched_bench_dgx_spark.md")
    bench = read_bench_output(text, "dgx")
    assert bench.bad == [] and [r.test for r in bench.records] == ["pp2048", "tg32", "pp2048 @ d4096", "tg32 @ d4096"]
    assert {r.line for r in read_batched_output(text, "dgx").records} <= set(bench.skipped)
    jsonl = read("synthetic_batched.jsonl")
    assert read_bench_output(jsonl, "jsonl").records == [] and read_bench_output(jsonl, "jsonl").bad == []


# synthetic samples ----------------------------------------------------------------------------------------------------

def test_synthetic_table_checks():
    text = read("synthetic_batched.md")
    runs = read_batched_output(text, "md")
    accounted(text, runs)
    assert [(b.line, b.reason) for b in runs.bad] == [
        (12, "S_TG t/s 500 is not B*TG / T_TG s = 250.00"),
        (13, "N_KV 2048 is not B*(PP+TG) = 2560 nor PP+B*TG = 768 (-pps)"),
        (22, "N_KV 2048 is above n_kv_max = 1024 (the tool skips such a test)"),
        (23, "T_PP s is not a finite non-negative time: '-0.100'"),
        (24, "T s 3 is not T_PP s + T_TG s = 2.688"),
        (25, "9 cells under a header of 10")]
    assert runs.skipped == [1, 2, 3, 5, 15, 16]  # comment, command, log lines, the main: lines
    shared = runs.records[1]  # -pps: N_KV = PP + B*TG, S_PP = PP / T_PP
    assert (shared.b, shared.n_kv, shared.s_pp_tok_s, shared.s_tg_tok_s, shared.is_pp_shared) == (4, 512, 1000.0,
                                                                                                  160.0, True)
    assert (shared.n_threads, shared.n_threads_batch, shared.is_tg_separate, shared.flash_attn) == (8, 16, False, True)
    no_tg = runs.records[3]  # -ntg 0: S_TG printed -nan
    assert (no_tg.line, no_tg.tg, no_tg.t_tg_s, no_tg.s_tg_tok_s, no_tg.s_tok_s) == (20, 0, 0.0, None, 2000.0)
    assert (no_tg.flash_attn, no_tg.is_pp_shared, no_tg.n_kv_max, no_tg.is_tg_separate) == ("auto", False, 1024, None)
    assert [r.line for r in runs.records] == [9, 10, 11, 20, 21, 26, 28]
    assert runs.records[-1].n_kv == 160 and runs.records[-1].n_kv_max == 1024  # a headerless row, the run's settings


def test_synthetic_jsonl():
    text = read("synthetic_batched.jsonl")
    runs = read_batched_output(text, "jsonl")
    accounted(text, runs)
    assert runs.format == "batched-bench-jsonl" and runs.skipped == [1, 6]
    assert [(b.line, b.reason) for b in runs.bad[:2]] == [
        (4, "S_TG t/s 150 is not B*TG / T_TG s = 100.00"),
        (5, "batched-bench record without tg, n_kv, t_pp, speed_pp, t_tg, t, speed")]
    assert runs.bad[2].line == 7 and runs.bad[2].reason.startswith("unreadable JSON: ")
    newer, no_tg = runs.records
    # a newer build's -pps without -kvu: N_KV = B*(PP+TG), S_PP = PP / T_PP, S = (PP + B*TG) / T
    assert (newer.b, newer.n_kv, newer.s_pp_tok_s, newer.s_tok_s, newer.is_pp_shared) == (4, 2560, 1000.0, 333.333333,
                                                                                          True)
    assert (newer.n_kv_max, newer.n_batch, newer.n_ubatch, newer.n_gpu_layers, newer.n_threads) == (
        4096, 2048, 512, 99, 8)
    assert no_tg.s_tg_tok_s is None and no_tg.t_tg_s == 0.0  # -nan


def test_a_table_ends_at_a_blank_line_and_extra_columns_are_kept():
    row = "|   128 |     32 |    2 |    320 |    0.100 |  2560.00 |    0.400 |   160.00 |    0.500 |   640.00 |"
    text = "\n".join([HEADER + " VRAM GiB |", RULE + "----------|", row + "    12.50 |", "", row + "    12.50 |"])
    runs = read_batched_output(text, "t")
    assert len(runs.records) == 1 and runs.records[0].extra == {"vram gib": "12.50"}
    assert runs.skipped == [5]  # 11 cells without the header: another table's row


def test_without_a_header_line_the_numbers_tell_whether_the_prompt_was_shared():
    rows = ["|   128 |     32 |    4 |    256 |    0.100 |  1280.00 |    0.400 |   320.00 |    0.500 |   512.00 |",
            "|   128 |     32 |    4 |    640 |    0.100 |  5120.00 |    0.400 |   320.00 |    0.500 |  1280.00 |",
            "|   128 |     32 |    4 |    640 |    0.100 |  1280.00 |    0.400 |   320.00 |    0.500 |   512.00 |"]
    runs = read_batched_output("\n".join([HEADER, RULE, *rows]), "t")
    assert not runs.bad and [r.is_pp_shared for r in runs.records] == [True, False, True]
    with_header = read_batched_output("main: n_kv_max = 4096, is_pp_shared = 0\n" + "\n".join([HEADER, RULE, *rows]),
                                      "t")
    assert [b.line for b in with_header.bad] == [4, 6]  # not shared: N_KV is B*(PP+TG) and S_PP is B*PP / T_PP


def test_a_new_run_ends_the_settings_in_force():
    row = "|   128 |     32 |    1 |    160 |    0.100 |  1280.00 |    0.400 |    80.00 |    0.500 |   320.00 |"
    for boundary in ("## next model", "./llama-batched-bench -m other.gguf", "load_tensors: offloading", "```"):
        runs = read_batched_output("\n".join(["main: n_kv_max = 4096, n_ubatch = 256", HEADER, RULE, row, boundary,
                                              row]), "t")
        assert [(r.n_kv_max, r.n_ubatch) for r in runs.records] == [(4096, 256), (None, None)], boundary


def test_all_of_the_excerpts_at_once():
    names = ["batched_bench_dgx_spark.md", "synthetic_batched.md", "synthetic_batched.jsonl", "sweep_bench_ik357.txt",
             "bench_md_ik520.txt", "synthetic_sweep.md", "synthetic_sweep.jsonl", "other_tables.txt"]
    apart = [(r.pp, r.tg, r.b, r.s_tok_s, r.n_kv_max) for name in names
             for r in read_batched_output(read(name), name).records]
    together = read_batched_output("\n".join(read(name).rstrip("\n") for name in names), "all")
    assert [(r.pp, r.tg, r.b, r.s_tok_s, r.n_kv_max) for r in together.records] == apart
    assert together.format == "mixed" and len(together.bad) == 9  # the synthetic files' bad lines
    for name in ("sweep_bench_ik357.txt", "bench_md_ik520.txt", "synthetic_sweep.md", "other_tables.txt"):
        assert read_batched_output(read(name), name).records == []  # other tables are not batched-bench's


def test_size_limits(monkeypatch):
    with pytest.raises(ScenarioError, match="at most 50 MB") as caught:
        read_batched_output("x" * (batched_output.MAX_BYTES + 1), "huge.txt")
    assert str(caught.value).startswith("huge.txt: ") and "\n" not in str(caught.value)
    monkeypatch.setattr(batched_output, "MAX_LINES", 10)
    assert len(read_batched_output("x\n" * 9 + "x", "ok").skipped) == 10
    with pytest.raises(ScenarioError, match="at most 10 lines"):
        read_batched_output("x\n" * 10 + "x", "big")


# rows as the tool prints them read back -----------------------------------------------------------------------------

F32 = np.float32


def tool_row(pp: int, tg: int, pl: int, us_pp: int, us_tg: int, shared: bool, unified: bool, newer: bool) -> tuple:
    """A row as batched-bench.cpp computes it: float32 seconds from microseconds, float32 speeds; its N_KV and
    S t/s by the older build's formulas or the newer's (-kvu)."""
    t_pp, t_tg = F32(us_pp) / F32(1e6), F32(us_tg) / F32(1e6)
    t = F32(t_pp + t_tg)
    n_kv = (pp + pl * tg if unified or not newer else pl * pp + pl * tg) if shared else pl * (pp + tg)
    with np.errstate(divide="ignore", invalid="ignore"):
        speed_pp = F32(pp if shared else pl * pp) / t_pp
        speed_tg = F32(pl * tg) / t_tg
        speed = F32((pp if shared else pl * pp) + pl * tg) / t if newer else F32(n_kv) / t
    return pp, tg, pl, n_kv, float(t_pp), float(speed_pp), float(t_tg), float(speed_tg), float(t), float(speed)


RUNS = st.tuples(st.integers(0, 20_000), st.integers(0, 2_000), st.integers(1, 256), st.integers(0, 300_000_000),
                 st.integers(0, 300_000_000), st.booleans(), st.booleans(), st.booleans())
ROWS = RUNS.map(lambda run: tool_row(*run))


def impossible(row: tuple) -> bool:
    """A row the tool would print with an infinite speed (tokens over a time of 0 us), a speed beyond any machine
    (sim.formats.quantities.TOKENS_PER_S: 11 tokens in 1 us, read as a bad line) or no tokens at all."""
    pp, tg = row[:2]
    return bool((pp and row[4] == 0) or (tg and row[6] == 0) or pp + tg == 0
                or any(math.isfinite(v) and v > TOKENS_PER_S.hi for v in (row[5], row[7], row[9])))


def printed(row: tuple) -> str:
    """The row as the tool's ``|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |``."""
    pp, tg, pl, n_kv, t_pp, s_pp, t_tg, s_tg, t, s = row
    return f"|{pp:6d} | {tg:6d} | {pl:4d} | {n_kv:6d} | {t_pp:8.3f} | {s_pp:8.2f} | {t_tg:8.3f} | {s_tg:8.2f} | " \
        f"{t:8.3f} | {s:8.2f} |"


@settings(max_examples=300)
@given(RUNS, st.booleans())
def test_rows_the_tool_prints_read_back(run, header):
    row, shared = tool_row(*run), run[5]
    if impossible(row):
        return
    main = f"main: n_kv_max = {row[3] + 1}, n_batch = 2048, is_pp_shared = {int(shared)}"
    lines = [main] * header + [HEADER, RULE, printed(row)]
    runs = read_batched_output("\n".join(lines), "t")
    assert not runs.bad, (lines, runs.bad)
    r = runs.records[0]
    assert (r.pp, r.tg, r.b, r.n_kv) == row[:4] and (r.n_kv_max, r.n_batch) == ((row[3] + 1, 2048) if header else
                                                                                  (None, None))
    assert r.t_pp_s == float(f"{row[4]:.3f}") and r.t_s == float(f"{row[8]:.3f}")
    assert r.s_tg_tok_s == (None if math.isnan(row[7]) else float(f"{row[7]:.2f}"))
    if header or (row[0] and row[2] > 1 and row[3] != row[2] * (row[0] + row[1])):
        assert r.is_pp_shared is shared


@settings(max_examples=200)
@given(RUNS)
def test_jsonl_rows_read_back(run):
    row, shared = tool_row(*run), run[5]
    if impossible(row):
        return
    pp, tg, pl, n_kv, t_pp, s_pp, t_tg, s_tg, t, s = row  # the tool's %d and %f
    line = (f'{{"n_kv_max": {n_kv}, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": {int(shared)}, '
            f'"n_gpu_layers": 99, "n_threads": 8, "n_threads_batch": 8, "pp": {pp}, "tg": {tg}, "pl": {pl}, '
            f'"n_kv": {n_kv}, "t_pp": {t_pp:f}, "speed_pp": {s_pp:f}, "t_tg": {t_tg:f}, "speed_tg": {s_tg:f}, '
            f'"t": {t:f}, "speed": {s:f}}}')
    runs = read_batched_output(line.replace("nan", "-nan"), "t")
    assert not runs.bad, (line, runs.bad)
    r = runs.records[0]
    assert r.flash_attn == "auto" and r.n_kv == row[3] and r.is_pp_shared is shared and r.t_s == float(f"{row[8]:f}")


@settings(max_examples=200)
@given(ROWS, st.integers(4, 9), st.sampled_from([1.5, 0.5, 3.0, 1.1]))
def test_a_changed_value_makes_a_bad_line_never_a_record(row, at, factor):
    """A row of a run without -pps under its main: line (every count reckoned one way) with one time or speed
    changed beyond the rounding of what is printed."""
    pp, tg, pl, n_kv = row[:4]
    if impossible(row) or n_kv != pl * (pp + tg) or min(row[4] if pp else 1, row[6] if tg else 1) < 0.05 or not (
            math.isfinite(row[at]) and row[at] >= 1):
        return
    changed = list(row)
    changed[at] = row[at] * factor
    text = "\n".join([f"main: n_kv_max = {n_kv}, is_pp_shared = 0", HEADER, RULE, printed(tuple(changed))])
    runs = read_batched_output(text, "t")
    assert runs.records == [] and len(runs.bad) == 1


# never an exception ---------------------------------------------------------------------------------------------------

REAL_LINES = [line for name in sorted(os.listdir(DATA)) if name != "README.md" for line in read(name).split("\n")]
PIECES = ["|", " ", "\n", "{", "}", '"pl": 1', '"speed_tg": ', ",", ":", "=", "-", ".", "1", "512", "1e999", "nan",
          "-nan", "inf", "main: n_kv_max = 5", "is_pp_shared = 1", "PP", "N_KV", "S t/s", "'", "\\", "\x00", "\r", ">"]


def mutated_line() -> st.SearchStrategy[str]:
    def mutate(line: str, cuts: list[tuple[int, str]]) -> str:
        for at, piece in cuts:
            at = at % (len(line) + 1)
            line = line[:at] + piece + line[at + 1:]
        return line
    return st.builds(mutate, st.sampled_from(REAL_LINES),
                     st.lists(st.tuples(st.integers(0, 400), st.sampled_from(PIECES) | st.text(max_size=3)),
                              max_size=4))


@settings(max_examples=80)
@given(st.lists(mutated_line() | st.text(max_size=60) | st.sampled_from(REAL_LINES), max_size=25))
def test_any_text_gives_records_skipped_or_bad_lines(lines):
    text = "\n".join(lines)
    runs = read_batched_output(text, "fuzz")
    accounted(text, runs)
    for record in runs.records:
        consistent(record)
    assert all(len(b.reason) <= bench_output.MAX_REASON_CHARS for b in runs.bad)  # the shared cut_reason


@settings(max_examples=40)
@given(st.text(max_size=400))
def test_any_characters(text):
    accounted(text, read_batched_output(text, "fuzz"))


def test_hostile_rows_and_json():
    for text in ("| " + "1 |" * 100_000, "{" + '"pl": [' * 100_000, '{"pl": 1, "speed_tg": 1e999}',
                 HEADER + "\n" + "|" + " 9" * 5000 + " | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 |",
                 HEADER + "\n| 1 | 1 | 1 | 2 | 1e308 | 1e308 | 1e308 | 1e308 | inf | 1 |",
                 '{"pp": 1, "tg": 1, "pl": 1, "n_kv": 2, "t_pp": true, "speed_pp": 1, "t_tg": 1, "speed_tg": 1, '
                 '"t": 2, "speed": 1}'):
        runs = read_batched_output(text, "hostile")
        accounted(text, runs)
        assert runs.records == []
