"""Where a sweep's runs are simulated: this process, a local process pool (forkserver workers that import the
simulator once), or an existing Dask cluster whose workers run this very code. Each backend yields ``(task index,
record)`` as runs finish; a lost worker or run is a :class:`BackendFailure`, never a silently missing row."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from sim.core.errors import ScenarioError, SimulationError
from sim.core.numerics import numpy_dispatch
from sim.sweeps.keys import code_digest
from sim.sweeps.tasks import Task

WATCH_S = 1.0  # seconds between a worker's checks that the sweep that started it is still there


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and says what was saved


def _die_with_parent() -> bool:
    """Linux: have the kernel send this process SIGKILL when its parent (the forkserver, or the sweep itself under
    spawn) exits. False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _alive(pid: int) -> bool:
    """Whether process ``pid`` is still there (always True on Windows, where ``os.kill`` would end it)."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: there, but not ours (the pid reused): gone
        return False
    return True


def _watch_parent(sweep_pid: int, parent_pid: int) -> None:
    """Exit this worker at once when the sweep that started it or its own parent goes away (``kill -9`` of the
    sweep leaves nobody to stop the workers)."""
    while True:
        time.sleep(WATCH_S)
        if os.getppid() != parent_pid or not _alive(sweep_pid):
            os._exit(1)


def _worker_init(sweep_pid: int) -> None:
    """Each pool worker: leave Ctrl-C to the sweep, and end when the sweep ends however it ends (a parent-death
    signal where the kernel has one, and a watchdog thread in any case: under forkserver the worker's parent is the
    server, not the sweep)."""
    _ignore_sigint()
    parent = os.getppid()
    if parent == 1 or not _alive(sweep_pid):  # started after the sweep died
        os._exit(1)
    _die_with_parent()
    threading.Thread(target=_watch_parent, args=(sweep_pid, parent), name="sim-watch-parent", daemon=True).start()


def _run_task(task: Task) -> tuple[int, dict]:
    """One run's stored record (``sim.runner.run_record``)."""
    from sim.runner import run_record

    return task.index, run_record(task.scenario, task.seed)


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
            ctx.set_forkserver_preload(["__main__", "sim.sweeps.backends", "sim.runner"])
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(),))
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
        kernels = self.client.run(numpy_dispatch)
        other = sorted(w for w, k in kernels.items() if k != numpy_dispatch())
        if other:
            self.close()
            raise ScenarioError("--dask", address, f"workers whose numpy uses the kernels this process uses "
                                f"({', '.join(numpy_dispatch()) or 'baseline only'}); {len(other)} of {len(kernels)} "
                                f"use {', '.join(kernels[other[0]]) or 'baseline only'} (e.g. {other[0]}), which "
                                "round differently: start them with NPY_ENABLE_CPU_FEATURES=' ' (sim.core.numerics)")
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
