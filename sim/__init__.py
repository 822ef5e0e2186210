"""sim: a discrete-event simulator of loading and serving LLMs on real, imperfect hardware.

The public Python API (:mod:`sim.api`): ``sim.load(path)`` gives a :class:`Scenario` to change (``.set``) and run
(``.run``); a :class:`Run` holds the metrics and the tables as pandas DataFrames. Bad input raises
:class:`ScenarioError` (one line: file, key path, what was expected); a valid scenario that cannot be simulated as
asked raises :class:`SimulationError`. Names are imported on first use, so ``import sim`` is instant.
"""

from __future__ import annotations

from sim.core.numerics import request_baseline_kernels, request_single_thread_blas

request_baseline_kernels()  # before numpy is imported: the same bits on every CPU (sim.core.numerics)
request_single_thread_blas()  # and one BLAS thread: small matrices, sums in one order

__version__ = "0.1.0"
__all__ = ["Run", "Scenario", "ScenarioError", "SimulationError", "__version__", "load", "run"]

_WHERE = {"Run": "sim.api", "Scenario": "sim.api", "load": "sim.api", "run": "sim.api",
          "ScenarioError": "sim.core.errors", "SimulationError": "sim.core.errors"}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
