"""``sim sweep``: run every point of a plan (x seeds x parameter draws), resumably, on one core, a local process
pool or a Dask cluster, into one tidy table.

Each run is keyed by a hash of what decides its result: the fully resolved scenario (its file, calibration values,
the sweep's and the point's changes, a parameter draw), the seed, the contents of every file it reads and the
source of the simulator itself. A finished run is stored at once as ``DIR/points/KEY.json`` (atomically), so an
interrupted sweep loses at most the runs in flight, a re-run skips what is stored, and a changed scenario or changed
code never reuses a stale row. The tables (``results.parquet``, ``results.csv``) and ``sweep.json`` are written
from the store when the sweep starts (what an earlier run left), every 30 s while it runs, and at the end, also after
Ctrl-C, SIGTERM or a failure (``complete: false`` until every run is done). Ctrl-C and SIGTERM stop the sweep between
runs, never in the middle of saving one or of the tables (:func:`sim.sweeps.backends.stop_on_signals`), so the store
and ``sweep.json`` always agree on what is done.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator

from sim.core.output import atomic_write_text, dumps
from sim.core.progress import Bar
from sim.core.progress import progress as progress_bar
from sim.sweeps.backends import Backend, BackendFailure, serial_backend, stop_on_signals
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
    with what is done saved and the tables written (``complete`` false); one that comes once every run is saved
    (while the last tables are written) raises ``KeyboardInterrupt`` after them. A failure of the pool or cluster
    too, then raises ``BackendFailure``. ``on_saved(n)`` is called after each saved run; ``prepared``: what
    ``prepare_tasks(plan, seed)`` returned, when the caller has it already."""
    from sim.sweeps.overlays import resolve_plan_overlays

    resolve_plan_overlays(plan)  # a bad measured table fails here, before anything is written
    tasks, names, held = prepared or prepare_tasks(plan, seed, quiet)
    sweep = _Sweep(plan, out_dir, tasks, names, held)
    # from the first file written to the last, a signal is a request to stop, acted on between runs (sweeps.backends)
    with stop_on_signals() as stop:
        failure = sweep.run(backend, quiet, on_saved)
    result = sweep.result
    if failure is not None and not stop.requested:  # a failure seen after a Ctrl-C or SIGTERM: the stop wins
        raise BackendFailure(f"{failure}: {len(result.rows)} of {len(tasks)} runs saved in {out_dir}; the same "
                             "command runs the rest")
    if stop.requested and result.complete:
        raise KeyboardInterrupt
    return result


class _Sweep:
    """One invocation of a sweep: the store, the records found and saved, the tables written from them."""

    def __init__(self, plan: Plan, out_dir: str, tasks: list[Task], names: list[str], held: list[str]):
        self.plan, self.out_dir, self.tasks, self.names, self.held = plan, out_dir, tasks, names, held
        self.facts = scenario_facts(plan)  # read once, written with every table
        self.records: dict[int, dict] = {}
        self.ran = self.reused = 0
        self.complete = False
        self.result: SweepResult | None = None

    def tables(self) -> SweepResult:
        """Write the tables and ``sweep.json`` of what is stored now."""
        rows = table_rows(self.plan, self.tasks, self.records)
        self.result = SweepResult(self.plan, self.tasks, rows=rows, ran=self.ran, reused=self.reused,
                                  complete=self.complete and len(rows) == len(self.tasks),
                                  errors=sum(1 for r in rows if r.get("error")), parameters=self.names,
                                  held=self.held)
        write_results(self.out_dir, self.result, self.facts)
        return self.result

    def run(self, backend: Backend, quiet: bool, on_saved: Callable[[int], None] | None) -> BackendFailure | None:
        """Run and save what the store lacks; the tables are written at the end however it ends. The backend's
        failure, if it failed; a Ctrl-C (``KeyboardInterrupt``) ends it as it is."""
        store = Store(self.out_dir)
        store.open()
        for t in self.tasks:
            rec = store.get(t.key)
            if rec is not None:
                self.records[t.index] = rec
        self.reused = len(self.records)
        todo = [t for t in self.tasks if t.index not in self.records]
        if todo:  # tables of an earlier sweep in this folder never pass for this one's: they say what is done so far
            self.tables()
        # runs done of all (those reused included, not in the rate), rate, ETA; on stderr, as sim.core.progress says
        bar = progress_bar(len(self.tasks), "sweep", unit="run", initial=self.reused, disable=quiet)
        bar.set_postfix_str(f"{self.reused} from earlier runs")
        failure: BackendFailure | None = None
        try:
            self._save_all(backend(todo) if todo else iter(()), store, bar, on_saved)
            self.complete = True
        except KeyboardInterrupt:
            pass
        except BackendFailure as exc:
            failure = exc
        finally:  # whatever stopped it, the tables say what is stored
            bar.close()
            self.tables()
        return failure

    def _save_all(self, results: Iterator[tuple[int, dict]], store: Store, bar: Bar,
                  on_saved: Callable[[int], None] | None) -> None:
        written = time.monotonic()
        for index, record in results:
            t = self.tasks[index]
            store.put(t.key, t.seed, record)
            self.records[index] = {"key": t.key, "seed": t.seed, **record}
            self.ran += 1
            bar.update()
            if on_saved:
                on_saved(self.ran)
            if time.monotonic() - written > REFRESH_S:  # a long sweep can be looked at (sim plot) while it runs
                self.tables()
                written = time.monotonic()
