"""``sim sweep``: run every point of a plan (x seeds x parameter draws), resumably, on one core, a local process
pool or a Dask cluster, into one tidy table.

Each run is keyed by a hash of what decides its result: the fully resolved scenario (its file, calibration values,
the sweep's and the point's changes, a parameter draw), the seed, the contents of every file it reads and the
source of the simulator itself. A finished run is stored at once as ``DIR/points/KEY.json`` (atomically), so an
interrupted sweep loses at most the runs in flight, a re-run skips what is stored, and a changed scenario or changed
code never reuses a stale row. The tables (``results.parquet``, ``results.csv``) and ``sweep.json`` are written
from the store when the sweep starts (what an earlier run left), every 30 s while it runs, and at the end, also after
Ctrl-C, SIGTERM or a failure (``complete: false`` until every run is done).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable

from sim.core.output import atomic_write_text, dumps
from sim.core.progress import progress as progress_bar
from sim.sweeps.backends import Backend, BackendFailure, serial_backend
from sim.sweeps.results import scenario_facts, table_rows, write_results
from sim.sweeps.spec import Plan
from sim.sweeps.tasks import SweepResult, Task, prepare_tasks

POINTS_DIR = "points"


REFRESH_S = 30.0  # seconds between rewrites of the tables while a sweep runs


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
    tasks, names, held = prepared or prepare_tasks(plan, seed, quiet)
    store = Store(out_dir)
    store.open()
    records: dict[int, dict] = {}
    for t in tasks:
        rec = store.get(t.key)
        if rec is not None:
            records[t.index] = rec
    reused = len(records)
    todo = [t for t in tasks if t.index not in records]
    ran, complete = 0, False
    facts = scenario_facts(plan)  # read once, written with every table

    def tables() -> SweepResult:
        rows = table_rows(plan, tasks, records)
        res = SweepResult(plan, tasks, rows=rows, ran=ran, reused=reused, complete=complete and len(rows) == len(tasks),
                          errors=sum(1 for r in rows if r.get("error")), parameters=names, held=held)
        write_results(out_dir, res, facts)
        return res

    if todo:  # tables of an earlier sweep in this folder never pass for this one's: they say what is done so far
        tables()
    written = time.monotonic()
    previous = _stop_on_sigterm()
    failure: BackendFailure | None = None
    # runs done of all (those reused included, not in the rate), rate, ETA; on stderr, as sim.core.progress says
    bar = progress_bar(len(tasks), "sweep", unit="run", initial=reused, disable=quiet)
    bar.set_postfix_str(f"{reused} from earlier runs")
    try:
        for index, record in backend(todo) if todo else ():
            t = tasks[index]
            store.put(t.key, t.seed, record)
            records[index] = {"key": t.key, "seed": t.seed, **record}
            ran += 1
            bar.update()
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
        bar.close()
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
