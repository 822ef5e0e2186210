"""The one interface every kind of serving engine offers (:mod:`sim.engines` registers them).

An engine kind says how it is set up from a scenario (its VRAM arithmetic, caches, costs), how it serves the
scenario's workload or a given table of requests, and what its run reports: metrics for ``--json``, tables for
``--out`` (its requests, in the columns of :mod:`sim.serving.telemetry`), extra ``summary.json`` keys and the lines
of ``sim run``'s text. The queue in front of it is :mod:`sim.serving.queue`; what a request costs is the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from sim.config.scenario import Scenario
from sim.core.output import Table
from sim.serving.queue import Timeline
from sim.serving.served import ServedRequests
from sim.serving.workload import RequestTable


@dataclass
class ServeRun:
    """One served workload: the engine as it started (the kind's own set-up), every request's telemetry (in sending
    order), the run's timeline and the engine's own counters; ``memo`` keeps what the kind derives from them once
    for its metrics, tables and text."""

    setup: Any
    requests: ServedRequests
    timeline: Timeline
    counters: dict[str, float] = field(default_factory=dict)
    memo: dict[str, Any] = field(default_factory=dict)


class EngineKind(Protocol):
    """What an engine kind registers (see the module docstring)."""

    name: str
    first_token_in_prefill: bool  # a request's first token comes with its prefill, not within its decode_s

    def setup(self, scn: Scenario, machine: str) -> Any:
        """The engine on ``machine`` once started (raises SimulationError when it does not fit)."""
        ...

    def serve(self, scn: Scenario, rng: np.random.Generator) -> ServeRun:
        """Serve the scenario's workload (``serve``) on its engine."""
        ...

    def replay(self, scn: Scenario, table: RequestTable, rng: np.random.Generator) -> ServeRun:
        """Serve ``table``'s requests one after another, each alone on the engine (logged requests, replayed)."""
        ...

    def metrics(self, run: ServeRun) -> dict[str, float]:
        """The run's metrics, named as ``sim run --json`` names them."""
        ...

    def tables(self, run: ServeRun) -> dict[str, Table]:
        """``--out`` tables with their columns: ``requests`` (its rows an iterator: they stream) and any of the kind's
        own."""
        ...

    def summary(self, run: ServeRun) -> dict:
        """Keys ``summary.json`` and ``--json`` carry besides the metrics."""
        ...

    def report_lines(self, scn: Scenario, run: ServeRun, metrics: dict[str, float]) -> list[str]:
        """``sim run``'s text about the engine."""
        ...
