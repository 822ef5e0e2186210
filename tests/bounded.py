"""Run a ``sim`` command in a child process under a time and memory cap, and report what a user would see: the exit
code, stdout, stderr, the wall time and the child's peak resident memory. The tests of bounded input use it to
show each reproducer's exit code, time and peak memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@dataclass
class Outcome:
    """What a bounded run of ``sim`` did: ``code`` (-9 when the time cap killed it), its output, ``seconds`` of wall
    time and ``peak_mib``, the child's peak resident memory (MiB)."""

    code: int
    stdout: str
    stderr: str
    seconds: float
    peak_mib: float
    timed_out: bool

    def one_line_error(self) -> bool:
        """Exit 2 and a single ``sim: error:`` line on stderr, no traceback."""
        lines = self.stderr.strip().splitlines()
        return self.code == 2 and len(lines) == 1 and lines[0].startswith("sim: error: ")


def run_bounded(args: list[str], *, cwd: str = ROOT, timeout_s: float = 60.0, memory_mib: int = 3072,
                stdin: bytes | None = None, env: dict[str, str] | None = None) -> Outcome:
    """``python -m sim ARGS`` in ``cwd`` with at most ``memory_mib`` MiB of address space (a run that needs more
    fails with MemoryError instead of taking the machine) and killed after ``timeout_s`` seconds."""
    limit = memory_mib * 2**20

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    child_env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": ROOT, **(env or {})}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sim", *args], cwd=cwd, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=cap, env=child_env)
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    chunks: dict[str, bytes] = {}

    def drain(name: str, stream) -> None:
        chunks[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    if stdin is not None:
        proc.stdin.write(stdin)
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource use (ru_maxrss: KiB on Linux)
    proc.returncode = os.waitstatus_to_exitcode(status)
    timer.cancel()
    for r in readers:
        r.join()
    seconds = time.perf_counter() - start
    return Outcome(proc.returncode, chunks.get("out", b"").decode("utf-8", "replace"),
                   chunks.get("err", b"").decode("utf-8", "replace"), seconds, usage.ru_maxrss / 1024, killed.is_set())
