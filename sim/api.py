"""The Python API, for notebooks and scripts: load a scenario, change values, run it, read the results as tables.

    import sim

    base = sim.load("scenarios/gen3_5090.yaml")
    free = base.set("machines.strata_box.gpus.gpu0.reserved_gib", 0)   # --set semantics; a new scenario
    run = free.set({"serve.requests": 200}).run(seed=0)
    run.metrics["decode_tok_s"]
    run.requests.groupby("end")["ttft_s"].median()                     # a new DataFrame at every access

A :class:`Scenario` does not change: :meth:`Scenario.set` returns a new one, validated at once (a bad value raises
:class:`sim.ScenarioError` with the one-line message the command line prints). Values are applied exactly as
``--set`` applies them: after the scenario's own values and its calibration files, in order, creating entries of
named maps where the path names one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel

from sim.config.load import Override, load_scenario
from sim.core.errors import ScenarioError
from sim.runner import RunResult, summary, tables
from sim.runner import run as run_config

_MISSING = object()


class Scenario:
    """A scenario file with changes, validated when made (``config``: the validated model, read-only). It does not
    change: :meth:`set` makes a new one from the file and the changes, read again; paths in it (a trace) are resolved
    when it is made, relative to the working directory then."""

    def __init__(self, path: str, changes: tuple[Override, ...] = ()) -> None:
        self.path = path
        self.changes = tuple(c if isinstance(c, str) else (str(c[0]), copy.deepcopy(c[1])) for c in changes)
        self.config = load_scenario(path, self.changes)[0]

    def set(self, changes: str | Mapping[str, Any] | Iterable[Override], value: Any = _MISSING) -> Scenario:
        """A new scenario with ``changes`` applied after this one's: ``set("a.b", 1)``, ``set({"a.b": 1, ...})``,
        ``--set`` strings with YAML values (``set("a.b=1")``, ``set(["a.b=1", "c={x: 2}"])``) or (path, value)
        pairs."""
        return Scenario(self.path, self.changes + _changes(changes, value))

    def get(self, path: str) -> Any:
        """The value at a dotted path as the run will use it (the file's, a calibration's, a change's or the
        schema's default), as plain data: a section is a dict of all its values. KeyError when it names nothing."""
        node: Any = self.config
        for part in path.split("."):
            if isinstance(node, BaseModel) and part in type(node).model_fields:
                node = getattr(node, part)
            elif isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list | tuple) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise KeyError(path)
        return _plain(node)

    @property
    def name(self) -> str:
        return self.config.name

    def engine(self) -> Any:
        """The serving engine as it starts (its kind's set-up: VRAM arithmetic, cache, tiers, costs), without
        running anything; None when the scenario serves nothing."""
        from sim.engines import kind_for

        kind = kind_for(self.config)
        return None if kind is None else kind.setup(self.config, self.config.serve.machine)

    def run(self, seed: int | None = None) -> Run:
        """Simulate it (seed: the scenario's when None)."""
        seed = self.config.seed if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ScenarioError("seed", "", f"bad value {seed!r}: expected a non-negative integer")
        return Run(self, run_config(self.config, int(seed)))

    def __repr__(self) -> str:
        changes = "".join(f", {c!r}" if isinstance(c, str) else f", {c[0]}={c[1]!r}" for c in self.changes)
        return f"sim.Scenario({self.path!r}{changes})"


class Run:
    """One simulated run: its metrics, and its tables as pandas DataFrames (a new one at every access)."""

    def __init__(self, scenario: Scenario, result: RunResult) -> None:
        self.scenario = scenario
        self.result = result

    @property
    def seed(self) -> int:
        return self.result.seed

    @property
    def metrics(self) -> dict[str, float]:
        """Every metric of ``sim run --json``, by name."""
        return dict(self.result.metrics)

    @property
    def summary(self) -> dict:
        """What ``sim run --json`` prints."""
        return copy.deepcopy(summary(self.result, self.scenario.path))

    @property
    def text(self) -> str:
        """What ``sim run`` prints."""
        from sim.report import run_text

        return run_text(self.result)

    def table(self, name: str):
        """One of the tables ``sim run --out`` writes (``requests``, ``jobs``, ``loads``, ...), as a DataFrame."""
        import pandas as pd

        if name == "requests":
            return self.requests
        found = tables(self.result)
        if name not in found:
            raise KeyError(f"no table {name!r}: this run has {', '.join(found)}")
        return pd.DataFrame(list(found[name].rows), columns=list(found[name].columns))

    def tables(self) -> dict[str, Any]:
        """Every table of ``sim run --out``, as DataFrames."""
        import pandas as pd

        return {name: self.requests if name == "requests" else pd.DataFrame(list(t.rows), columns=list(t.columns))
                for name, t in tables(self.result).items()}

    @property
    def requests(self):
        """One row per served request (the columns of ``requests.csv``; empty when nothing was served)."""
        if self.result.serving is None:
            import pandas as pd

            from sim.serving.telemetry import TABLE

            return pd.DataFrame(columns=list(TABLE))
        return self.result.serving.requests.frame()

    @property
    def jobs(self):
        """One row per job: where it ran, predicted and simulated completion."""
        return self.table("jobs")

    @property
    def engine(self) -> Any:
        """The serving engine as it started (its kind's set-up: VRAM, cache, costs), or None."""
        return self.result.engine

    @property
    def served(self):
        """The served requests as records (:class:`sim.serving.served.ServedRequests`), for inspection."""
        return self.result.requests

    def __repr__(self) -> str:
        return f"<sim.Run of {self.scenario!r}, seed {self.seed}: {len(self.result.metrics)} metrics>"


def _plain(node: Any) -> Any:
    """A copy of a value of the validated model as plain data (dicts, lists, numbers, text)."""
    if isinstance(node, BaseModel):
        return node.model_dump()
    if isinstance(node, Mapping):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    return copy.deepcopy(node)


def _changes(changes, value: Any = _MISSING) -> tuple[Override, ...]:
    """Overrides from a path and a value, a mapping, ``--set`` strings (kept as written: errors quote them) or
    (path, value) pairs."""
    if isinstance(changes, str) and value is not _MISSING:
        return ((changes, value),)
    if value is not _MISSING:
        raise TypeError("set(path, value), set({path: value, ...}) or set('path=value')")
    if isinstance(changes, str):
        changes = [changes]
    if isinstance(changes, Mapping):
        return tuple(changes.items())
    out = tuple(tuple(c) if isinstance(c, list | tuple) else c for c in changes)
    for c in out:
        pair = isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str)
        if not pair and not (isinstance(c, str) and "=" in c):
            raise TypeError(f"a --set string path=value or a (path, value) pair, not {c!r}")
    return out


def load(path: str, changes: Mapping[str, Any] | Iterable[str] | None = None) -> Scenario:
    """Load and validate a scenario file, with ``changes`` (dotted path: value, or ``--set`` strings) applied as
    ``--set`` applies them."""
    return Scenario(path, _changes(changes or ()))


def run(scenario: Scenario | str, seed: int | None = None,
        changes: Mapping[str, Any] | Iterable[str] | None = None) -> Run:
    """Run a scenario (a :class:`Scenario` or a file path), with ``changes`` applied first."""
    if isinstance(scenario, str):
        scenario = load(scenario)
    if changes:
        scenario = scenario.set(changes)
    return scenario.run(seed)


__all__ = ["Run", "Scenario", "load", "run"]
