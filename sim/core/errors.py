"""The one error type a user sees: a single line naming the file, the key path and what was expected; and several of
them at once, one line each, when a file has more than one problem."""

from __future__ import annotations

from collections.abc import Sequence

MAX_PART_CHARS = 200  # a file name or a key path in a message, at most (characters)
MAX_PROBLEM_CHARS = 1000  # the problem told, at most (characters)


def cut(text: str, width: int) -> str:
    """``text`` on one line, in at most ``width`` characters: cut in the middle (``...``) when longer."""
    text = str(text)
    if len(text) > width:
        head = (width - 3) // 2
        text = text[:head] + "..." + text[len(text) - (width - 3 - head):]
    return one_line(text)


def one_line(text: str) -> str:
    """``text`` as one terminal line: a newline is a space; other characters that would break the line or reach the
    terminal raw (NUL, a carriage return, escape sequences, the Unicode line separators) are escaped (``\\x00``)."""
    text = text.replace("\n", " ")
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text)


class ScenarioError(Exception):
    """Bad user input. ``str()`` is a single line: ``FILE: key.path: problem``, of at most about 1,400 characters
    whatever the input: the file and the key path are cut to ``MAX_PART_CHARS`` characters, the problem to
    ``MAX_PROBLEM_CHARS`` (a 10 MB key gives a short line)."""

    def __init__(self, source: str, path: str, problem: str):
        self.source = cut(source, MAX_PART_CHARS)
        self.path = cut(path, MAX_PART_CHARS)
        self.problem = cut(problem, MAX_PROBLEM_CHARS)
        source, path, problem = self.source, self.path, self.problem
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
