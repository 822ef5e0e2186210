"""A llama-bench output as a file: its text read through the one input layer, and whether that text is a benchmark
output at all (records outnumber its other lines) rather than an engine log. The records themselves are read by
:mod:`sim.formats.llama_bench`."""

from __future__ import annotations

from sim.formats.llama_bench import BenchRuns, read_bench_output

MAX_BYTES = 50_000_000  # a benchmark output file (bytes)


def read_bench_text(path: str) -> str:
    """The text of a benchmark output file, read through :mod:`sim.formats.inputs` (a regular file of at most
    :data:`MAX_BYTES` bytes, no binary data at its start); undecodable bytes further on are replaced, as a terminal
    shows them. A one-line ScenarioError when it cannot be read."""
    from sim.formats.engine_logs_io import check_text_file
    from sim.formats.inputs import read_bytes

    check_text_file(path)
    data, _ = read_bytes(path, "", "a llama-bench output", max_bytes=MAX_BYTES)
    return data.decode("utf-8", errors="replace")


def read_bench_file(path: str) -> BenchRuns:
    """The llama-bench (or sweep-bench) output in ``path``; a one-line ScenarioError when it cannot be read."""
    return read_bench_output(read_bench_text(path), path)


def is_bench_output(runs: BenchRuns) -> bool:
    """Whether a text is a llama-bench output (its records outnumber its other lines) rather than an engine log."""
    return bool(runs.records) and len(runs.records) >= len(runs.skipped) / 4
