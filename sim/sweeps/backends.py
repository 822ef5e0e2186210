"""Where a sweep's runs are simulated: this process, a local process pool (forkserver workers that import the
simulator once), or an existing Dask cluster whose workers run this very code. Each backend yields ``(task index,
record)`` as runs finish; a lost worker or run is a :class:`BackendFailure`, never a silently missing row.

Ctrl-C and SIGTERM while a sweep runs (inside :func:`stop_on_signals`) are a :class:`StopRequest`: the signal
handler only notes it and wakes the wait for results; each backend raises ``KeyboardInterrupt`` itself where nothing
is half done (between two results, or inside a run simulated in this process). A ``KeyboardInterrupt`` raised by the
default handler wherever the main thread happens to be can land inside a lock: in ``threading.Condition.wait``
(``concurrent.futures.as_completed`` waits on one) between releasing its lock and taking it back, the ``with`` then
fails with ``RuntimeError: release unlocked lock`` instead of stopping the sweep."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Empty, SimpleQueue

from sim.core.errors import ScenarioError, SimulationError
from sim.core.numerics import numpy_dispatch
from sim.sweeps.keys import code_digest
from sim.sweeps.tasks import Task

WATCH_S = 1.0  # seconds between a worker's checks that the sweep that started it is still there
WAKE_S = 0.25  # seconds between looks at a stop request while waiting for results (a signal taken by another
# thread does not wake the main thread's wait; the handler's own wake-up does when the main thread takes it)
_WAKE = object()  # put in a results queue by the signal handler: look at the stop request now


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM received while a sweep runs: its handler notes the signal and wakes the waits for
    results, and raises ``KeyboardInterrupt`` at once only while a run is simulated in this thread (nothing of the
    sweep's own is half done then: no file being saved, no lock held by the pool's code)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.running = False  # a run is being simulated in this thread (the serial backend)
        self.queues: list[SimpleQueue] = []  # the results queues waited on

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def handler(self, signum: int, frame: object) -> None:
        """The signal handler: note, wake (``SimpleQueue.put`` is reentrant, safe here), and stop a run in this
        thread."""
        if self.signum is None:
            self.signum = signum
        for queue in tuple(self.queues):
            queue.put(_WAKE)
        if self.running:
            self.running = False
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a stop was requested: called where the sweep can stop cleanly."""
        if self.signum is not None:
            raise KeyboardInterrupt


_current: StopRequest | None = None  # the sweep running in this process, if any


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """While the block runs, SIGINT and SIGTERM make a :class:`StopRequest` rather than raise wherever the main
    thread is; the earlier handlers are restored after it. SIGINT is taken over only from Python's default handler
    (ignored, in a background job, it stays ignored; a handler of the caller's stays). Outside the main thread, where
    no handler can be set, no stop is ever requested."""
    global _current
    stop = StopRequest()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, stop.handler)
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, stop.handler)
    outer, _current = _current, stop
    try:
        yield stop
    finally:
        _current = outer
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _check_stop() -> None:
    if _current is not None:
        _current.check()


def _completions(queue: SimpleQueue, count: int) -> Iterator:
    """What the futures' done callbacks put in ``queue`` (the futures themselves), ``count`` in all, as they finish.
    A stop request raises ``KeyboardInterrupt`` here, between two results; the wait itself (``SimpleQueue.get``, in
    C) holds no lock a signal could leave half taken."""
    stop = _current
    if stop is not None:
        stop.queues.append(queue)
    try:
        left = count
        while left:
            _check_stop()
            try:
                item = queue.get(timeout=WAKE_S)
            except Empty:
                continue
            if item is _WAKE:
                continue
            _check_stop()  # a stop requested while waiting wins over this result (even a failed one)
            left -= 1
            yield item
    finally:
        if stop is not None:
            stop.queues.remove(queue)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while the pool starts its processes, which inherit the mask (the forkserver,
    and each worker it forks): a Ctrl-C the terminal sends to its whole process group then reaches the sweep only,
    which stops them, instead of killing the forkserver in its imports or a worker before its initializer, each with
    a traceback (CPython's resource tracker is started the same way). No signal is lost: another thread of this
    process takes it, or it waits until unblocked."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # started now, not inside: starting it unblocks SIGINT and SIGTERM after
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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
    """Each run in this process, in order."""
    for t in tasks:
        yield _run_here(t)


def _run_here(task: Task) -> tuple[int, dict]:
    """One run in this thread; a stop requested before it or while it runs raises ``KeyboardInterrupt`` at once."""
    stop = _current
    if stop is None:
        return _run_task(task)
    stop.running = True
    try:
        stop.check()
        return _run_task(task)
    finally:
        stop.running = False


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
    """``workers`` local processes (forkserver, else spawn)."""

    def run(tasks: list[Task]) -> Iterator[tuple[int, dict]]:
        from concurrent.futures.process import BrokenProcessPool

        done: SimpleQueue = SimpleQueue()
        with _sigint_blocked():
            pool = _start_pool(workers)
            futures = _submit(pool, tasks, done)
        yielded: set = set()
        try:
            for f in _completions(done, len(futures)):
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


def _start_pool(workers: int):
    """The process pool. forkserver: workers start from a clean process, not a copy of this one and its threads; the
    server imports the simulator once (about 0.3 s of CPU) and each worker is a fork of it, not an import of its
    own."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["__main__", "sim.sweeps.backends", "sim.runner"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(),))


def _submit(pool, tasks: list[Task], done: SimpleQueue) -> list:
    """Every task submitted (the pool starts its workers as they are needed), each future put in ``done`` when it
    finishes; fewer when a stop is requested meanwhile."""
    futures = []
    for t in tasks:
        if _current is not None and _current.requested:
            break
        f = pool.submit(_run_task, t)
        f.add_done_callback(done.put)
        futures.append(f)
    return futures


_DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")
DASK_CONNECT_S = 10.0  # seconds a scheduler has to answer (distributed retries a refused connection until then)


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
            self.client = Client(address, timeout=f"{DASK_CONNECT_S:g}s", set_as_default=False)
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
        client = self.client
        done: SimpleQueue = SimpleQueue()
        futures = []
        for t in tasks:
            if _current is not None and _current.requested:
                break
            f = client.submit(_run_task, t, key=f"sim-{t.key}-{t.index}", pure=False)
            f.add_done_callback(done.put)  # called on a thread of the client, whatever the run's outcome
            futures.append(f)
        yielded: set = set()
        try:
            for f in _completions(done, len(futures)):
                item = _dask_result(f)
                yielded.add(f)
                yield item
        except KeyboardInterrupt:
            yield from _drain(futures, yielded)
            raise
        finally:
            client.cancel(futures)


def _dask_result(f) -> tuple[int, dict]:
    """A finished Dask future's ``(index, record)``; a lost run is a :class:`BackendFailure`."""
    try:
        return f.result()
    except (KeyboardInterrupt, SimulationError):
        raise
    except Exception as exc:
        name = type(exc).__name__
        if name in ("KilledWorker", "CancelledError", "CommClosedError", "FutureCancelledError") or \
                isinstance(exc, OSError | TimeoutError):
            raise BackendFailure(f"the Dask cluster lost a run ({name}: {exc})") from None
        raise
