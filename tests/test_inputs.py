"""The one input layer (:mod:`sim.formats.inputs`): what it refuses and how it says so, and the quantities' ranges."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.errors import ScenarioError
from sim.formats import inputs
from sim.formats.quantities import BANDWIDTH_GBPS, SHARE, TOKENS, TOKENS_PER_S, Quantity


def refusal(call) -> str:
    with pytest.raises(ScenarioError) as info:
        call()
    line = str(info.value)
    assert "\n" not in line and len(line) < 600
    return line


def test_a_regular_text_file_is_read_whole_without_its_byte_order_mark(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffa,b\n1,2\n".encode())
    assert inputs.read_text(path, "k", "a CSV table") == "a,b\n1,2\n"


@pytest.mark.parametrize("name, words", [
    ("/dev/zero", "not a regular file (a character device): expected a CSV table"),
    ("/dev/null", "not a regular file (a character device)"),
    ("missing.csv", "missing.csv: k: file not found"),
    ("a\0b.csv", "a\\x00b.csv: k: the file name holds a NUL byte"),
])
def test_what_is_not_a_regular_file_is_refused_by_name(name, words):
    assert words in refusal(lambda: inputs.read_text(name, "k", "a CSV table"))


def test_a_folder_is_refused(tmp_path):
    assert "is a directory, expected a YAML file" in refusal(lambda: inputs.check_file(tmp_path, "", "a YAML file"))


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(refusal(lambda: inputs.read_text(fifo, "k", "a log"))),
                              daemon=True)
    start = time.perf_counter()
    worker.start()
    worker.join(5)
    assert done and "not a regular file (a FIFO)" in done[0]
    assert time.perf_counter() - start < 5


def test_a_file_over_its_size_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.csv"
    path.write_bytes(b"x" * 2048)
    assert "larger than 1,024 bytes: expected a table of at most 1,024 bytes" in refusal(
        lambda: inputs.read_text(path, "", "a table", max_bytes=1024))


def test_a_header_is_the_first_bytes_and_the_size(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + b"\1" * 5000)
    head, size = inputs.read_head(path, "", "a GGUF file", max_bytes=16)
    assert head == b"GGUF" + b"\1" * 12 and size == 5004


@pytest.mark.parametrize("data, words", [
    (b"a\0b", "not text (a NUL byte at byte 1)"),
    (b"ok\xff\xfe", "not UTF-8 text (byte 2)"),
    (b"\n" * 11, "more than 10 lines"),
])
def test_what_is_not_text_is_refused_with_where(tmp_path, data, words):
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    assert words in refusal(lambda: inputs.read_text(path, "", "a log", max_lines=10))


@pytest.mark.parametrize("quantity, value, ok", [
    (BANDWIDTH_GBPS, 8000.0, True), (BANDWIDTH_GBPS, 1e300, False), (BANDWIDTH_GBPS, 0.0, False),
    (BANDWIDTH_GBPS, -1.0, False), (BANDWIDTH_GBPS, math.nan, False), (BANDWIDTH_GBPS, math.inf, False),
    (TOKENS, 0.0, True), (TOKENS, -1.0, False), (TOKENS_PER_S, 1e11, False), (SHARE, 1.0, True), (SHARE, 1.5, False),
])
def test_quantities_take_what_is_physical_and_say_why_not_otherwise(quantity, value, ok):
    reason = quantity.problem(value)
    assert (reason is None) == ok
    if not ok:
        assert quantity.unit in reason and "expected" in reason


def test_a_cell_is_read_as_its_quantity_in_one_line():
    assert BANDWIDTH_GBPS.parse(" 2.5 ", "t.csv", "row 1.measured") == 2.5
    assert BANDWIDTH_GBPS.parse("", "t.csv", "row 1.measured", required=False) is None
    assert refusal(lambda: BANDWIDTH_GBPS.parse("1e300", "t.csv", "row 3.measured")) == (
        "t.csv: row 3.measured: 1e+300 GB/s: expected a bandwidth above 0 and at most 100,000 GB/s")
    assert "bad value 'fast'" in refusal(lambda: BANDWIDTH_GBPS.parse("fast", "t.csv", "row 1.x"))
    assert "missing value" in refusal(lambda: BANDWIDTH_GBPS.parse(" ", "t.csv", "row 1.x"))


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30), st.text(max_size=8),
                 st.none()))
def test_a_quantity_never_raises_on_any_value(value):
    q = Quantity("a thing", "u", 0.0, 10.0, "test")
    reason = q.problem(value)
    if reason is None:
        assert 0 < float(value) <= 10
