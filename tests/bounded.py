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


# ``python -m sim ARGS`` that, as it exits, writes its own peak resident memory (VmHWM, KiB) to the file descriptor
# given first. wait4's ru_maxrss would not do: Linux carries the parent's peak across fork and exec, so a child of a
# pytest worker grown to 400 MiB would report 400 MiB whatever it used.
_OWN_PEAK = """
import atexit, os, runpy, sys
fd = int(sys.argv.pop(1))
def report():
    with open("/proc/self/status") as fh:
        kib = next((line.split()[1] for line in fh if line.startswith("VmHWM:")), "")
    os.write(fd, kib.encode())
atexit.register(report)
sys.argv[0] = "sim"
runpy.run_module("sim", run_name="__main__", alter_sys=True)
"""


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

    def assert_refused(self, *words: str, seconds: float, peak_mib: float, max_line: int) -> str:
        """Assert exit 2 with one ``sim: error:`` line of at most ``max_line`` characters holding every one of
        ``words``, no internal error, within ``seconds`` of wall time and ``peak_mib`` MiB; the line."""
        line = self.stderr.strip()
        record = f"code={self.code} seconds={self.seconds:.2f} peak_mib={self.peak_mib:.0f} stderr={line[:300]!r}"
        print(record)  # shown with pytest -s (or -rP)
        assert self.one_line_error(), record
        assert len(line) <= max_line, record
        assert all(w in line for w in words), record
        assert "internal error" not in line and "Traceback" not in line, record
        assert self.seconds < seconds and self.peak_mib < peak_mib, record
        return line

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
    peak_read, peak_write = os.pipe()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _OWN_PEAK, str(peak_write), *args], cwd=cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=cap,
                            env=child_env, pass_fds=(peak_write,))
    os.close(peak_write)
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
    with os.fdopen(peak_read, "rb") as fh:
        own_kib = fh.read().decode() or None
    peak_kib = float(own_kib) if own_kib else usage.ru_maxrss  # the child's own; else what wait4 says
    return Outcome(proc.returncode, chunks.get("out", b"").decode("utf-8", "replace"),
                   chunks.get("err", b"").decode("utf-8", "replace"), seconds, peak_kib / 1024, killed.is_set())
