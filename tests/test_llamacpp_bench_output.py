"""llama-bench / llama-sweep-bench output: real excerpts (tests/data/llamacpp, copied with their `# source:` lines)
give the numbers they print, synthetic csv/json/jsonl/sql/md samples give every field, and any text gives records,
skipped lines or bad lines, never an exception (but the size limits)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.errors import ScenarioError
from sim.formats import llama_bench as bench_output
from sim.formats.llama_bench import BenchRuns, label_for, parse_label, read_bench_output

DATA = os.path.join(os.path.dirname(__file__), "data", "llamacpp")
GIB = 2**30


def read(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as handle:
        return handle.read()


def runs_of(name: str) -> BenchRuns:
    return read_bench_output(read(name), name)


def accounted(text: str, runs: BenchRuns) -> None:
    """No line is both skipped and bad, nor skipped or bad and a record's; every line number is in the text."""
    skipped, bad = set(runs.skipped), {b.line for b in runs.bad}
    records = {r.line for r in runs.records}
    n_lines = len(text.split("\n"))
    assert len(skipped) == len(runs.skipped)
    assert not skipped & bad and not skipped & records and not bad & records
    assert all(1 <= line <= n_lines for line in skipped | bad | records)
    for line in skipped | bad:
        assert text.split("\n")[line - 1].strip(), "a blank line is never counted"


def by_line(runs: BenchRuns, line: int) -> list:
    return [r for r in runs.records if r.line == line]


# real excerpts ---------------------------------------------------------------------------------------------------

def test_sweep_bench_ik357():
    text = read("sweep_bench_ik357.txt")
    runs = read_bench_output(text, "ik357")
    accounted(text, runs)
    assert runs.format == "sweep-bench" and not runs.bad
    assert len(runs.records) == 40  # 20 rows, a pp and a tg record each
    pp, tg = by_line(runs, 3)  # |   512 |    128 |      0 |    3.610 |   141.84 |    5.067 |    25.26 |
    assert (pp.test, pp.n_prompt, pp.n_gen, pp.n_depth, pp.avg_ts, pp.seconds) == ("pp512", 512, 0, 0, 141.84, 3.61)
    assert (tg.test, tg.n_prompt, tg.n_gen, tg.n_depth, tg.avg_ts, tg.seconds) == ("tg128", 0, 128, 0, 25.26, 5.067)
    assert pp.stddev_ts is None and pp.n_threads is None  # no main: line before this table
    pp, tg = by_line(runs, 8)  # |   512 |    128 |  16384 |    0.570 |   897.53 |    2.447 |    52.30 |
    assert (pp.n_depth, pp.avg_ts, tg.n_depth, tg.avg_ts) == (16384, 897.53, 16384, 52.30)
    assert pp.test == "pp512 @ d16384" and tg.test == "tg128 @ d16384"
    # the main: line before the rows gives batch sizes, fa, ngl and threads (threads_batch for pp)
    pp, tg = by_line(runs, 15)  # main: ... n_gpu_layers = 99, n_threads = 16 ...; | 512 | 128 | 0 | 4.165 | 122.94 |
    assert (pp.avg_ts, tg.avg_ts) == (122.94, 10.73)
    assert (pp.n_batch, pp.n_ubatch, pp.flash_attn, pp.n_gpu_layers, pp.n_threads) == (2048, 512, True, 99, 16)
    pp, tg = by_line(runs, 28)  # after "n_gpu_layers = -1, n_threads = 48"
    assert (pp.avg_ts, tg.avg_ts, pp.n_gpu_layers, tg.n_threads) == (15.56, 14.26, -1, 48)
    # load lines end a run's parameters: the last row has its own main: line
    assert by_line(runs, 53)[0].avg_ts == 88.13 and by_line(runs, 53)[0].n_gpu_layers == -1
    assert 1 in runs.skipped and 2 in runs.skipped  # the source comment and the command line


def test_bench_md_ik520_headerless_rows():
    text = read("bench_md_ik520.txt")
    runs = read_bench_output(text, "ik520")
    accounted(text, runs)
    assert runs.format == "md" and not runs.bad and len(runs.records) == 36
    first = by_line(runs, 2)[0]  # | deepseek2 16B IQ4_KS | 15.76 B | 128 | 1 | 3 | 1 | 1 | pp4096 | 344.75 ± 1.52 |
    assert (first.model_type, first.model_n_params, first.test, first.n_prompt) == (
        "deepseek2 16B IQ4_KS", 15_760_000_000, "pp4096", 4096)
    assert (first.avg_ts, first.stddev_ts) == (344.75, 1.52)
    assert first.extra["col3"] == "128"  # ubatch, by column only: the header was not copied
    assert by_line(runs, 18)[0].avg_ts == 1844.95 and by_line(runs, 18)[0].stddev_ts == 9.59  # "±   9.59"
    big = by_line(runs, 20)[0]  # | deepseek2 671B ... | 130.20 GiB | 672.05 B | CUDA | 999 | 18 | ... | pp16 |
    assert big.model_size_bytes == round(130.20 * GIB) and big.model_n_params == 672_050_000_000
    assert (big.backend, big.n_gpu_layers, big.test, big.avg_ts, big.stddev_ts) == ("CUDA", 999, "pp16", 7.81, 0.55)
    assert big.extra["col6"] == "18" and big.extra["col12"] == "23.00/23.00"
    # each table's build footer goes to its own rows
    assert big.extra["build_commit"] == "cdcb324f" and big.extra["build_number"] == "3743"
    assert by_line(runs, 30)[0].extra["build_commit"] == "3f54b497"
    assert by_line(runs, 31)[0].avg_ts == 1.89
    assert 29 in runs.skipped and 39 in runs.skipped  # build lines


def test_bench_md_ik399_commands_and_devices():
    text = read("bench_md_ik399.txt")
    runs = read_bench_output(text, "ik399")
    accounted(text, runs)
    assert len(runs.records) == 20 and not runs.bad
    assert {1, 2, 3, 12, 13, 14, 23, 24, 25, 30} == set(runs.skipped)  # source, commands, Device lines, builds
    ik = by_line(runs, 4)[0]  # | qwen3moe ?B IQ4_XS_R8 - 4.25 bpw | 15.32 GiB | 30.53 B | CUDA | 99 | 0 | 128 | 1 |
    assert (ik.model_type, ik.backend, ik.n_gpu_layers, ik.test, ik.avg_ts, ik.stddev_ts) == (
        "qwen3moe ?B IQ4_XS_R8 - 4.25 bpw", "CUDA", 99, "pp512", 15.72, 0.19)
    assert ik.model_size_bytes == round(15.32 * GIB) and ik.model_n_params == 30_530_000_000
    mainline = by_line(runs, 26)[0]  # ... | CUDA,BLAS | 6 | 0 | exps=CPU | pp512 | 14.29 ± 0.05 |
    # with BLAS llama-bench prints threads, not ngl, after the backend: no ngl is guessed
    assert mainline.backend == "CUDA,BLAS" and mainline.n_gpu_layers is None and mainline.extra["col5"] == "6"
    assert (mainline.test, mainline.avg_ts) == ("pp512", 14.29)
    assert by_line(runs, 29)[0].avg_ts == 2.75 and by_line(runs, 29)[0].stddev_ts == 0.36
    assert mainline.extra["build_commit"] == "15e03282"


def test_bench_md_ik437_trimmed_rows():
    text = read("bench_md_ik437.txt")
    runs = read_bench_output(text, "ik437")
    accounted(text, runs)
    assert len(runs.records) == 12 and not runs.bad and runs.skipped == [1]
    cpu = by_line(runs, 2)[0]  # | qwen3moe 30B IQ4_XS | 15.24 GiB | CPU | pp512 | 480.78 ± 2.11 |
    assert (cpu.backend, cpu.test, cpu.avg_ts, cpu.n_gpu_layers) == ("CPU", "pp512", 480.78, None)
    assert by_line(runs, 3)[0].avg_ts == 29.17  # no closing pipe
    row = by_line(runs, 6)[0]  # | 124.91 GiB | 235.09 B | CUDA | 93 | 52 | 8192 | ... | pp2048 | 192.02 ± 0.06 |
    assert row.model_type is None and row.model_size_bytes == round(124.91 * GIB)
    assert (row.n_gpu_layers, row.test, row.avg_ts) == (93, "pp2048", 192.02)
    assert [r.avg_ts for r in runs.records[-4:]] == [510.65, 454.62, 69.77, 69.15]


def test_bench_md_lcpp_with_ngl_column():
    text = read("bench_md_lcpp15952_12922.txt")
    runs = read_bench_output(text, "lcpp")
    accounted(text, runs)
    assert [(r.test, r.avg_ts, r.stddev_ts) for r in runs.records] == [
        ("pp512", 378.46, 1.43), ("tg128", 11.09, 0.0), ("pp4096", 62.50, 0.09), ("tg4096", 9.51, 0.19)]
    assert runs.records[0].n_gpu_layers == 99 and runs.records[0].extra["build_number"] == "6457"
    assert runs.records[2].backend == "CUDA,RPC" and runs.records[2].n_gpu_layers == 0  # the command says -ngl 0
    assert set(runs.skipped) == {1, 2, 5, 7, 8}


@pytest.mark.parametrize("name", ["other_tables.txt", "stderr_fate_repro.txt"])
def test_other_tables_and_logs_give_no_records(name):
    text = read(name)
    runs = read_bench_output(text, name)
    accounted(text, runs)
    assert runs.records == [] and runs.bad == [] and runs.format == "none"
    assert len(runs.skipped) == sum(1 for line in text.split("\n") if line.strip())  # every line skipped


def test_all_of_the_real_excerpts_at_once():
    """Pasted together, the excerpts give the records they give apart (a table never runs into the next)."""
    names = ["sweep_bench_ik357.txt", "bench_md_ik520.txt", "bench_md_ik399.txt", "bench_md_ik437.txt",
             "bench_md_lcpp15952_12922.txt", "other_tables.txt", "stderr_fate_repro.txt"]
    apart = [(r.test, r.avg_ts, r.n_gpu_layers, r.n_threads) for name in names for r in runs_of(name).records]
    together = read_bench_output("\n".join(read(name).rstrip("\n") for name in names), "all")
    assert [(r.test, r.avg_ts, r.n_gpu_layers, r.n_threads) for r in together.records] == apart
    assert together.format == "mixed" and not together.bad


# synthetic samples of every format --------------------------------------------------------------------------------

def test_csv_older_fields():
    runs = runs_of("synthetic_bench.csv")
    assert runs.format == "csv" and runs.skipped == [1, 4]  # the comment, a progress line between rows
    assert [(b.line, b.reason) for b in runs.bad] == [(8, "avg_ts is not a number: 'fast'")]
    first, _, deep, _ = runs.records
    assert (first.test, first.n_prompt, first.n_gen, first.n_depth, first.avg_ts, first.stddev_ts) == (
        "pp512", 512, 0, 0, 1523.456789, 12.345678)
    assert (first.n_gpu_layers, first.n_cpu_moe, first.n_ubatch, first.n_batch, first.n_threads) == (
        99, 20, 512, 2048, 16)
    assert (first.type_k, first.type_v, first.flash_attn, first.use_mmap, first.backend) == (
        "q8_0", "q8_0", True, True, "CUDA")
    assert (first.model_size_bytes, first.model_n_params) == (18556688384, 30532122624)
    assert first.seconds == pytest.approx(512 / 1523.456789, rel=1e-6)
    assert (deep.test, deep.n_depth, deep.n_cpu_moe) == ("pp512 @ d4096", 4096, 30)
    assert deep.tensor_buft_overrides == "blk\\.(1|2)\\.ffn_.*_exps=CPU;token_embd=CPU"


def test_json_jsonl_sql_newest_fields():
    json_runs, jsonl_runs, sql_runs = (runs_of(f"synthetic_bench.{ext}") for ext in ("json", "jsonl", "sql"))
    assert (json_runs.format, jsonl_runs.format, sql_runs.format) == ("json", "jsonl", "sql")
    assert json_runs.skipped == [] and json_runs.bad == [] and sql_runs.bad == []
    assert [(b.line, b.reason) for b in jsonl_runs.bad] == [(5, "avg_ts is not a number: 'n/a'")]
    assert jsonl_runs.skipped == [1, 3]  # the comment and a warning between records
    for runs in (json_runs, jsonl_runs, sql_runs):
        pp, tg = runs.records
        assert (pp.test, pp.avg_ts, pp.stddev_ts, tg.test, tg.n_depth, tg.avg_ts) == (
            "pp512", 2100.0, 20.5, "tg128 @ d8192", 8192, 80.25)
        assert pp.flash_attn == "auto" and pp.n_gpu_layers == -1 and pp.use_mmap is True  # load_mode mmap
        assert pp.extra["load_mode"] == "mmap" and pp.extra["devices"] == "auto"
    assert [r.line for r in json_runs.records] == [2, 46]


def test_ik_csv_backend_flags_and_test_label():
    runs = runs_of("synthetic_bench_ik.csv")
    pp, tg, gp = runs.records
    assert (pp.backend, pp.use_mmap, pp.tensor_buft_overrides, pp.n_cpu_moe) == ("CUDA", False, "exps=CPU", None)
    assert (tg.test, tg.n_gen, tg.avg_ts) == ("tg128", 128, 2.86)
    # tg128@pp4096: 128 tokens generated after a 4096-token prompt, t/s of the generated tokens
    assert (gp.test, gp.n_prompt, gp.n_gen, gp.n_depth, gp.avg_ts) == ("tg128@pp4096", 0, 128, 4096, 2.5)


def test_md_with_header():
    runs = runs_of("synthetic_bench.md")
    assert runs.format == "md" and len(runs.records) == 4
    assert [(b.line, b.reason) for b in runs.bad] == [
        (12, "t/s is not 'mean ± stddev': 'fast ± slow'"), (13, "n_cpu_moe is not an integer: 'abc'")]
    assert runs.skipped == [1, 2, 3, 4, 8, 15]  # comment, command, device lines, progress line, build
    first, _, deep, _ = runs.records
    assert (first.model_type, first.backend, first.n_gpu_layers, first.n_cpu_moe, first.n_threads) == (
        "qwen3moe 30B.A3B Q4_K - Medium", "CUDA", 99, 20, 8)
    assert (first.n_ubatch, first.flash_attn, first.test, first.avg_ts, first.stddev_ts) == (
        512, True, "pp512", 1234.56, 12.34)
    assert first.tensor_buft_overrides == "blk\\.(1|2)\\.ffn=CPU"  # the regex's | is not a column
    assert first.model_size_bytes == round(17.28 * GIB) and first.model_n_params == 30_530_000_000
    assert (deep.test, deep.n_prompt, deep.n_depth, deep.avg_ts) == ("pp512 @ d4096", 512, 4096, 987.65)
    assert deep.extra["build_commit"] == "0123abcd"


def test_sweep_md_with_header_and_memory_columns():
    runs = runs_of("synthetic_sweep.md")
    assert [(b.line, b.reason) for b in runs.bad] == [(12, "S_PP t/s 900 is not PP / T_PP s = 512.00")]
    assert len(runs.records) == 10
    pp, tg = by_line(runs, 10)
    assert (pp.test, pp.avg_ts, pp.n_threads, tg.test, tg.avg_ts, tg.n_threads) == (
        "pp512 @ d512", 800.0, 16, "tg128 @ d512", 40.0, 8)
    pp, tg = by_line(runs, 19)
    assert (pp.flash_attn, pp.n_gpu_layers, pp.avg_ts) == (False, 0, 250.0)
    assert pp.extra == {"rss_hwm_mib": "14000.0", "vram_delta_mib": "n/a"}


def test_sweep_jsonl():
    runs = runs_of("synthetic_sweep.jsonl")
    assert runs.format == "sweep-bench-jsonl" and not runs.bad and not runs.skipped
    assert [(r.test, r.avg_ts, r.seconds, r.n_threads) for r in runs.records] == [
        ("pp512", 1000.0, 0.512, 16), ("tg128", 50.0, 2.56, 8), ("pp512 @ d512", 800.0, 0.64, 16),
        ("tg128 @ d512", 40.0, 3.2, 8)]
    assert runs.records[2].extra == {"rss_hwm_mib": "14000.0", "vram_delta_mib": "None"}


# pairing, shapes, limits -------------------------------------------------------------------------------------------

HEADER = ("| model | size | params | backend | ngl | n_cpu_moe | test | t/s |\n"
          "| --- | ---: | ---: | --- | --: | --: | --: | --: |")
ROW = "| qwen3moe 30B | 16.49 GiB | 30.53 B | CUDA | 99 | {ncmoe} | pp512 | 510.65 ± 2.49 |"


def test_a_table_ends_at_a_blank_line_and_a_shorter_row_is_not_paired():
    text = "\n".join([HEADER, ROW.format(ncmoe=32), "", "| 16.49 GiB | 30.53 B | CUDA | 0 | 32 | pp512 | 1.0 ± 0.1 |",
                      HEADER, "| qwen3moe 30B | 16.49 GiB | 30.53 B | CUDA | 99 | pp512 | 2.0 ± 0.1 |"])
    runs = read_bench_output(text, "t")
    named, after_blank, shorter = runs.records
    assert named.n_cpu_moe == 32 and named.n_gpu_layers == 99
    assert after_blank.n_cpu_moe is None and after_blank.n_gpu_layers == 0  # read without the header
    assert shorter.n_cpu_moe is None and shorter.n_gpu_layers == 99 and shorter.extra == {}


def test_log_lines_inside_a_table_keep_its_header():
    text = "\n".join([HEADER, "llama-bench: benchmark 1/2: starting", "load_tensors: offloaded 49/49 layers to GPU",
                      ROW.format(ncmoe=7)])
    runs = read_bench_output(text, "t")
    assert runs.records[0].n_cpu_moe == 7 and runs.skipped == [3, 4]


def test_parse_labels():
    assert parse_label("pp512") == (512, 0, 0) and parse_label("tg128 @ d4096") == (0, 128, 4096)
    assert parse_label("pp512+tg128") == (512, 128, 0) and parse_label("tg32@pp8192") == (0, 32, 8192)
    for label in ("", "pp", "pp512+", "+tg5", "512", "pp512 tg128", "ppx"):
        assert parse_label(label) is None


@settings(max_examples=50)
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_test_label_reads_back(n_prompt, n_gen, n_depth):
    if n_prompt or n_gen:
        assert parse_label(label_for(n_prompt, n_gen, n_depth)) == (n_prompt, n_gen, n_depth)


def test_size_limits():
    with pytest.raises(ScenarioError, match="at most 1000000 lines"):
        read_bench_output("\n" * bench_output.MAX_LINES, "big.txt")
    with pytest.raises(ScenarioError, match="at most 50 MB") as caught:
        read_bench_output("x" * (bench_output.MAX_BYTES + 1), "huge.txt")
    assert str(caught.value).startswith("huge.txt: ") and "\n" not in str(caught.value)
    with pytest.raises(ScenarioError, match="at most 50 MB"):
        read_bench_output("é" * (bench_output.MAX_BYTES // 2 + 1), "huge.txt")  # 2 bytes a character


def test_the_line_limit_is_exact(monkeypatch):
    monkeypatch.setattr(bench_output, "MAX_LINES", 10)
    assert len(read_bench_output("x\n" * 9 + "x", "ok").skipped) == 10
    with pytest.raises(ScenarioError, match="at most 10 lines"):
        read_bench_output("x\n" * 10 + "x", "big")


def test_many_lines_are_read_quickly():
    text = "\n".join(["| qwen3moe 30B | 16.49 GiB | 30.53 B | CUDA | 99 | pp512 | 510.65 ± 2.49 |",
                      "load_tensors: a log line"] * 2_000)
    runs = read_bench_output(text, "t")
    assert len(runs.records) == 2_000 and len(runs.skipped) == 2_000


# never an exception ------------------------------------------------------------------------------------------------

REAL_LINES = [line for name in sorted(os.listdir(DATA)) if name != "README.md"
              for line in read(name).split("\n")]
PIECES = ["|", "±", " ", "\n", "{", "}", "[", "]", '"', ",", ":", "=", "-", ".", "1", "512", "1e999", "nan",
          "GiB", " B", "pp512", "tg128", " @ d", "avg_ts", "n_prompt", "main: n_kv_max = 5", "build: ab (1)",
          "INSERT INTO t (a) VALUES ('x');", "CREATE TABLE t (", "'", "\\", "\x00", "\r", ">"]


def mutated_line() -> st.SearchStrategy[str]:
    def mutate(line: str, cuts: list[tuple[int, str]]) -> str:
        for at, piece in cuts:
            at = at % (len(line) + 1)
            line = line[:at] + piece + line[at + 1:]
        return line
    return st.builds(mutate, st.sampled_from(REAL_LINES),
                     st.lists(st.tuples(st.integers(0, 400), st.sampled_from(PIECES) | st.text(max_size=3)),
                              max_size=4))


@settings(max_examples=60)
@given(st.lists(mutated_line() | st.text(max_size=60) | st.sampled_from(REAL_LINES), max_size=25))
def test_any_text_gives_records_skipped_or_bad_lines(lines):
    text = "\n".join(lines)
    runs = read_bench_output(text, "fuzz")
    accounted(text, runs)
    for record in runs.records:
        assert record.avg_ts >= 0 and record.n_prompt >= 0 and record.n_gen >= 0 and record.n_depth >= 0
        assert record.n_prompt + record.n_gen > 0
        assert all(len(b.reason) <= bench_output.MAX_REASON_CHARS for b in runs.bad)


@settings(max_examples=40)
@given(st.text(max_size=400))
def test_any_characters(text):
    accounted(text, read_bench_output(text, "fuzz"))


def test_hostile_json_and_csv():
    deep = "{" + '"avg_ts": [' * 100_000
    for text in (deep, "[{" * 50_000, '{"avg_ts": 1e999, "n_prompt": 1, "n_gen": 0}',
                 '{"avg_ts": 5, "n_prompt": ' + "9" * 5000 + ', "n_gen": 0}', '{"avg_ts": NaN, "test": "pp1"}',
                 "avg_ts,n_prompt\n" + '"' + "x" * 200_000 + '",1', "avg_ts,n_prompt\n\x00,1",
                 "| " + "1 |" * 100_000, "| x | 1e308 TiB | 1 | pp5 | 1 ± 1 |"):
        runs = read_bench_output(text, "hostile")
        accounted(text, runs)
        assert runs.records == []


def test_an_unclosed_create_table_swallows_only_its_column_lines():
    insert = read("synthetic_bench.sql").split("\n")[-2]
    runs = read_bench_output("CREATE TABLE IF NOT EXISTS llama_bench (\n  build_commit TEXT,\n" + insert, "sql")
    assert [r.test for r in runs.records] == ["tg128 @ d8192"] and runs.skipped == [] and runs.bad == []
