"""One progress display for long commands (sweeps, calibration, validation, uncertainty draws, break-even
bisections): a tqdm bar on stderr, never on stdout.

Whether a bar is shown is decided when it is made: ``set_enabled(True)`` always, ``set_enabled(False)`` (the
commands' ``--quiet``) never, ``set_enabled(None)`` (the default) only when stderr is a terminal, so a pipe, a log
file or a test sees nothing. A bar made while another is open is not shown (a break-even bisection inside an
uncertainty draw): one line at a time. When no bar is shown the object handed back does nothing, and tqdm is not
even imported.

    with progress(total=len(draws), desc="uncertainty", unit="draw") as bar:
        for d in draws:
            ...
            bar.update()
            bar.set_postfix_str("best 0.12")
"""

from __future__ import annotations

import sys
from typing import Any

_enabled: bool | None = None  # None: automatic (a bar when stderr is a terminal)
_open = 0  # bars shown and not yet closed, in this process


def set_enabled(flag: bool | None) -> None:
    """Show bars always (True), never (False, ``--quiet``) or when stderr is a terminal (None, the default)."""
    global _enabled
    _enabled = flag


def is_enabled() -> bool:
    """Whether a bar made now would be shown (ignoring one already open)."""
    if _enabled is not None:
        return _enabled
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


class Bar:
    """A progress bar that shows nothing: what ``progress`` hands back when no bar is shown (no cost but a call)."""

    shown = False

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units (runs, simulations, draws) done."""

    def set_postfix_str(self, text: str) -> None:
        """Show ``text`` after the counts (the best loss so far, runs reused)."""

    def set_total(self, total: int | None) -> None:
        """Change the expected number of units (None: unknown, no bar, only the count and rate)."""

    def close(self) -> None:
        """Leave the bar's last state on its line."""


class _Shown(Bar):
    """A tqdm bar on stderr."""

    shown = True

    def __init__(self, total: int | None, desc: str, unit: str, initial: int):
        global _open
        from tqdm import tqdm

        self._bar: Any = tqdm(total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr,
                              dynamic_ncols=True, leave=True, mininterval=0.2)
        self._closed = False
        _open += 1

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def set_postfix_str(self, text: str) -> None:
        self._bar.set_postfix_str(text, refresh=False)  # drawn with the next update (at most 5 times a second)

    def set_total(self, total: int | None) -> None:
        self._bar.total = total
        self._bar.refresh()

    def close(self) -> None:
        global _open
        if not self._closed:
            self._closed = True
            _open -= 1
            self._bar.close()


_OFF = Bar()


def progress(total: int | None, desc: str, unit: str = "run", initial: int = 0, disable: bool = False) -> Bar:
    """A bar counting ``unit``s done of ``total`` (None: unknown) from ``initial`` (done before, e.g. runs a sweep
    reuses: not counted in the rate), labelled ``desc``; use it as a context manager, or ``close()`` it. Shown on
    stderr as ``set_enabled`` says, unless ``disable`` (a caller's own quiet flag) or another bar is open."""
    if disable or _open or not is_enabled():
        return _OFF
    return _Shown(total, desc, unit, initial)
