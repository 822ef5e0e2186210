"""The engine kinds, by name, and the one place that says which of them serves a scenario.

Each kind implements :class:`sim.serving.engine.EngineKind` (set-up, serving, replay, metrics, tables, summary and
text). ``sim run``, ``sim calibrate``, ``sim validate``, ``--uncertainty`` and ``sim sweep`` ask :func:`kind_for` and
never test the kind themselves; a new kind of engine is a module implementing the interface, a name in
:func:`sim.config.scenario.engine_kind` and a line here. A kind's module is imported when a scenario first needs it,
so a run that serves nothing (the home lab's dispatch) does not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.config.scenario import Scenario, engine_kind
from sim.serving.engine import EngineKind


def _moe() -> EngineKind:
    from sim.moe.serve import MoeEngine

    return MoeEngine()


def _dense() -> EngineKind:
    from sim.dense.serve import DenseEngine

    return DenseEngine()


def _llamacpp() -> EngineKind:
    from sim.llamacpp.serve import LlamaCppEngine

    return LlamaCppEngine()


# name -> builds the kind
KINDS: dict[str, Callable[[], EngineKind]] = {"moe": _moe, "dense": _dense, "llamacpp": _llamacpp}
_BUILT: dict[str, EngineKind] = {}


def kind(name: str) -> EngineKind:
    """The engine kind registered under ``name``."""
    if name not in _BUILT:
        _BUILT[name] = KINDS[name]()
    return _BUILT[name]


def kind_for(scn: Scenario) -> EngineKind | None:
    """The kind of engine serving the scenario's workload (None: it serves nothing)."""
    if scn.serve is None:
        return None
    engine = scn.machines[scn.serve.machine].engine
    assert engine is not None  # the scenario checks say so
    name = engine_kind(scn, engine)
    assert name is not None
    return kind(name)
