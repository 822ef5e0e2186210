"""Small helpers for the human text of the reports: plurals, one time unit per quantity, plain aligned tables and
lines kept within a terminal's width.

Every report's lines are at most :data:`WIDTH` columns: :func:`wrap` breaks a longer one after a ``;`` or a ``,``
(else at a space) into indented continuation lines; :func:`table` aligns columns without a third-party library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

WIDTH = 120  # the widest line a report prints


def plural(n: float, word: str, plural_form: str | None = None, fmt: str = ",") -> str:
    """``n`` formatted with ``fmt`` and the word in agreement: ``1 request``, ``0 requests``, ``1,000 requests``,
    ``1.5 requests``. The singular only when the number reads exactly ``1``; ``plural_form`` for irregular words
    (default: the word and an ``s``)."""
    text = format(n, fmt)
    return f"{text} {word if text == '1' else (plural_form or word + 's')}"


def time_unit(*seconds: float | None) -> tuple[float, str]:
    """(factor, unit) to print a group of times of one quantity in one unit: ``ms`` when every finite value is under
    a second, else ``s``. Multiply a time in seconds by the factor."""
    finite = [abs(s) for s in seconds if s is not None and math.isfinite(s)]
    return (1e3, "ms") if finite and max(finite) < 1 else (1.0, "s")


def fmt_time(seconds: float | None, factor: float, unit: str) -> str:
    """A time in the unit :func:`time_unit` chose: milliseconds to the millisecond (to 0.1 ms under 10 ms), seconds to
    the hundredth; ``-`` when there is none."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    x = seconds * factor
    if unit == "ms":
        return f"{x:.1f} ms" if abs(x) < 10 else f"{x:,.0f} ms"
    return f"{x:,.2f} s"


def wrap(line: str, width: int = WIDTH, hang: int = 4) -> list[str]:
    """``line`` as lines of at most ``width`` columns, broken after the last ``"; "`` that fits, else the last
    ``", "``, else the last space (a stronger break only where it leaves at least half the room used); continuation
    lines are indented ``hang`` columns more than the line. A word longer than the width (a file path) stays whole."""
    indent = len(line) - len(line.lstrip(" "))
    pad = " " * (indent + hang)
    out: list[str] = []
    rest = line
    while len(rest) > width:
        head = len(pad) if out else indent
        cut = -1
        for sep in ("; ", ", ", " "):  # a stronger break unless it leaves the line shorter than half its room
            at = rest.rfind(sep, head + 1, width + 1)
            if at > head and (sep == " " or at - head >= (width - head) // 2):
                cut = at + len(sep.rstrip())
                break
        if cut < 0:  # nothing to break at within the width: break at the first space after it
            cut = rest.find(" ", width)
            if cut < 0:
                break
        out.append(rest[:cut].rstrip())
        rest = pad + rest[cut:].lstrip()
    out.append(rest.rstrip())
    return out


def wrap_all(lines: Iterable[str], width: int = WIDTH) -> list[str]:
    """Every line of ``lines`` within ``width`` (:func:`wrap`)."""
    return [part for line in lines for part in wrap(line, width)]


def table(rows: Sequence[Sequence[str]], headers: Sequence[str] | Sequence[Sequence[str]], align: str,
          indent: int = 2, gap: int = 2) -> list[str]:
    """Rows of text cells as aligned lines: ``align`` has one letter per column, ``l``, ``c`` or ``r``; ``headers``
    is one header row, several (a second one for units) or none; a cell with newlines takes that many lines, the
    row's other cells on its first; trailing spaces are stripped."""
    head = [list(headers)] if headers and isinstance(headers[0], str) else [list(h) for h in headers]
    lines: list[list[str]] = list(head)
    for r in rows:
        parts = [c.split("\n") for c in r]
        lines += [[p[k] if k < len(p) else "" for p in parts] for k in range(max(len(p) for p in parts))]
    widths = [max(len(r[i]) for r in lines) for i in range(len(align))]

    def line(cells: list[str]) -> str:
        parts = [c.ljust(w) if a == "l" else c.center(w) if a == "c" else c.rjust(w)
                 for c, w, a in zip(cells, widths, align, strict=True)]
        return (" " * indent + (" " * gap).join(parts)).rstrip()

    return [line(r) for r in lines]


# (name suffix, unit shown, factor), first match wins: shares and rates print as percent (changes in percentage
# points); a count (slots, requests) has no unit
_UNITS = (("_share", "%", 100.0), ("hit_rate", "%", 100.0), ("expert_coverage", "%", 100.0), ("_tok_s", "tok/s", 1.0),
          ("_s_per_gb", "s/GB", 1.0), ("_gbps", "GB/s", 1.0), ("_gib", "GiB", 1.0), ("_gb", "GB", 1.0),
          ("_mib", "MiB", 1.0), ("_j_per_token", "J/token", 1.0), ("power_w", "W", 1.0), ("_per_s", "1/s", 1.0),
          ("_s", "s", 1.0))


def unit_of(metric: str) -> tuple[str, float]:
    """The unit a metric prints in, from its name (units are spelled in names: ``decode_tok_s``, ``link.M.G.gbps``,
    ``job.J.estimate_s.MACHINE``), and the factor to it: the last part of the dotted name that spells one."""
    for part in reversed(metric.split(".")):
        base = "_" + part.removesuffix("_median")
        for suffix, unit, factor in _UNITS:
            if base.endswith(suffix):
                return unit, factor
    return "", 1.0


def number(value: float) -> str:
    """A value to read: a whole number as it is, thousands separated; else 4 significant digits, trailing zeros kept
    (``11.70`` beside ``1.381``), never an exponent."""
    if not math.isfinite(value):
        return "-"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    import numpy as np

    text = np.format_float_positional(value, precision=4, unique=False, fractional=False, trim="k")
    return f"{float(text):,.0f}" if text.endswith(".") else text  # 999.96 rounds to 1000.
