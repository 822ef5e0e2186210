"""Defects the fuzz campaign of every command found in the model-file and route-trace readers (issue 31): each
reproducer ends in one ``sim: error:`` line and exit 2, in bounded time and memory."""

from __future__ import annotations

import json
import os

import pytest
from bounded import ROOT, run_bounded
from click.testing import CliRunner
from test_fuzz_formats import gguf_fields, write_gguf

from sim.cli import main

MODELS = os.path.join(ROOT, "calibration", "models")
HUGE = "1" * 5000


def refused(args: list[str], *words: str) -> str:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and r.output.startswith("sim: error: "), r.output
    for w in words:
        assert w in r.output, r.output
    return r.output


def with_offset(tmp_path, offset: int) -> str:
    """A small valid GGUF whose last tensor's data offset is ``offset``."""
    good = tmp_path / "m.gguf"
    write_gguf(str(good), True)
    data = bytearray(good.read_bytes())
    field = [f for f in gguf_fields(bytes(data))[0] if f[0] == "tensor_offset"][-1]
    data[field[1]:field[1] + 8] = offset.to_bytes(8, "little")
    bad = tmp_path / f"off{offset}.gguf"
    bad.write_bytes(bytes(data))
    return str(bad)


@pytest.mark.parametrize("offset, words", [(1, "is not a multiple of the file's alignment (32)"),
                                           (2**64 - 32, "runs past the end of the file")])
def test_gguf_tensor_data_must_lie_aligned_within_the_file(tmp_path, offset, words):
    refused(["model", with_offset(tmp_path, offset)], words)


def test_a_wrapped_gguf_offset_prints_no_numpy_warning(tmp_path):
    r = run_bounded(["model", with_offset(tmp_path, 2**64 - 32)], timeout_s=20)
    assert r.one_line_error() and "RuntimeWarning" not in r.stderr, r.stderr
    assert r.seconds < 5 and r.peak_mib < 200


def config(tmp_path, name: str, **changes) -> str:
    cfg = json.load(open(os.path.join(MODELS, name), encoding="utf-8"))
    cfg.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_a_model_type_that_is_not_a_name_is_one_line(tmp_path):
    refused(["model", config(tmp_path, "mistral-7b-v0.1.json", model_type=["mistral"])], "model_type: bad value")
    refused(["model", config(tmp_path, "mistral-7b-v0.1.json", model_type={"a": 1})], "model_type: bad value")


@pytest.mark.parametrize("changes", [{"num_attention_heads": 32000}, {"num_attention_heads": 8192},
                                     {"hidden_size": 3}])
def test_a_head_width_of_zero_is_refused_not_taken_as_data(tmp_path, changes):
    cfg = config(tmp_path, "llama-3.1-8b.json", **changes)
    os.rename(cfg, cfg.replace("config.json", "c.json"))  # no head_dim in the file: it is derived
    refused(["model", cfg.replace("config.json", "c.json")], "num_attention_heads", "at most one head per hidden")


def test_a_5000_digit_integer_in_a_config_is_one_line(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"num_hidden_layers": ' + HUGE + "}")
    refused(["model", str(path)], "an integer of more than 4,300 digits")


@pytest.mark.parametrize("line, words", [
    ('{"request":0,"pos":0,"layer":-1,"experts":[1,2]}', "layer -1: expected a whole number from 0"),
    ('{"request":-1,"pos":0,"layer":0,"experts":[1,2]}', "request -1"),
    ('{"request":0,"pos":-1,"layer":0,"experts":[1,2]}', "token -1"),
    ('{"request":0,"pos":0,"layer":0,"experts":[-1,2]}', "expert id -1"),
    ('{"request":0,"pos":0,"layer":' + HUGE + ',"experts":[1,2]}', "an integer of more than 4,300 digits"),
])
def test_route_trace_ids_are_whole_numbers_from_zero(tmp_path, line, words):
    path = tmp_path / "t.jsonl"
    path.write_text(line + '\n{"request":0,"pos":1,"layer":0,"experts":[1,2]}\n')
    refused(["fit-routing", "--trace", str(path), "--no-sample"], "line 1", words)


def test_a_5000_digit_id_in_a_csv_trace_is_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(f"request,token,layer,experts\n0,0,0,{HUGE} 2\n")
    r = run_bounded(["fit-routing", "--trace", str(path), "--no-sample"], timeout_s=20)
    assert r.one_line_error() and "5,000 digits" in r.stderr and r.seconds < 5 and r.peak_mib < 200, r.stderr
