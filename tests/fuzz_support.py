"""What the command fuzz suite (tests/test_fuzz_commands.py, tests/test_fuzz_formats.py) shares: hypothesis settings,
a runner that invokes ``sim`` in-process under time and memory caps and checks the outcome against the rules of every
command, the bounded subprocess runner for a sample, checks of results, and the per-command statistics.

Rules (issue 31): a case ends in a result (exit 0) or in one-line errors (exit 2, every stderr line a short
``sim: error:`` line; exit 1 the same, for valid input that cannot be simulated), never exit 70 nor a traceback, and
a result prints no non-finite number as data (``--json`` strict JSON, no ``nan tok/s``). "One line" is what
``str.splitlines`` and tests/bounded.py's ``one_line_error`` call one.

Caps. 5 s of CPU (of the thread running the case) per case: the rule every reproducer of the issue is held to, and
over ten times what a case costs here (parse-level 10-50 ms, small runs and fits 0.1-1 s); CPU, not wall time, so a
machine loaded by other work does not fail the suite (wall time is recorded). A case past :data:`HARD_CAP_S` of wall
time or twice the CPU cap is stopped (SIGALRM, SIGPROF) and fails: a hang costs seconds, not forever. Memory: a
case's growth of the process's peak RSS (``/proc/self/clear_refs`` resets it, ``VmHWM`` reads it) within 200 MiB,
the issue's cap for a whole command; the address space is limited to what it had plus
:data:`ADDRESS_HEADROOM_MIB`, so a runaway allocation fails (exit 70) instead of taking the machine. The bounded
sample (:func:`bounded`) holds a child's whole peak RSS to 200 MiB and its CPU to 5 s.

Environment: ``SIM_FUZZ_SCALE=k`` runs k times the cases; ``SIM_FUZZ_STATS=path`` writes the statistics per command
(JSON, merged over pytest-xdist workers); ``SIM_FUZZ_KEEP_GOING=1`` records broken cases (up to
:data:`KEPT_FAILURES` distinct ones per command) instead of failing at the first, ``SIM_FUZZ_KEEP=dir`` copies their
input files there; ``SIM_FUZZ_SHRINK=1`` lets hypothesis shrink a failure (off: shrinking a hang replays it).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import resource
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st

from sim.formats.quantities import PARAMETERS, SIZE_BYTES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SCALE = float(os.environ.get("SIM_FUZZ_SCALE", "1"))
KEEP_GOING = bool(os.environ.get("SIM_FUZZ_KEEP_GOING"))
TIME_CAP_S = 5.0  # a case's CPU time, at most (seconds)
HARD_CAP_S = 30.0  # a case still running then (wall time) is stopped (seconds); CPU time is the cap
MEMORY_CAP_MIB = 200.0  # a case's growth of peak RSS in-process, and a bounded child's whole peak RSS (MiB)
ADDRESS_HEADROOM_MIB = 2048  # address space a case may add in-process (MiB) before allocations fail
LONGEST_LINE = 1_500  # an error line: ScenarioError cuts FILE and key to 200 characters each, the problem to 1,000
KEPT_FAILURES = 8  # distinct broken cases kept per command in the statistics
MIB = 2**20
NON_FINITE_TEXT = re.compile(r"(?<![\w.])-?(?:nan|inf)\s*(?:tok/s|t/s|s\b|ms\b|GiB|GB|MiB|%)", re.IGNORECASE)


def fuzz(examples: int):
    """Hypothesis settings of one strategy: ``examples`` cases (times SIM_FUZZ_SCALE), the same ones every run."""
    phases = list(Phase) if os.environ.get("SIM_FUZZ_SHRINK") else [p for p in Phase if p != Phase.shrink]
    return settings(max_examples=max(1, int(examples * SCALE)), derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), phases=phases)


def path(*parts: str) -> str:
    """A path in the project (absolute: the in-process runs do not depend on the working folder)."""
    return os.path.join(ROOT, *parts)


# --- statistics ---------------------------------------------------------------------------------------------------

@dataclass
class CommandStats:
    """Per-command counts: ``cases`` (in-process and bounded); ``results`` (exit 0), ``refusals`` (exit 2, one-line
    errors), ``cannot_simulate`` (exit 1, one line), ``exit_70``, ``other_failures`` (a traceback, a bad message, a
    value not finite, over a cap); of the in-process cases ``max_seconds`` (wall), ``max_cpu_seconds``, ``max_mib``
    (growth of peak RSS), their total ``cpu_seconds`` and the ``slowest`` (by CPU); the bounded sample's
    ``bounded_cases``, ``bounded_max_seconds``, ``bounded_max_cpu_seconds`` and ``bounded_max_peak_mib`` (the
    child's whole peak); ``failures``: the distinct broken cases kept."""

    cases: int = 0
    results: int = 0
    refusals: int = 0
    cannot_simulate: int = 0
    exit_70: int = 0
    other_failures: int = 0
    max_seconds: float = 0.0
    max_cpu_seconds: float = 0.0
    max_mib: float = 0.0
    bounded_cases: int = 0
    bounded_max_seconds: float = 0.0
    bounded_max_cpu_seconds: float = 0.0
    bounded_max_peak_mib: float = 0.0
    cpu_seconds: float = 0.0
    slowest: dict = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)


STATS: dict[str, CommandStats] = {}
_COUNTS = ("cases", "results", "refusals", "cannot_simulate", "exit_70", "other_failures", "bounded_cases")
_MAXIMA = ("max_seconds", "max_cpu_seconds", "max_mib", "bounded_max_seconds", "bounded_max_cpu_seconds",
           "bounded_max_peak_mib")


def _merge(into: dict, stats: dict[str, CommandStats]) -> dict:
    for name, s in stats.items():
        row = into.setdefault(name, {k: 0 for k in _COUNTS} | {k: 0.0 for k in _MAXIMA} |
                              {"cpu_seconds": 0.0, "slowest": {}, "failures": []})
        if s.max_cpu_seconds > row["max_cpu_seconds"]:
            row["slowest"] = s.slowest
        for k in _COUNTS:
            row[k] += getattr(s, k)
        row["cpu_seconds"] = round(row["cpu_seconds"] + s.cpu_seconds, 3)
        for k in _MAXIMA:
            row[k] = round(max(row[k], getattr(s, k)), 3)
        seen = {f["signature"] for f in row["failures"]}
        row["failures"] += [f for f in s.failures if f["signature"] not in seen][:KEPT_FAILURES - len(seen)]
    return into


def write_stats() -> None:
    """Add this process's statistics to the JSON file SIM_FUZZ_STATS names (under a lock: pytest-xdist's workers
    each add theirs; a file left by an earlier run is replaced)."""
    target = os.environ.get("SIM_FUZZ_STATS")
    if not target or not STATS:
        return
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(target, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            doc = {}
        if doc.get("run") != run:
            doc = {"run": run, "commands": {}}
        doc["commands"] = dict(sorted(_merge(doc["commands"], STATS).items()))
        doc["total"] = {k: sum(c[k] for c in doc["commands"].values()) for k in _COUNTS}
        with open(target + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(target + ".tmp", target)
    STATS.clear()  # written once: the session fixture's teardown, else at exit


atexit.register(write_stats)


@pytest.fixture(scope="session", autouse=True)
def fuzz_stats():
    """Write the statistics when the session ends (a pytest-xdist worker may leave without running atexit)."""
    yield STATS
    write_stats()


# --- one case -------------------------------------------------------------------------------------------------------

class Overtime(BaseException):
    """Raised in a case past :data:`HARD_CAP_S` of wall time (SIGALRM) or twice :data:`TIME_CAP_S` of CPU
    (SIGPROF): a BaseException, so sim's ``except Exception`` does not turn it into an exit 70, nor click's runner
    swallow it."""


def _alarm(signum, frame) -> None:
    raise Overtime(signum)


def _status_mib(key: str) -> float:
    """A line of /proc/self/status (VmRSS, VmHWM, VmSize) in MiB."""
    with open("/proc/self/status", encoding="ascii") as fh:
        return next((int(line.split()[1]) / 1024 for line in fh if line.startswith(key + ":")), 0.0)


def _reset_peak() -> None:
    """VmHWM back to the current RSS (Linux: write 5 to clear_refs)."""
    with suppress(OSError), open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")


@contextmanager
def capped(measured: dict[str, float]):
    """Run the block under the time caps (main thread only) and the address-space headroom; ``measured`` gets
    ``seconds`` (wall), ``cpu`` (this thread's) and ``mib`` (growth of peak RSS) when the block ends."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _alarm) for sig in (signal.SIGALRM, signal.SIGPROF)} if main_thread else {}
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int((_status_mib("VmSize") + ADDRESS_HEADROOM_MIB) * MIB)
    if hard == resource.RLIM_INFINITY or limit < hard:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    _reset_peak()
    before = _status_mib("VmRSS")
    start, cpu = time.perf_counter(), time.thread_time()
    try:
        if main_thread:  # again every second: a signal that lands in a finalizer or a GC callback is swallowed there
            signal.setitimer(signal.ITIMER_REAL, HARD_CAP_S, 1.0)
            signal.setitimer(signal.ITIMER_PROF, 2 * TIME_CAP_S, 1.0)  # the process's CPU: a runaway stops sooner
        yield
    finally:
        done = False
        while not done:  # all of it again when a timer (or one pending) fires on the way
            with suppress(Overtime):
                for timer in (signal.ITIMER_REAL, signal.ITIMER_PROF) if main_thread else ():
                    signal.setitimer(timer, 0)
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
                measured["seconds"] = time.perf_counter() - start
                measured["cpu"] = time.thread_time() - cpu  # this thread's: OpenBLAS's idle threads spin
                measured["mib"] = max(0.0, _status_mib("VmHWM") - before)
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                done = True


@dataclass
class Outcome:
    """What one case did: exit ``code`` (None: stopped at the hard cap), its output, ``seconds`` of wall time and
    ``cpu`` seconds, ``mib`` (in-process: growth of peak RSS; bounded: the child's peak RSS) and ``exception``
    (uncaught, in-process)."""

    code: int | None
    stdout: str
    stderr: str
    seconds: float
    cpu: float
    mib: float
    exception: BaseException | None = None


def _message_problems(stderr: str, code: int) -> list[str]:
    lines = stderr.strip().splitlines()
    if not any(line.startswith("sim: error: ") for line in lines):
        return [f"exit {code} without a 'sim: error:' line: {stderr.strip()[:300]!r}"]
    bad = [line for line in lines if not line.startswith(("sim: error: ", "sim: warning: ", "sim: note: "))
           or len(line) > LONGEST_LINE]
    return [f"exit {code} with a line that is not a short one-line error ({len(bad[0]):,} characters): "
            f"{bad[0][:300]!r}"] if bad else []


def _strict_json(text: str) -> list[str]:
    def refuse(constant: str) -> float:
        raise ValueError(f"{constant} in the JSON output")

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        return [f"--json output is not strict JSON: {str(exc)[:200]}"]
    return []


def problems(out: Outcome, *, json_out: bool = False, cap_mib: float = MEMORY_CAP_MIB) -> list[str]:
    """Every rule ``out`` breaks (empty: a clean result or refusal)."""
    found = []
    if out.code is None:
        found.append(f"still running after {out.seconds:.0f} s of wall time and {out.cpu:.0f} s of CPU (stopped)")
    elif out.exception is not None and not isinstance(out.exception, SystemExit):
        found.append(f"traceback: {type(out.exception).__name__}: {str(out.exception)[:300]}")
    elif out.code == 70:
        found.append(f"exit 70: {out.stderr.strip()[:400]}")
    elif out.code in (1, 2):
        found += _message_problems(out.stderr, out.code)
    elif out.code == 0:
        stray = [line for line in out.stderr.splitlines() if line.strip() and not line.startswith("sim: ")]
        if stray:
            found.append(f"a result with stderr lines that are not sim's: {stray[0][:300]!r}")
        if json_out:
            found += _strict_json(out.stdout)
        shown = NON_FINITE_TEXT.search(out.stdout)
        if shown:
            found.append(f"a non-finite value printed as data: {out.stdout[max(0, shown.start() - 80):shown.end()]!r}")
    else:
        found.append(f"exit {out.code}: {out.stderr.strip()[:300]}")
    if out.cpu > TIME_CAP_S:
        found.append(f"took {out.cpu:.1f} s of CPU ({out.seconds:.1f} s of wall time; cap {TIME_CAP_S:g} s)")
    if out.mib > cap_mib:
        found.append(f"{out.mib:.0f} MiB of memory (cap {cap_mib:g} MiB)")
    return found


def _signature(command: str, problem: str) -> str:
    return command + ": " + re.sub(r"\d+", "N", re.sub(r"/tmp/\S*", "TMP", problem))[:90]


def _shown_args(args: list[str]) -> list[str]:
    return [a if len(a) <= 400 else f"{a[:200]}...({len(a):,} characters)...{a[-100:]}" for a in args]


def _keep(files: Iterable[str], sig: str) -> list[str]:
    """Copies of a broken case's input ``files`` in SIM_FUZZ_KEEP (when set), to reproduce it from."""
    folder = os.environ.get("SIM_FUZZ_KEEP")
    if folder:
        os.makedirs(folder, exist_ok=True)
    kept = [(name, os.path.join(folder, f"{abs(hash(sig)) % 10**8:08d}-{os.getpid()}-{i}-{os.path.basename(name)}"))
            for i, name in enumerate(files) if folder and os.path.isfile(name)]
    return [shutil.copyfile(name, target) for name, target in kept]


def record(command: str, args: list[str], out: Outcome, found: list[str], note: str = "", bounded: bool = False,
           files: Iterable[str] = ()) -> None:
    """Count ``out`` under ``command``, label it for hypothesis's statistics, keep a broken case's reproducer (and
    copies of its input ``files``), and (unless SIM_FUZZ_KEEP_GOING) fail the test when it broke a rule."""
    s = STATS.setdefault(command, CommandStats())
    s.cases += 1
    if bounded:
        s.bounded_cases += 1
        s.bounded_max_seconds = max(s.bounded_max_seconds, out.seconds)
        s.bounded_max_cpu_seconds = max(s.bounded_max_cpu_seconds, out.cpu)
        s.bounded_max_peak_mib = max(s.bounded_max_peak_mib, out.mib)
    else:
        s.cpu_seconds += out.cpu
        if out.cpu > s.max_cpu_seconds:
            s.slowest = {"cpu_seconds": round(out.cpu, 3), "seconds": round(out.seconds, 3),
                         "args": _shown_args(args), "note": note[:300]}
        s.max_seconds = max(s.max_seconds, out.seconds)
        s.max_cpu_seconds = max(s.max_cpu_seconds, out.cpu)
        s.max_mib = max(s.max_mib, out.mib)
    if found:
        if out.code == 70:
            s.exit_70 += 1
        else:
            s.other_failures += 1
        label = "exit 70" if out.code == 70 else "broke a rule"
        sig = _signature(command, found[0])
        if len(s.failures) < KEPT_FAILURES and all(f["signature"] != sig for f in s.failures):
            s.failures.append({"signature": sig, "problems": found, "args": _shown_args(args), "note": note[:600],
                               "bounded": bounded, "kept": _keep(files, sig)})
    elif out.code == 0:
        s.results += 1
        label = "result"
    elif out.code == 2:
        s.refusals += 1
        label = "refused in one-line errors"
    else:
        s.cannot_simulate += 1
        label = "cannot be simulated (exit 1, one line)"
    event(f"{command}: {label}")
    if found and not KEEP_GOING:
        raise AssertionError(f"sim {command}: {'; '.join(found)}\n  args: {_shown_args(args)}\n  {note}")


def invoke(command: str, args: list[str], *, json_out: bool | None = None, note: str = "",
           check: Callable[[Outcome], Iterable[str]] | None = None, files: Iterable[str] = ()) -> Outcome:
    """``sim ARGS`` in-process (click's runner) under the caps, checked and recorded under ``command``; ``check``
    adds problems of a result (sane values); ``files``: the case's input files (kept when it breaks a rule).
    Returns the outcome for more checks."""
    from sim.cli import main

    result, measured = None, {"seconds": 0.0, "cpu": 0.0, "mib": 0.0}
    with suppress(Overtime), capped(measured):  # stopped: no result
        result = CliRunner().invoke(main, args)
    if result is None:  # stopped at the wall-time cap, or at twice the CPU cap
        out = Outcome(None, "", "", measured["seconds"], measured["cpu"], measured["mib"])
    else:
        out = Outcome(result.exit_code, result.stdout, result.stderr, measured["seconds"], measured["cpu"],
                      measured["mib"], result.exception)
    found = problems(out, json_out="--json" in args if json_out is None else json_out)
    if check is not None and not found and out.code == 0:
        found += list(check(out))
    record(command, args, out, found, note, files=files)
    return out


_RELAY = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from bounded import run_bounded
job = json.loads(sys.stdin.read())
r = run_bounded(job["args"], cwd=job["cwd"], timeout_s=job["timeout_s"], memory_mib=job["memory_mib"])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps(dict(r.__dict__, cpu=usage.ru_utime + usage.ru_stime)))
"""


def bounded(command: str, args: list[str], *, note: str = "", cwd: str = ROOT, files: Iterable[str] = ()) -> Outcome:
    """``python -m sim ARGS`` in a child (tests/bounded.py's run_bounded, 1 GiB of address space, killed at the hard
    cap), its whole peak RSS held to :data:`MEMORY_CAP_MIB` and its CPU time to :data:`TIME_CAP_S`; checked and
    recorded under ``command`` as a bounded case.

    run_bounded is called from a small relay process, not from this one: a child's ``ru_maxrss`` is at least its
    parent's resident set when it was forked (Linux keeps the high-water mark across exec), so a child of a pytest
    worker grown to 200 MiB would report 200 MiB whatever it used. The relay starts at about 10 MiB."""
    import subprocess
    import sys

    job = json.dumps({"args": args, "cwd": cwd, "timeout_s": HARD_CAP_S, "memory_mib": 1024})
    relay = subprocess.run([sys.executable, "-c", _RELAY, os.path.dirname(os.path.abspath(__file__))], input=job,
                           capture_output=True, text=True, timeout=HARD_CAP_S + 60, check=True)
    r = json.loads(relay.stdout)
    out = Outcome(None if r["timed_out"] else r["code"], r["stdout"], r["stderr"], r["seconds"], r["cpu"],
                  r["peak_mib"])
    found = problems(out, json_out="--json" in args)
    record(command, args, out, found, note, bounded=True, files=files)
    return out


# --- values and mutations shared by the strategies -----------------------------------------------------------------

NUMBER_TEXTS = ["0", "-0", "1", "-1", "2", "3", "7", "48", "99", "512", "4096", "65536", "1e3", "1.5", "-2.5", "0.0",
                "nan", "NaN", "inf", "-inf", "Infinity", "1e300", "-1e300", "1e-320", "1e308", "9999999999",
                "2147483647", "2147483648", "-2147483649", "18446744073709551616", "0x10", "1_000", "", " ", "abc",
                "1,2", "\u00bd", "\u0663", "1e", "+5", "05", "5" * 5000, "-" + "9" * 400, "8k", "2K", "1.5.2"]


def number_texts() -> st.SearchStrategy[str]:
    """What a user or a corrupted file might put where a number goes: numbers at every scale, spelled oddly, and
    not numbers at all."""
    return st.one_of(st.sampled_from(NUMBER_TEXTS), st.integers(-10**12, 10**12).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=8))


ODD_NUMBERS = ["-1", "0", "1e300", "-1e300", "1e-320", "nan", "inf", "99999999999999999999", "1e11", "5" * 5000, "",
               "0.5", "abc", "1e20", "-0"]


def replace_a_number(draw, line: str) -> str:
    """``line`` with one of its numbers replaced by an odd one (or as it is when it has none); ``draw``:
    hypothesis's."""
    spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", line)]
    if not spans:
        return line
    a, b = draw(st.sampled_from(spans))
    return line[:a] + draw(st.one_of(st.sampled_from(ODD_NUMBERS), number_texts())) + line[b:]


def mutate_lines(draw, lines: list[str], rounds: int = 4, copies: tuple[int, ...] = (2, 50, 3000)
                 ) -> tuple[list[str], str]:
    """``lines`` with one to ``rounds`` changes: a number replaced, a line cut, dropped, repeated, duplicated (into
    one of ``copies``) or swapped, noise inserted, a byte order mark, a cell of a CSV replaced. Returns the lines and
    what was done."""
    lines = list(lines)
    done = []
    for _ in range(draw(st.integers(1, rounds))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["number", "number", "number", "cut", "drop", "repeat", "many", "swap",
                                          "noise", "bom", "cell"]))
        if kind == "number":
            lines[i] = replace_a_number(draw, lines[i])
        elif kind == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        elif kind == "drop":
            del lines[i]
        elif kind == "repeat":
            lines[i] = lines[i] * draw(st.integers(2, 20))
        elif kind == "many":
            lines[i:i + 1] = [lines[i]] * draw(st.sampled_from(copies))
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "noise":
            lines.insert(i, draw(st.text(max_size=60)))
        elif kind == "bom":
            lines[0] = "\ufeff" + lines[0]
        else:
            cells = lines[i].split(",")
            cells[draw(st.integers(0, len(cells) - 1))] = draw(
                st.one_of(st.sampled_from(ODD_NUMBERS + ["", "\"", "x,y", "fit", "check"]), st.text(max_size=10)))
            lines[i] = ",".join(cells)
        done.append(f"{kind}@{i}")
    return lines, " ".join(done)


def finite_problems(rows: Iterable[dict], bounds: dict[str, tuple[float, float]], where: str) -> list[str]:
    """Numbers of ``rows`` (dicts) that are not finite, or outside ``bounds`` (key -> (low, high)); other numeric
    keys must be finite."""
    found = []
    for row in rows:
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(value):
                found.append(f"{where}: {key} = {value} taken as data")
            elif key in bounds and not bounds[key][0] <= value <= bounds[key][1]:
                found.append(f"{where}: {key} = {value:g} outside {bounds[key]} taken as data")
    return found[:3]


def geometry_problems(out: Outcome) -> list[str]:
    """A model read (``sim model --json``) must have layers, heads of at least one dimension, parameters and bytes
    within sim.formats.quantities' ranges and a KV cache when it has attention layers."""
    g = json.loads(out.stdout).get("geometry") if out.stdout.lstrip().startswith("{") else None
    if not isinstance(g, dict):
        return []
    found = [f"{key} = {g.get(key)!r} taken as data" for key in ("layers", "heads", "head_dim", "hidden", "vocab")
             if not (isinstance(g.get(key), int) and g[key] >= 1)]
    found += [f"{key} = {g.get(key)!r} taken as data" for key, top in (("total_params", PARAMETERS.hi),
              ("weights_bytes", SIZE_BYTES.hi)) if not (isinstance(g.get(key), int | float) and 0 < g[key] <= top)]
    if g.get("attention_layers") and not g.get("kv_bytes_per_token", 0) > 0:
        found.append(f"{g['attention_layers']} attention layers and a KV cache of {g.get('kv_bytes_per_token')} bytes "
                     "per token taken as data")
    return found
