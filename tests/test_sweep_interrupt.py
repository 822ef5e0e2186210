"""Ctrl-C (SIGINT) at any moment of `sim sweep`: exit 130 and a results folder a restart resumes from (issue 31).

The flaky `test_killed_sweep_restarts_where_it_stopped[SIGINT-2]` of test_sweep.py once ended in `internal error:
RuntimeError: release unlocked lock` (exit 70): the default SIGINT handler raised KeyboardInterrupt in the main thread
while it waited for the pool in `threading.Condition.wait`, between releasing the condition's lock and taking it back,
and the `with` around the wait then released a lock it no longer held. These tests deliver a real SIGINT
(`signal.raise_signal` runs the handler at once, in this thread) at chosen lines of the main thread, found by a trace
function, so each moment is hit every time instead of once in many loaded runs."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
from conftest import HOME_LAB, ROOT

import sim.core.output
import sim.core.progress
import sim.sweeps.backends
import sim.sweeps.run
from sim.sweeps.backends import pool_backend, serial_backend
from sim.sweeps.run import run_sweep
from sim.sweeps.spec import build_plan
from sim.sweeps.tasks import prepare_tasks

ONE_JOB = 'jobs={"j": {"model": "9B", "tokens": 100, "resident_on": ["rtx4090_box"]}}'
WAIT_CODE = threading.Condition.wait.__code__
_SOURCE, _FIRST = inspect.getsourcelines(threading.Condition.wait)
RETAKE_LINE = _FIRST + next(i for i, line in enumerate(_SOURCE) if "_acquire_restore(saved_state)" in line)
OWN_FILES = {m.__file__ for m in (sim.sweeps.run, sim.sweeps.backends, sim.core.output, sim.core.progress)}

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread() or os.name != "posix",
                                reason="signal handlers run in the main thread only")


def _plan(runs: int):
    return build_plan(HOME_LAB, [f"jobs.j.tokens={','.join(str(100 * (i + 1)) for i in range(runs))}"], False, None,
                      None, [ONE_JOB])


class SignalAt:
    """A trace function on this (the main) thread that sends SIGINT to this process at the line events it is told
    to: ``at`` holds the numbers (1-based) of the events counted, those of the lines ``counted(frame)`` accepts in
    the files ``files`` (filenames, or code objects). ``hits`` records where each SIGINT was sent."""

    def __init__(self, files, counted, at):
        self.files, self.counted, self.at = files, counted, at
        self.seen = 0
        self.hits: list[str] = []

    def _call(self, frame, event, arg):
        code = frame.f_code
        return self._line if code in self.files or code.co_filename in self.files else None

    def _line(self, frame, event, arg):
        if event == "line" and self.counted(frame):
            self.seen += 1
            if self.at is None or self.seen in self.at:
                self.hits.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
                signal.raise_signal(signal.SIGINT)  # the handler runs now: the old one raised KeyboardInterrupt here
        return self._line

    def __enter__(self):
        self._outer = sys.gettrace()
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._outer)


def _interrupted_sweep(out: str, plan, prepared, backend, tracer: SignalAt, on_saved=None):
    """The sweep under ``tracer``: its result, or the exception it raised."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    try:
        with tracer:
            return run_sweep(plan, out, 0, backend=backend, quiet=True, prepared=prepared, on_saved=on_saved)
    except BaseException as exc:  # noqa: BLE001 - what the user would have got
        return exc
    finally:
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored, whatever happened


def _assert_resumable(out: str, outcome, plan, prepared) -> None:
    """What a Ctrl-C must leave: the sweep stopped as interrupted (a result not complete; KeyboardInterrupt only once
    every run was saved), sweep.json and the tables agree with the runs stored, no temporary file, and the same
    sweep run again does exactly the runs that are missing."""
    total = len(prepared[0])
    if not os.path.exists(os.path.join(out, "sweep.json")):  # stopped before it wrote anything
        assert isinstance(outcome, KeyboardInterrupt) and not os.path.exists(os.path.join(out, "points")), outcome
        saved = 0
    else:
        points = os.path.join(out, "points")
        saved = len([f for f in os.listdir(points) if f.endswith(".json") and not f.startswith(".")])
        manifest = json.loads(open(os.path.join(out, "sweep.json"), encoding="utf-8").read())
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, KeyboardInterrupt), repr(outcome)
            assert saved == total and manifest["complete"] is True
        else:
            assert outcome.complete is False and len(outcome.rows) == saved
            assert manifest["complete"] is False
        assert manifest["runs_done"] == saved == len(pd.read_parquet(os.path.join(out, "results.parquet")))
        temps = [os.path.join(d, f) for d, _, files in os.walk(out) for f in files if f.endswith(".tmp")]
        assert not temps
    again = run_sweep(plan, out, 0, quiet=True, prepared=prepared)
    assert again.complete and again.reused == saved and again.ran == total - saved


# --- the race of the issue: Ctrl-C while a wait of the main thread takes its lock back --------------------------

def test_ctrl_c_while_a_condition_wait_retakes_its_lock_stops_the_pool_sweep(tmp_path):
    """SIGINT at the n-th time the main thread, in `Condition.wait`, takes the condition's lock back (Thread.start
    and the futures' waits use one), for every n it reaches, and once at all of them (Ctrl-C pressed again and
    again). Before the fix the first already ended in `RuntimeError: release unlocked lock`."""
    plan = _plan(3)
    prepared = prepare_tasks(plan, 0, True)

    def retake(frame) -> bool:
        return frame.f_lineno == RETAKE_LINE

    reached = []
    for n in [*range(1, 9), None]:
        out = str(tmp_path / f"o{n}")
        tracer = SignalAt({WAIT_CODE}, retake, None if n is None else {n})
        outcome = _interrupted_sweep(out, plan, prepared, pool_backend(2), tracer)
        if not tracer.hits:  # the sweep has fewer such waits than n: it ran to the end undisturbed
            assert outcome.complete
            continue
        reached.append(n)
        _assert_resumable(out, outcome, plan, prepared)
    assert 1 in reached and None in reached


# --- every line of the sweep's own bookkeeping ------------------------------------------------------------------

def test_ctrl_c_at_any_line_of_the_sweep_leaves_a_folder_a_restart_resumes(tmp_path):
    """SIGINT at lines the serial sweep runs in its own code (run.py, backends.py, output.py, progress.py), spread
    over the whole of `run_sweep`: before anything is written, inside a run, between saving a run's file and
    counting it, inside an atomic write, while the tables are written. Before the fix 571 of its 2,017 lines failed:
    a Ctrl-C while the folder was first written left points/ without sweep.json; one after the first tables escaped
    without the last ones; one just after a point's file was renamed into place left sweep.json counting a run fewer
    than the store holds; one after `mkstemp` left a temporary file behind."""
    plan = _plan(2)
    prepared = prepare_tasks(plan, 0, True)
    counter = SignalAt(OWN_FILES, lambda frame: True, set())
    _interrupted_sweep(str(tmp_path / "count"), plan, prepared, serial_backend, counter)
    lines = counter.seen
    assert lines > 50
    for k in range(1, lines + 1, max(1, lines // 24)):  # about 24 of them
        out = str(tmp_path / f"o{k}")
        tracer = SignalAt(OWN_FILES, lambda frame: True, {k})
        outcome = _interrupted_sweep(out, plan, prepared, serial_backend, tracer)
        assert tracer.hits, k
        _assert_resumable(out, outcome, plan, prepared)


def test_ctrl_c_after_the_first_save_stops_a_pool_sweep_between_runs(tmp_path):
    """SIGINT at one of the main thread's first lines (in the sweep's own code) after the first run of a pool sweep
    was saved: the sweep stops there, with what finished saved and the tables saying so."""
    plan = _plan(4)
    prepared = prepare_tasks(plan, 0, True)
    hit = []
    for k in (1, 4, 16):
        out = str(tmp_path / f"o{k}")
        saved: list[int] = []
        tracer = SignalAt(OWN_FILES, lambda frame: bool(saved), {k})  # noqa: B023 - used in this iteration only
        outcome = _interrupted_sweep(out, plan, prepared, pool_backend(2), tracer, on_saved=saved.append)
        if tracer.hits:
            hit.append(k)
            _assert_resumable(out, outcome, plan, prepared)
    assert 1 in hit


# --- Ctrl-C in a terminal: the whole process group --------------------------------------------------------------

def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _wait_for(found, proc, timeout_s: float = 60.0):
    """Poll ``found()`` until it gives something true (returned) while ``proc`` runs."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        value = found()
        if value:
            return value
        time.sleep(0.002)
    raise AssertionError(f"not seen in time: {proc.poll()}, {proc.communicate()}")


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="finds the forkserver in /proc (Linux)")
def test_ctrl_c_to_the_process_group_while_the_pool_starts_is_one_line_and_130(tmp_path):
    """A terminal's Ctrl-C goes to every process of the foreground group: here while the forkserver imports the
    simulator. Before the fix the forkserver (or a worker not yet past its initializer) died of it with a
    traceback on the sweep's stderr."""
    out = str(tmp_path / "o")
    cmd = [sys.executable, "-m", "sim", "sweep", HOME_LAB, "--axis", "jobs.j.tokens=100,200,300,400",
           "--set", ONE_JOB, "--workers", "2", "--quiet", "--out", out]
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        server = _wait_for(lambda: next((c for c in _children(proc.pid) if "forkserver" in _cmdline(c)), None), proc)
        _wait_for(lambda: "numpy" in _maps(server), proc)  # importing the simulator (its preload)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("sim: error: interrupted"), err
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "4 runs" in again.stdout, again.stderr
