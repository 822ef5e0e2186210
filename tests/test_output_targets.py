"""Where results are written: a regular file is replaced atomically; a character device (``/dev/null``) is written
in place and stays a device (run as root, a rename over it once swapped ``/dev/null`` for a plain file); a FIFO is
written when a process reads it and refused in one line when none does, never waited on."""

from __future__ import annotations

import os
import stat

import pytest

from sim.core.errors import ScenarioError
from sim.core.output import atomic_write_text


def test_a_regular_file_is_replaced_whole(tmp_path):
    path = tmp_path / "out.yaml"
    path.write_text("old")
    atomic_write_text(str(path), "new\n")
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["out.yaml"]


def test_dev_null_is_written_in_place_and_stays_a_device():
    atomic_write_text(os.devnull, "discarded\n")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="a FIFO no process reads: expected a file to write"):
        atomic_write_text(str(fifo), "x\n")


def test_a_fifo_with_a_reader_gets_the_text(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader holds it open; the text waits in the pipe
    try:
        atomic_write_text(str(fifo), "through the pipe\n")
        assert os.read(reader, 4096) == b"through the pipe\n"
    finally:
        os.close(reader)
