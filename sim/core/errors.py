"""The one error type a user sees: a single line naming the file, the key path and what was expected."""

from __future__ import annotations


class ScenarioError(Exception):
    """Bad user input. ``str()`` is a single line: ``FILE: key.path: problem``."""

    def __init__(self, source: str, path: str, problem: str):
        self.source = source
        self.path = path
        self.problem = problem
        where = f"{source}: {path}: " if path else f"{source}: "
        super().__init__((where + problem).replace("\n", " "))


class SimulationError(Exception):
    """A scenario that validates but cannot be simulated (for example nothing can run a job)."""
