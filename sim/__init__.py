"""sim: a discrete-event simulator of loading and serving LLMs on real, imperfect hardware.

The public Python API (:mod:`sim.api`): ``sim.load(path)`` gives a :class:`Scenario` to change (``.set``) and run
(``.run``); a :class:`Run` holds the metrics and the tables as pandas DataFrames. Bad input raises
:class:`ScenarioError` (one line: file, key path, what was expected); a valid scenario that cannot be simulated as
asked raises :class:`SimulationError`. Names are imported on first use, so ``import sim`` is instant, and it
changes nothing in the process: ``sim.reproducible_numerics()``, called before numpy is first imported, gives the
``sim`` command's bits on every CPU (:mod:`sim.core.numerics`).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Run", "Scenario", "ScenarioError", "SimulationError", "__version__", "load", "reproducible_numerics", "run"]

_WHERE = {"Run": "sim.api", "Scenario": "sim.api", "load": "sim.api", "run": "sim.api",
          "ScenarioError": "sim.core.errors", "SimulationError": "sim.core.errors",
          "reproducible_numerics": "sim.core.numerics"}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
