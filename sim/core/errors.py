"""The one error type a user sees: a single line naming the file, the key path and what was expected; and several of
them at once, one line each, when a file has more than one problem."""

from __future__ import annotations

from collections.abc import Sequence


class ScenarioError(Exception):
    """Bad user input. ``str()`` is a single line: ``FILE: key.path: problem``."""

    def __init__(self, source: str, path: str, problem: str):
        self.source = source
        self.path = path
        self.problem = problem
        where = f"{source}: {path}: " if path else f"{source}: "
        super().__init__((where + problem).replace("\n", " "))

    def lines(self) -> list[str]:
        """The message as lines, one per problem (here: one)."""
        return [str(self)]

    def __reduce__(self):
        """Pickled by its parts (a process pool or a Dask worker sends it back whole)."""
        return (type(self), (self.source, self.path, self.problem))


class ScenarioErrors(ScenarioError):
    """Every problem found in one input. ``errors`` holds them as one-line ScenarioErrors; ``source``, ``path`` and
    ``problem`` are the first's (code that reads one error reads that one); ``str()`` is one line per problem joined
    by newlines, at most ``MAX_LINES`` of them and then ``and N more problems``."""

    MAX_LINES = 20

    def __init__(self, errors: Sequence[ScenarioError]):
        if not errors:
            raise ValueError("ScenarioErrors needs at least one error")
        self.errors: list[ScenarioError] = [e for err in errors for e in each_error(err)]
        first = self.errors[0]
        self.source, self.path, self.problem = first.source, first.path, first.problem
        Exception.__init__(self, "\n".join(self.lines()))

    def lines(self) -> list[str]:
        shown = [line for e in self.errors[:self.MAX_LINES] for line in e.lines()]
        rest = len(self.errors) - self.MAX_LINES
        return shown + ([f"and {rest} more problem{'s' if rest > 1 else ''}"] if rest > 0 else [])

    def __reduce__(self):
        return (type(self), (self.errors,))


def each_error(exc: ScenarioError) -> list[ScenarioError]:
    """The one-line errors ``exc`` stands for: its ``errors`` when it holds several, else itself."""
    return list(exc.errors) if isinstance(exc, ScenarioErrors) else [exc]


def combined(errors: Sequence[ScenarioError]) -> ScenarioError:
    """One error for several: the error itself when there is one, else a :class:`ScenarioErrors` of them all
    (repeated lines dropped). ``errors`` must not be empty."""
    unique: dict[str, ScenarioError] = {}
    for err in errors:
        for e in each_error(err):
            unique.setdefault(str(e), e)
    found = list(unique.values())
    return found[0] if len(found) == 1 else ScenarioErrors(found)


class SimulationError(Exception):
    """A scenario that validates but cannot be simulated (for example nothing can run a job)."""
