"""``sim sweep``: run every point of a plan (x seeds x parameter draws), resumably, on one core, a local process
pool or a Dask cluster, into one tidy table.

Each run is keyed by a hash of what decides its result: the fully resolved scenario (its file, calibration values,
the sweep's and the point's changes, a parameter draw), the seed, the contents of any trace file it replays and the
source of the simulator itself. A finished run is stored at once as ``DIR/points/KEY.json`` (atomically), so an
interrupted sweep loses at most the runs in flight, a re-run skips what is stored, and a changed scenario or changed
code never reuses a stale row. The tables (``results.parquet``, ``results.csv``) and ``sweep.json`` are written
from the store when the sweep starts (what an earlier run left), every 30 s while it runs, and at the end, also after
Ctrl-C, SIGTERM or a failure (``complete: false`` until every run is done).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.config.scenario import Scenario, load_scenario
from sim.core.errors import ScenarioError, SimulationError
from sim.core.output import atomic_write_text, atomic_write_with, dumps
from sim.sweeps.spec import RESERVED_COLUMNS, Plan
from sim.sweeps.table import Column, csv_text, typed_columns, write_parquet

POINTS_DIR = "points"
REFRESH_S = 30.0  # seconds between rewrites of the tables while a sweep runs
_CODE_DIGEST: str | None = None
_FILE_DIGESTS: dict[tuple, str] = {}


def simulation_modules() -> list[str]:
    """The modules a run's result can depend on: ``sim.runner`` and ``sim.scenario`` (defaults, validation) and
    every module they import, directly or not, found by reading their ``from sim.x import`` lines (so a change to
    plotting or the command line does not make stored runs stale)."""
    folder = os.path.dirname(os.path.abspath(__file__))
    todo, seen = ["runner", "scenario"], set()
    while todo:
        name = todo.pop()
        if name in seen or not os.path.isfile(os.path.join(folder, f"{name}.py")):
            continue
        seen.add(name)
        with open(os.path.join(folder, f"{name}.py"), encoding="utf-8") as fh:
            text = fh.read()
        todo += re.findall(r"^\s*from \.(\w+) import", text, flags=re.MULTILINE)
        for names in re.findall(r"^\s*from \. import ([\w, ]+)", text, flags=re.MULTILINE):
            todo += [n.strip().split(" as ")[0] for n in names.split(",")]
    return sorted(seen)


def code_digest() -> str:
    """sha256 of the source of the modules a run depends on and of the versions of Python and the libraries that
    draw its numbers: rows from other code are not reused."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        import numpy
        import simpy

        folder = os.path.dirname(os.path.abspath(__file__))
        h = hashlib.sha256(f"python {sys.version_info[:2]} numpy {numpy.__version__} simpy "
                           f"{getattr(simpy, '__version__', '')}\0".encode())
        for name in simulation_modules():
            with open(os.path.join(folder, f"{name}.py"), "rb") as fh:
                h.update(name.encode() + b"\0" + fh.read() + b"\0")
        _CODE_DIGEST = h.hexdigest()
    return _CODE_DIGEST


def file_digest(path: str) -> str:
    st = os.stat(path)
    stamp = (os.path.abspath(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    if stamp not in _FILE_DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _FILE_DIGESTS[stamp] = h.hexdigest()
    return _FILE_DIGESTS[stamp]


# what cannot change a run's result: left out of its key, so editing them reuses the rows
_NOT_RESULTS = ("description", "calibrate", "uncertainty")


def run_key(resolved: dict, seed: int) -> str:
    """Hash of a resolved scenario mapping, the seed, the trace it replays (by content) and the code."""
    data = {k: v for k, v in resolved.items() if k not in _NOT_RESULTS}
    workload = ((data.get("serve") or {}).get("workload") or {}) if isinstance(data.get("serve"), dict) else {}
    trace = workload.get("trace") if isinstance(workload, dict) else None
    if isinstance(trace, str) and os.path.isfile(trace):
        data = copy.deepcopy(data)
        data["serve"]["workload"]["trace"] = "sha256:" + file_digest(trace)
    text = json.dumps({"scenario": data, "seed": seed, "code": code_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass
class Task:
    """One simulation of a sweep: a point, a seed and (with --uncertainty) a parameter draw."""

    index: int  # position in the sweep's table
    point: int
    seed: int
    draw: int | None
    params: dict[str, float]
    key: str
    scenario: Scenario


@dataclass
class SweepResult:
    plan: Plan
    tasks: list[Task]
    rows: list[dict]
    ran: int  # simulated in this invocation
    reused: int  # found in the store
    complete: bool
    errors: int
    parameters: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)


def prepare_tasks(plan: Plan, seed: int | None) -> tuple[list[Task], list[str], list[str]]:
    """Validate every point (a bad value is one line naming its --set) and key every run; (tasks, drawn parameter
    names, held parameter names)."""
    tasks: list[Task] = []
    names: list[str] = []
    held: list[str] = []
    for p, sets in enumerate(plan.point_sets):
        scn, resolved = load_scenario(plan.scenario, sets)
        base = scn.seed if seed is None else seed
        if plan.uncertainty:
            from sim.calibration.uncertainty import parameter_draws

            names, held, draw_sets = parameter_draws(plan.scenario, sets, plan.uncertainty, base)
            draws = []
            for k, dsets in enumerate(draw_sets):
                dscn, dresolved = load_scenario(plan.scenario, dsets)
                params = {n: float(s.split("=", 1)[1]) for n, s in zip(names, dsets[len(sets):], strict=True)}
                draws.append((k, params, dscn, dresolved))
        else:
            draws = [(None, {}, scn, resolved)]
        for j in range(plan.seeds):
            for k, params, dscn, dresolved in draws:
                run_seed = base + j + plan.seeds * (k or 0)
                tasks.append(Task(len(tasks), p, run_seed, k, params, run_key(dresolved, run_seed), dscn))
    return tasks, names, held


def simulate(scenario: Scenario, seed: int) -> dict:
    """One run's stored record (``sim.runner.run_record``: inside the code digest, as what it stores is a result)."""
    from sim.runner import run_record

    return run_record(scenario, seed)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and says what was saved


def _run_task(task: Task) -> tuple[int, dict]:
    return task.index, simulate(task.scenario, task.seed)


class Store:
    """Finished runs, one JSON file each under ``DIR/points``."""

    def __init__(self, out_dir: str):
        self.folder = os.path.join(out_dir, POINTS_DIR)

    def open(self) -> None:
        """Make the folder; remove what writes cut short left behind (temporary files, never a point's own file)."""
        os.makedirs(self.folder, exist_ok=True)
        for name in os.listdir(self.folder):
            if name.startswith(".") and name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self.folder, name))
                except OSError:
                    pass

    def path(self, key: str) -> str:
        return os.path.join(self.folder, f"{key}.json")

    def get(self, key: str) -> dict | None:
        try:
            with open(self.path(key), encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("key") == key else None

    def put(self, key: str, seed: int, record: dict) -> None:
        atomic_write_text(self.path(key), dumps({"key": key, "seed": seed, **record}))


class Progress:
    """Runs done, rate and ETA on stderr: one line redrawn on a terminal, a line every few seconds otherwise."""

    def __init__(self, total: int, reused: int, quiet: bool, stream=None):
        self.total, self.reused, self.quiet = total, reused, quiet
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()
        self.last = -math.inf

    def update(self, done: int, final: bool = False) -> None:
        now = time.monotonic()
        if self.quiet or (not final and now - self.last < (0.2 if self.tty else 5.0)):
            return
        self.last = now
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.reused - done
        eta = f"{left / rate:.0f} s" if rate > 0 else "-"
        text = (f"sweep: {self.reused + done}/{self.total} runs ({self.reused} from earlier runs), "
                f"{rate:.2f} runs/s, ETA {eta}")
        if self.tty:
            self.stream.write("\r" + text.ljust(78) + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


Backend = Callable[[list[Task]], Iterator[tuple[int, dict]]]


class BackendFailure(SimulationError):
    """The pool or cluster lost runs (a worker died, the scheduler went away): not the scenario's fault."""


def serial_backend(tasks: list[Task]) -> Iterator[tuple[int, dict]]:
    for t in tasks:
        yield _run_task(t)


def _drain(futures, yielded: set) -> Iterator[tuple[int, dict]]:
    """Results that are finished but not yet handed over when the sweep is stopped: saved, not thrown away."""
    for f in futures:
        if f not in yielded and f.done() and not f.cancelled():
            try:
                item = f.result()
            except Exception:  # noqa: BLE001 - a failed run is simply not saved
                continue
            yielded.add(f)
            yield item


def pool_backend(workers: int) -> Backend:
    def run(tasks: list[Task]) -> Iterator[tuple[int, dict]]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        # forkserver: workers start from a clean process, not a copy of this one and its threads; the server imports
        # the simulator once (about 0.3 s of CPU) and each worker is a fork of it, not an import of its own
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["__main__", "sim.sweeps.run", "sim.runner"])
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint)
        futures = [pool.submit(_run_task, t) for t in tasks]
        yielded: set = set()
        try:
            for f in as_completed(futures):
                try:
                    item = f.result()
                except BrokenProcessPool as exc:
                    raise BackendFailure(f"a worker process died ({exc or 'BrokenProcessPool'})") from None
                yielded.add(f)
                yield item
        except KeyboardInterrupt:
            yield from _drain(futures, yielded)
            raise
        finally:  # stopped, failed or done: drop what has not started, stop the workers
            for f in futures:
                f.cancel()
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=True, cancel_futures=True)

    return run


_DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


class DaskBackend:
    """Runs on an existing Dask cluster. Connects (and checks that its workers run this very sim code) when made,
    so a wrong address fails at once, before any run is prepared."""

    def __init__(self, address: str):
        m = re.fullmatch(r"(\w+)://([^/\s:]+|\[[0-9a-fA-F:]+\]):(\d+)", address.strip())
        if not m or m.group(1) not in _DASK_SCHEMES:
            raise ScenarioError("--dask", address, f"a scheduler address SCHEME://HOST:PORT, SCHEME one of "
                                f"{', '.join(_DASK_SCHEMES)} (e.g. tcp://HOST:8786)")
        try:
            from distributed import Client
        except ImportError:
            raise ScenarioError("--dask", address, "the `distributed` package: pip install 'sim[dask]'") from None
        self.address = address
        try:
            self.client = Client(address, timeout="10s", set_as_default=False)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            raise ScenarioError("--dask", address, f"a reachable Dask scheduler ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else 'no answer'})") from None
        try:
            digests = self.client.run(code_digest)  # on every worker: the digest of the sim it would run
        except Exception as exc:  # noqa: BLE001 - a worker that cannot import sim, say
            self.close()
            raise ScenarioError("--dask", address, f"workers that can run sim ({type(exc).__name__}: {exc})") \
                from None
        if not digests:
            self.close()
            raise ScenarioError("--dask", address, "a cluster with at least one worker")
        other = sorted(w for w, d in digests.items() if d != code_digest())
        if other:
            self.close()
            raise ScenarioError("--dask", address, f"workers running this sim's code and libraries; {len(other)} of "
                                f"{len(digests)} run other code (e.g. {other[0]}): install this checkout there")

    def close(self) -> None:
        self.client.close()

    def __call__(self, tasks: list[Task]) -> Iterator[tuple[int, dict]]:
        from distributed import as_completed

        client = self.client
        futures = [client.submit(_run_task, t, key=f"sim-{t.key}-{t.index}", pure=False) for t in tasks]
        yielded: set = set()
        try:
            for f in as_completed(futures, loop=client.loop):
                try:
                    item = f.result()
                except (KeyboardInterrupt, SimulationError):
                    raise
                except Exception as exc:
                    name = type(exc).__name__
                    if name in ("KilledWorker", "CancelledError", "CommClosedError", "FutureCancelledError") or \
                            isinstance(exc, OSError | TimeoutError):
                        raise BackendFailure(f"the Dask cluster lost a run ({name}: {exc})") from None
                    raise
                yielded.add(f)
                yield item
        except KeyboardInterrupt:
            yield from _drain(futures, yielded)
            raise
        finally:
            client.cancel(futures)


def run_sweep(plan: Plan, out_dir: str, seed: int | None = None, backend: Backend = serial_backend,
              quiet: bool = False, on_saved: Callable[[int], None] | None = None,
              prepared: tuple[list[Task], list[str], list[str]] | None = None) -> SweepResult:
    """Run what the store lacks, save each run as it finishes, then write the tables. Ctrl-C or SIGTERM stops it
    with what is done saved and the tables written (``complete`` false); a failure of the pool or cluster too, then
    raises ``BackendFailure``. ``on_saved(n)`` is called after each saved run; ``prepared``: what
    ``prepare_tasks(plan, seed)`` returned, when the caller has it already."""
    if plan.sweep_file and not plan.measured_points:  # a bad measured table fails here, before anything is written
        from sim.sweeps.overlays import resolve_overlays

        x, hue = (plan.plot.x, plan.plot.hue) if plan.plot else (None, None)
        plan.measured_points = resolve_overlays(plan.measured, plan.sweep_file, x, hue)
    tasks, names, held = prepared or prepare_tasks(plan, seed)
    store = Store(out_dir)
    store.open()
    records: dict[int, dict] = {}
    for t in tasks:
        rec = store.get(t.key)
        if rec is not None:
            records[t.index] = rec
    reused = len(records)
    todo = [t for t in tasks if t.index not in records]
    progress = Progress(len(tasks), reused, quiet)
    ran, complete = 0, False
    facts = scenario_facts(plan)  # read once, written with every table

    def tables() -> SweepResult:
        rows = table_rows(plan, tasks, records)
        res = SweepResult(plan, tasks, rows, ran, reused, complete and len(rows) == len(tasks),
                          sum(1 for r in rows if r.get("error")), names, held)
        write_results(out_dir, res, facts)
        return res

    if todo:  # tables of an earlier sweep in this folder never pass for this one's: they say what is done so far
        tables()
    written = time.monotonic()
    previous = _stop_on_sigterm()
    failure: BackendFailure | None = None
    try:
        for index, record in backend(todo) if todo else ():
            t = tasks[index]
            store.put(t.key, t.seed, record)
            records[index] = {"key": t.key, "seed": t.seed, **record}
            ran += 1
            progress.update(ran)
            if on_saved:
                on_saved(ran)
            if time.monotonic() - written > REFRESH_S:  # a long sweep can be looked at (sim plot) while it runs
                tables()
                written = time.monotonic()
        complete = True
    except KeyboardInterrupt:
        pass
    except BackendFailure as exc:
        failure = exc
    finally:  # whatever stopped it, the tables say what is stored
        _restore_sigterm(previous)
        progress.update(ran, final=True)
        result = tables()
    if failure is not None:
        raise BackendFailure(f"{failure}: {len(result.rows)} of {len(tasks)} runs saved in {out_dir}; the same "
                             "command runs the rest")
    return result


def _stop_on_sigterm():
    """SIGTERM (timeout, docker stop, a batch system) stops a sweep as Ctrl-C does; only the main thread can."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def table_rows(plan: Plan, tasks: Iterable[Task], records: dict[int, dict]) -> list[dict]:
    """One row per finished run, in sweep order: point, axis values, seed, draw and drawn values, error, metrics."""
    rows = []
    for t in tasks:
        rec = records.get(t.index)
        if rec is None:
            continue
        row: dict[str, Any] = {"point": t.point, **plan.points[t.point], "seed": t.seed}
        if plan.uncertainty:
            row["draw"] = t.draw
            row.update({f"param.{n}": v for n, v in t.params.items()})
        row["key"] = t.key
        row["error"] = rec.get("error") or ""
        for name, value in sorted(rec.get("metrics", {}).items()):
            row["metric." + name if name in row else name] = value  # an axis named like a metric keeps its column
        rows.append(row)
    return rows


def axis_as_text(values) -> bool:
    """An axis whose values are not all numbers or all text is stored as JSON text (null, true, [1, 2], "1"), so
    its column has one type in every table of the sweep and no two values look alike."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return not (numeric or all(isinstance(v, str) for v in values))


def results_frame(rows: list[dict], axes: list):
    """The tidy table as a DataFrame: metrics as floats, each axis column of one type (decided by all the values of
    the axis, not by the rows done so far)."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    names = [a.name for a in axes]
    front = [c for c in frame.columns if not _is_metric(c, names)]
    metrics = sorted(c for c in frame.columns if _is_metric(c, names))
    frame = frame[front + metrics]
    for c in metrics:
        frame[c] = frame[c].astype(float)
    for a in axes:
        if axis_as_text(a.values):
            frame[a.name] = [json.dumps(v) for v in frame[a.name]]
    return frame


def _is_metric(column: str, axes: list[str]) -> bool:
    return column not in axes and column not in RESERVED_COLUMNS and not column.startswith("param.")


def _atomic_parquet(frame, path: str) -> None:
    atomic_write_with(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))


def scenario_facts(plan: Plan) -> dict:
    """Values of the swept scenario the figures need beside the metrics (the dispatcher's tie threshold)."""
    scn, _ = load_scenario(plan.scenario, plan.point_sets[0] if plan.point_sets else plan.base_sets)
    return {"name": scn.name, "tie_threshold": scn.dispatch.tie_threshold, "machines": list(scn.machines)}


def results_columns(rows: list[dict], axes: list) -> list[Column] | None:
    """The columns of ``results_frame(rows, axes)`` as plain lists (``sim.sweep_table``), or None when a value
    needs pandas to be typed as that frame types it."""
    names = [a.name for a in axes]
    columns = list(dict.fromkeys(c for r in rows for c in r))  # in order of first appearance, as pandas
    front = [c for c in columns if not _is_metric(c, names)]
    metrics = sorted(c for c in columns if _is_metric(c, names))
    return typed_columns(rows, front, metrics, {a.name for a in axes if axis_as_text(a.values)})


def write_results(out_dir: str, res: SweepResult, facts: dict) -> None:
    """``results.parquet``, ``results.csv``, then ``sweep.json`` (last: what it says describes the tables). Without
    pandas when ``results_columns`` types every value (pandas' import would be most of a short sweep's time)."""
    plan = res.plan
    parquet_path, csv_path = os.path.join(out_dir, "results.parquet"), os.path.join(out_dir, "results.csv")
    columns = results_columns(res.rows, plan.axes)
    if columns is not None:
        atomic_write_with(parquet_path, lambda tmp: write_parquet(columns, tmp))
        atomic_write_text(csv_path, csv_text(columns))
    else:
        frame = results_frame(res.rows, plan.axes)
        _atomic_parquet(frame, parquet_path)
        atomic_write_text(csv_path, frame.to_csv(index=False, lineterminator="\n"))
    manifest = {
        "scenario": plan.scenario, "sweep_file": plan.sweep_file, "set": plan.base_sets,
        "axes": [a.as_dict() for a in plan.axes], "zip": plan.zip, "seeds": plan.seeds,
        "uncertainty": plan.uncertainty, "parameters": res.parameters, "held": res.held,
        "points": len(plan.points), "runs": len(res.tasks), "runs_done": len(res.rows),
        "complete": res.complete and len(res.rows) == len(res.tasks), "errors": res.errors,
        "plot": plan.plot.model_dump() if plan.plot else None,
        "measured": plan.measured_points,
        "facts": facts,
        "code": code_digest(),
    }
    atomic_write_text(os.path.join(out_dir, "sweep.json"), dumps(manifest))
