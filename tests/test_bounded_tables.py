"""The fits' tables, route traces, lengths tables and model files under the rules of ``sim run`` (issue 31): every such
file read through the one input layer (:mod:`sim.formats.inputs`: a regular file of bounded size, UTF-8 text), every
value range-checked with its unit where the table is read, a bad file one ``sim: error:`` line with exit 2, within
5 s and 200 MiB. One bounded child run per defect (``tests/bounded.py``); variants in-process."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from bounded import ROOT, Outcome, run_bounded
from click.testing import CliRunner

from sim.cli import main
from sim.core.errors import ScenarioError

LOADS = os.path.join(ROOT, "calibration", "public_loads.csv")
LOADS_SCENARIO = os.path.join(ROOT, "scenarios", "public_loads.yaml")
ROUTING = os.path.join(ROOT, "calibration", "routing_public.csv")
QWEN = os.path.join(ROOT, "calibration", "models", "qwen3-30b-a3b.json")
MACHINE = ["--gpu", "rtx3070ti", "--host", "ryzen5_5600x"]


def refused(r: Outcome, *words: str) -> str:
    """``r`` was one error line (exit 2) holding ``words``, within 5 s and 200 MiB; its line."""
    assert r.one_line_error(), (r.code, r.stderr[-2000:])
    assert all(w in r.stderr for w in words), r.stderr
    assert r.seconds < 5 and r.peak_mib < 200, (r.seconds, r.peak_mib)
    return r.stderr.strip()


def bounded(*args: str) -> Outcome:
    return run_bounded(list(args), timeout_s=20)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line(result, *words: str) -> str:
    """A CliRunner result that is one error line (exit 2) holding ``words``."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("sim: error: "), \
        (result.exit_code, result.output, result.exception)
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def edited(src: str, dst, row_id: str, column: str, value: str) -> str:
    """``src`` with the cell ``column`` of the row whose first cell is ``row_id`` set to ``value``."""
    lines = open(src, encoding="utf-8").read().splitlines()
    header = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    names = lines[header].split(",")
    for i, line in enumerate(lines):
        if line.startswith(row_id + ","):
            cells = line.split(",")
            cells[names.index(column)] = value
            lines[i] = ",".join(cells)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(dst)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.csv"
    os.mkfifo(path)  # nobody writes it: opening it would wait forever
    return str(path)


# --- 1, 2. sim fit-loads and fit-loading: values in range, with their units ----------------------------------------

def test_a_file_of_1e20_gb_is_refused_where_the_table_is_read(tmp_path):
    table = edited(LOADS, tmp_path / "loads.csv", "WL0044", "file_gb", "1e20")
    line = refused(bounded("fit-loads", LOADS_SCENARIO, "--table", table), f"{table}: row 9.file_gb: ", "GB")
    assert "1e+20 GB" in line and "at most 1,000,000 GB" in line


def test_a_measured_1e300_gb_per_s_is_refused(tmp_path):
    table = edited(LOADS, tmp_path / "loads.csv", "WL0001", "measured", "1e300")
    line = refused(bounded("fit-loads", LOADS_SCENARIO, "--table", table), f"{table}: row 1.measured: ")
    assert "1e+300 GB/s: expected a bandwidth above 0 and at most 100,000 GB/s" in line


@pytest.mark.parametrize("row_id, column, value, words", [
    ("WL0076", "measured", "1e9", "row 19.measured: 1,000,000,000 s: expected a time"),
    ("WL0044", "gpu_gb", "-1", "row 9.gpu_gb: -1 GB: expected a size"),
    ("WL0004", "request_kib", "1e300", "row 4.request_kib: 1e+300 KiB: expected a size"),
    ("WL0044", "file_gb", "900000", "row 9.file_gb: 900,000 GB is more than 100,000 chunks of loading.chunk_mib"),
    ("WL0044", "file_gb", "4 GB", "row 9.file_gb: bad value '4 GB': expected a size"),
    ("WL0004", "request_kib", "5e-324", "row WL0004: measured 0.055 against 0 predicted"),  # once exit 70
    ("WL0006", "measured", "5e-324", "row WL0006: measured 4.941e-324 against"),  # once exit 70
])
def test_every_value_of_a_loads_table_has_its_range(tmp_path, row_id, column, value, words):
    table = edited(LOADS, tmp_path / "loads.csv", row_id, column, value)
    one_line(invoke("fit-loads", LOADS_SCENARIO, "--table", table), words)


@pytest.mark.parametrize("cell, words", [
    ("1e300", "row 1.cold_gbps: 1e+300 GB/s: expected a bandwidth"),
    ("inf", "row 1.cold_gbps: inf GB/s: expected a bandwidth"),
])
def test_fit_loading_rates_have_their_range(tmp_path, cell, words):
    table = tmp_path / "t.csv"
    table.write_text(f"machine,cold_gbps,hot_gbps,file_gb\nmining_box,{cell},2,8\n")
    one_line(invoke("fit-loading", os.path.join(ROOT, "scenarios", "home_lab.yaml"), "--table", str(table)), words)
    for size, words in (("1e20", "row 1.file_gb: 1e+20 GB: expected a size"),
                        ("5e-324", "mining_box.cold_gbps: 1 GB/s of a 4.941e-324 GB file, predicted in 0 s")):
        table.write_text(f"machine,cold_gbps,hot_gbps,file_gb\nmining_box,1,2,{size}\n")  # 5e-324: once exit 70
        one_line(invoke("fit-loading", os.path.join(ROOT, "scenarios", "home_lab.yaml"), "--table", str(table)),
                 words)


# --- 3, 4. sim fit-routing: a short row, a far layer ---------------------------------------------------------------

def test_a_routing_row_shorter_than_its_header_is_one_line(tmp_path):
    lines = open(ROUTING, encoding="utf-8").read().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("EC0001,"))
    lines[at] = ",".join(lines[at].split(",")[:5])  # the row cut after its grade
    table = tmp_path / "short.csv"
    table.write_text("\n".join(lines) + "\n")
    refused(bounded("fit-routing", "--table", str(table)), f"{table}: row EC0001.", "missing value")


def far_trace(path, far_layer: int = 150) -> str:
    rows = [f"0,{t},{layer},{t % 5} {t % 5 + 1}" for t in range(20) for layer in range(4)]
    path.write_text("request,token,layer,experts\n" + "\n".join(rows) + f"\n0,0,{far_layer},1 2\n")
    return str(path)


def test_a_far_layer_with_too_few_tokens_is_left_out_with_a_note(tmp_path):
    out = tmp_path / "fit.yaml"
    r = run_bounded(["fit-routing", "--trace", far_trace(tmp_path / "far.csv"), "--no-sample", "--out", str(out)],
                    timeout_s=60)
    assert r.code == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if line.startswith("sim: warning:")]
    assert len(warning) == 1 and "layers 4-150" in warning[0] and "left out" in warning[0], r.stderr
    from sim.config.yaml_io import parse_yaml

    fitted = parse_yaml(out.read_text())
    assert fitted["models"]["trace"]["geometry"]["layers"] == 4
    assert "layers 4-150" in out.read_text().split("\nkind:")[0]  # the note in the file's header too
    assert r.peak_mib < 200, r.peak_mib


def test_a_model_too_large_for_the_routing_fit_is_refused(tmp_path):
    """A routing table's geometry and a trace's far expert id: once a fit without end (arrays of layers x experts)."""
    from sim.calibration.routing_fit import read_table

    table = tmp_path / "big.csv"
    table.write_text(open(ROUTING, encoding="utf-8").read().replace("Q4_K_M,48,128,8", "Q4_K_M,999999,999999,8", 1))
    with pytest.raises(ScenarioError, match=r"row EC0001\.n_experts: 999,999 layers x 999,999 experts"):
        read_table(str(table))
    table.write_text(open(ROUTING, encoding="utf-8").read().replace("trace-chat-advice: 139 tokens",
                                                                     "trace-chat-advice: 999999999 tokens", 1))
    with pytest.raises(ScenarioError, match=r"row EC0010\.workload: prompts of 999,999,999 tokens"):
        read_table(str(table))
    far = tmp_path / "far_expert.csv"
    far.write_text("request,token,layer,experts\n" + "".join(f"0,{t},{layer},{t % 5} {1_000_000 if t == 3 else 7}\n"
                                                           for t in range(20) for layer in range(4)))
    one_line(invoke("fit-routing", "--trace", str(far)), "--trace: 4 layers x 1,000,001 experts")
    one_line(invoke("fit-routing", "--trace", far_trace(tmp_path / "t.csv"), "--experts", "1"),
             "--experts: 1: fewer experts per layer than", "at least 6")  # once fitted as if it were so


def test_one_long_request_among_many_short_ones_stays_in_memory(tmp_path):
    """The LRU replay padded every request to the longest: 5,001 x 5,000 tokens x 2 experts (400 MB) for a 90 kB
    trace. In batches now."""
    path = tmp_path / "long.csv"
    path.write_text("request,token,layer,experts\n" + "".join(f"0,{t},0,{t % 7} {t % 7 + 1}\n" for t in range(5000))
                    + "".join(f"{r},0,0,1 2\n" for r in range(1, 5001)))
    r = run_bounded(["fit-routing", "--trace", str(path), "--no-sample"], timeout_s=60)
    assert r.code == 0 and r.peak_mib < 200 and r.seconds < 10, (r.code, r.peak_mib, r.seconds, r.stderr[-500:])


def test_a_trace_without_two_tokens_in_any_layer_is_refused(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("request,token,layer,experts\n0,0,0,0 1\n0,0,1,1 2\n")
    one_line(invoke("fit-routing", "--trace", str(path)), f"{path}: --trace: ", "fewer than 2 tokens")


# --- 5. GGUF: a tensor with a zero dimension -----------------------------------------------------------------------

def write_gguf(path, shape=(0, 64), blocks: int = 1) -> str:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(blocks)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_tensor("token_embd.weight", np.zeros(shape, np.float16))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_a_gguf_tensor_with_a_zero_dimension_is_refused(tmp_path):
    path = write_gguf(tmp_path / "zero.gguf")
    refused(bounded("model", path), f"{path}: token_embd.weight: ", "dimension of 0")


# --- 6. every model file, table and trace read with sim run's checks -----------------------------------------------

def test_dev_zero_as_a_model_file_is_refused_at_once():
    refused(bounded("model", "/dev/zero"), "/dev/zero", "not a regular file")


def test_a_fifo_as_a_model_file_never_waits(fifo, tmp_path):
    refused(bounded("model", fifo), fifo, "not a regular file (a FIFO)")
    gguf_fifo = tmp_path / "pipe.gguf"
    os.mkfifo(gguf_fifo)
    for args in (["model", str(gguf_fifo)], ["advise", "--model", fifo, "--quant", "Q4_K_M", *MACHINE],
                 ["llama", "llama-server -m x.gguf", "--model", str(gguf_fifo), *MACHINE]):
        one_line(invoke(*args), "not a regular file (a FIFO)")


def test_a_fifo_as_a_scenario_model_file_never_waits(fifo, tmp_path):
    text = open(os.path.join(ROOT, "scenarios", "llamacpp_3070ti.yaml"), encoding="utf-8").read()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text.replace("file: ../calibration/models/qwen3-30b-a3b.json", f"file: {fifo}"))
    refused(bounded("run", str(scenario)), fifo, "not a regular file (a FIFO)")


def test_a_bad_scenario_model_file_names_its_key(tmp_path):
    text = open(os.path.join(ROOT, "scenarios", "llamacpp_3070ti.yaml"), encoding="utf-8").read()
    bad = tmp_path / "bad.json"
    bad.write_text('{"num_hidden_layers": "many"}')
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text.replace("file: ../calibration/models/qwen3-30b-a3b.json", f"file: {bad}"))
    r = invoke("run", str(scenario))
    assert r.exit_code == 2 and r.output.count("\n") == 1 and str(bad) in r.output, r.output


def test_fifo_tables_and_traces_never_wait(fifo):
    """Each command that reads a table or a trace, on a FIFO: refused at once (a child each, as a hang would stop
    the test run)."""
    for args in (["fit-loads", LOADS_SCENARIO, "--table", fifo], ["fit-routing", "--table", fifo],
                 ["fit-routing", "--trace", fifo]):
        refused(bounded(*args), f"{fifo}: ", "not a regular file (a FIFO)")


def test_a_sweeps_measured_table_is_read_with_the_same_checks(fifo, tmp_path):
    sweeps = tmp_path / "scenarios" / "sweeps"
    for name in ("scenarios", "calibration"):
        shutil.copytree(os.path.join(ROOT, name), tmp_path / name)
    os.replace(fifo, tmp_path / "calibration" / "strata_concurrency.csv")
    r = run_bounded(["sweep", str(sweeps / "concurrency_slots.yaml"), "--out", str(tmp_path / "out"), "--quiet"],
                    cwd=str(tmp_path), timeout_s=20)
    refused(r, "measured.0.table", "not a regular file (a FIFO)")
    r = run_bounded(["sweep", str(sweeps / "concurrency_slots.yaml"), "--out", str(tmp_path / "out")],
                    cwd=str(tmp_path), timeout_s=20)  # the tables are read before the sweep's banner is printed
    refused(r, "measured.0.table", "not a regular file (a FIFO)")


@pytest.mark.parametrize("content, words", [
    (b"GGUF\x03\x00\x00\x00", "not a GGUF file (8 bytes"),  # truncated in its header
    (b"GGUF\x03\x00\x00\x00" + (10**9).to_bytes(8, "little") + (0).to_bytes(8, "little"), "1,000,000,000 tensors"),
    (b"GGUF\x03\x00\x00\x00" + (0).to_bytes(8, "little") + (10**7).to_bytes(8, "little"), "10,000,000 metadata"),
    (b"GGUF\x09\x00\x00\x00" + bytes(16), "version 9"),
    (b"\x00" * 64, "not a GGUF file"),
])
def test_malformed_gguf_headers_are_one_line(tmp_path, content, words):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    one_line(invoke("model", str(path)), str(path), words)


def test_a_truncated_gguf_and_huge_block_counts_are_one_line(tmp_path):
    good = write_gguf(tmp_path / "good.gguf", shape=(96, 64))
    data = open(good, "rb").read()
    for n in (30, 200, len(data) // 2, len(data) - 1):
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        one_line(invoke("model", str(cut)), str(cut))
    huge = write_gguf(tmp_path / "huge.gguf", shape=(96, 64), blocks=10**9)
    one_line(invoke("model", huge), "llama.block_count", "from 1 to 10,000")


@pytest.mark.parametrize("text, quant, words", [
    ("\0" * 10, [], "not text"),
    ("{" * 100_000, [], "not valid JSON"),
    ('{"num_hidden_layers": 1000000000}', [], "num_hidden_layers: expected a whole number from 1 to 10000"),
    ('{"hidden_size": 2147483648}', [], "the tensors add up to"),  # 1e20 parameters
    ('{"hidden_size": 10000}', ["--quant", "Q8_0"], "llama.cpp cannot store this model at Q8_0"),  # once exit 70
])
def test_malformed_config_json_is_one_line(tmp_path, text, quant, words):
    cfg = json.load(open(os.path.join(ROOT, "calibration", "models", "llama-3.1-8b.json")))
    path = tmp_path / "config.json"
    if text.startswith('{"'):
        text = json.dumps({**cfg, **json.loads(text)})
    path.write_text(text)
    one_line(invoke("model", str(path), *quant), str(path), words)


def test_dev_zero_tables_and_traces_are_refused_in_process():
    """With the checks in place a device is refused without a read: safe to try in-process."""
    from sim.calibration.routing_fit import read_table
    from sim.formats.measured_tables import read_measured
    from sim.formats.route_trace import read_route_trace
    from sim.modelfiles import read_model_file
    from sim.serving.workload import read_trace

    for call in (lambda: read_measured("/dev/zero"), lambda: read_table("/dev/zero"),
                 lambda: read_route_trace("/dev/zero"), lambda: read_trace("/dev/zero", 10),
                 lambda: read_model_file("/dev/zero"), lambda: read_model_file("/dev/zero.gguf")):
        with pytest.raises(ScenarioError) as err:
            call()
        assert "\n" not in str(err.value) and ("not a regular file" in str(err.value)
                                               or "not found" in str(err.value)), str(err.value)


# --- 7. one reader: the same checks and words from every table reader ----------------------------------------------

def test_the_table_readers_share_one_set_of_checks(tmp_path):
    from sim.calibration.routing_fit import read_table
    from sim.formats.measured_tables import read_measured
    from sim.formats.route_trace import read_route_trace
    from sim.serving.workload import read_trace

    readers = (read_measured, read_table, read_route_trace, lambda p: read_trace(p, 10))
    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"a,b\n1,\x002\n")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"a,b\n\xe9,2\n")
    for path, words in ((nul, "not text (a NUL byte at byte 6)"), (latin, "not UTF-8 text (byte 4)"),
                        (tmp_path, "is a directory"), (tmp_path / "none.csv", "file not found")):
        for read in readers:
            with pytest.raises(ScenarioError) as err:
                read(str(path))
            assert words in str(err.value) and "\n" not in str(err.value), (read, str(err.value))


def test_a_table_too_large_is_refused_before_it_is_read(tmp_path):
    from sim.calibration.routing_fit import read_table

    big = tmp_path / "big.csv"
    with open(big, "w") as fh:
        fh.write("row_id,model\n")
        fh.truncate(17 * 2**20)
    with pytest.raises(ScenarioError, match="larger than 16 MiB"):
        read_table(str(big))


def test_request_tables_values_have_their_ranges(tmp_path):
    from sim.calibration.observations import observations

    path = tmp_path / "requests.csv"
    path.write_text("prompt_tokens,output_tokens,decode_tok_s\n100,10,1e11\n")
    with pytest.raises(ScenarioError, match=r"row 1\.decode_tok_s: 100,000,000,000 tok/s: expected a token rate"):
        observations([], [str(path)])
    path.write_text("prompt_tokens,output_tokens,decode_tok_s\n100,10,55.5\n")
    assert observations([], [str(path)])[0].measured == {"decode_tok_s": 55.5}


def test_sim_model_weights_gib_has_its_range():
    for value in ("1e300", "nan", "-1"):
        one_line(invoke("model", QWEN, "--quant", "UD-Q4_K_XL", "--weights-gib", value), "--weights-gib: ",
                 "expected a positive size in GiB, at most 931,323 GiB")
