"""sim llama of a pasted llama-batched-bench line (its table, --json, --write, rows that cannot load) and sim logs of
llama-batched-bench output (a table, CSV, JSON; mixed with llama-bench's)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.config.yaml_io import parse_yaml
from sim.formats.batched_bench import read_batched_output

QWEN = ["--model", "calibration/models/qwen3-30b-a3b.json", "--quant", "Q4_K_M", "--model-gib", "17.28"]
BOX = ["--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x"]
LINE = ("./build/bin/llama-batched-bench -m Qwen3-30B-A3B-Q4_K_M.gguf -c 16384 -b 2048 -ub 512 -npp 128,256,512 "
        "-ntg 128,256 -npl 1,2,4,8,16,32 -ngl 99 --n-cpu-moe 12 -fa 1")
DGX = "tests/data/llamacpp/batched_bench_dgx_spark.md"


def invoke(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def table_run():
    return invoke("llama", LINE, *QWEN, *BOX)


def test_a_batched_bench_line_prints_the_tools_table(table_run):
    r = table_run
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "llama-batched-bench on box (qwen3_30b_a3b), simulated:"
    assert "main: n_kv_max = 16384, n_batch = 2048, n_ubatch = 512, flash_attn = 1, is_pp_shared = 0" in r.stdout
    header = "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
    assert header in lines
    # what it prints reads back as llama-batched-bench output: 36 tests less the 2 that need more than -c cells
    runs = read_batched_output(r.stdout, "sim llama")
    assert runs.bad == [] and len(runs.records) == 34
    assert [(x.pp, x.tg, x.b) for x in runs.records[:3]] == [(128, 128, 1), (128, 128, 2), (128, 128, 4)]
    assert all(x.n_kv_max == 16384 and x.n_ubatch == 512 and x.is_pp_shared is False for x in runs.records)
    assert "2 tests needing more than -c 16384 KV cells (PP 512 TG 128 B 32, PP 512 TG 256 B 32)" in " ".join(
        line.strip() for line in lines)
    s_tg = {x.b: x.s_tg_tok_s for x in runs.records if (x.pp, x.tg) == (128, 128)}
    assert s_tg[8] > s_tg[1] > 0  # batching raises the generation throughput


def test_json_rows_and_settings():
    r = invoke("llama", LINE.replace("-ngl 99 --n-cpu-moe 12", "-ngl auto -np 4"), *QWEN, *BOX, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["program"] == "llama-batched-bench" and doc["n_kv_max"] == 16384 and doc["is_pp_shared"] is False
    assert len(doc["rows"]) == 34
    assert doc["skipped"] == [{"pp": 512, "tg": 128, "b": 32}, {"pp": 512, "tg": 256, "b": 32}]
    row = doc["rows"][0]
    assert list(row) == ["machine", "pp", "tg", "b", "n_kv", "t_pp_s", "s_pp_tok_s", "t_tg_s", "s_tg_tok_s", "t_s",
                         "s_tok_s", "vram_gib", "error"]
    assert (row["pp"], row["tg"], row["b"], row["n_kv"], row["error"]) == (128, 128, 1, 256, "")
    assert row["s_tg_tok_s"] == pytest.approx(128 / row["t_tg_s"])
    assert doc["settings"]["override_tensor"] and doc["vram_gib"] <= 16  # -ngl auto: the fit moves experts
    assert "-np: llama-batched-bench runs as many sequences as the largest -npl" in r.stderr


def test_rows_that_cannot_load_show_their_error():
    line = LINE.replace("--n-cpu-moe 12 ", "")  # every expert on a 16 GB card: 19 GiB
    r = invoke("llama", line, *QWEN, *BOX)
    assert r.exit_code == 0, r.output
    assert "|   128 |    128 |    1 |    256 |      n/a |      n/a |" in r.stdout
    assert "cannot load: llama.cpp cannot load: CUDA0:" in r.stdout.replace("\n", " ")
    doc = json.loads(invoke("llama", line, *QWEN, *BOX, "--json").stdout)
    assert all(row["error"] and row["t_pp_s"] is None for row in doc["rows"]) and doc["vram_gib"] is None


def test_a_line_without_tests_and_the_notes():
    r = invoke("llama", "llama-batched-bench -m x.gguf -ngl 99 --n-cpu-moe 12 -npl 4 -tgs -kvu", *QWEN, *BOX)
    assert r.exit_code == 0, r.output
    assert read_batched_output(r.stdout, "t").records == []
    for note in ("no -npp / -ntg: llama-batched-bench runs no test", "no -c: n_kv_max 4096",
                 "-tgs: simulated as without it", "kv_unified=True: no effect"):
        assert note in r.stderr, note


def test_write_keeps_the_machine_and_engine(tmp_path):
    out = tmp_path / "batched.yaml"
    r = invoke("llama", LINE, *QWEN, *BOX, "--write", str(out))
    assert r.exit_code == 0, r.output
    assert "not llama-batched-bench's -npp / -ntg / -npl tests" in r.stdout
    raw = parse_yaml(out.read_text())
    assert raw["machines"]["box"]["engine"]["llamacpp"]["ctx_size"] == 16384 and "bench" not in raw
    assert invoke("run", str(out)).exit_code == 0


@pytest.mark.parametrize(("line", "needle"), [
    ("llama-batched-bench -m x.gguf -npl 0", "-npl: expected parallel sequences >= 1"),
    ("llama-batched-bench -m x.gguf -npp 128-512", "-npp: expected an integer, got '128-512'")])
def test_bad_lines_are_one_line_errors(line, needle):
    r = invoke("llama", line, *QWEN, *BOX)
    assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


# sim logs ---------------------------------------------------------------------------------------------------------

def test_logs_reads_batched_bench_and_llama_bench_from_one_file():
    r = invoke("logs", DGX)
    assert r.exit_code == 0, r.output
    assert f"{DGX}: llama-batched-bench output (batched-bench): 21 rows" in r.stdout
    assert f"{DGX}: llama-bench output (md): 4 tests" in r.stdout  # the same file's llama-bench table
    row = "  8192  32  32  263168   78.571   3336.40   3.002    341.16   81.572  3226.19   -1      2048     0"
    assert row in r.stdout
    doc = json.loads(invoke("logs", DGX, "--json").stdout)
    assert len(doc["batched_rows"]) == 21 and len(doc["rows"]) == 4 and doc["files"][DGX]["bad"] == []
    first = doc["batched_rows"][0]
    assert (first["pp"], first["b"], first["s_tg_tok_s"], first["n_kv_max"], first["flash_attn"]) == (
        512, 1, 81.11, 270336, True)
    rows = list(csv.DictReader(io.StringIO(invoke("logs", DGX, "--csv").stdout)))
    assert len(rows) == 25 and {row["format"] for row in rows} == {"md", "batched-bench"}


def test_logs_of_batched_output_alone_and_its_bad_lines():
    r = invoke("logs", "tests/data/llamacpp/synthetic_batched.md", "tests/data/llamacpp/synthetic_batched.jsonl")
    assert r.exit_code == 0, r.output
    assert "llama-bench output" not in r.stdout
    assert "line 12: S_TG t/s 500 is not B*TG / T_TG s = 250.00" in r.stdout
    rows = list(csv.DictReader(io.StringIO(invoke("logs", "tests/data/llamacpp/synthetic_batched.jsonl",
                                                  "--csv").stdout)))
    assert rows[0]["format"] == "batched-bench-jsonl" and rows[0]["b"] == "4" and "test" not in rows[0]


def test_logs_reads_what_sim_llama_prints(table_run, tmp_path):
    saved = tmp_path / "sim_batched.txt"
    saved.write_text(table_run.stdout)
    doc = json.loads(invoke("logs", str(saved), "--json").stdout)
    assert len(doc["batched_rows"]) == 34 and doc["files"][str(saved)]["bad"] == []
