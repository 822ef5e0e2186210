"""The kinds of number an outside file holds (:class:`Quantity`): a name, a unit and the range it can physically take,
with the reason for the bounds. The readers of :mod:`sim.formats` check every number they read against one; a
module that checks a value it did not read from a file (a command-line option, a fitted value) may use them too, as
they read no file.

The bounds are generous on purpose (a machine a hundred times faster than any shipped today still fits): they exist
to stop 1e300 GB/s or a -1 byte model being taken as data, not to judge plausible measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.core.errors import ScenarioError


def _g(value: float) -> str:
    """A bound or value as an error prints it: 10,000 or 1e+300, never 10000.0."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


@dataclass(frozen=True)
class Quantity:
    """A kind of number an input holds: its ``unit``, the range it can physically take (``lo`` excluded when
    ``lo_open``, ``hi`` included) and ``why`` those bounds (for the reader of the code; errors print the range)."""

    name: str
    unit: str
    lo: float
    hi: float
    why: str
    lo_open: bool = True

    def problem(self, value: float) -> str | None:
        """Why ``value`` cannot be this quantity (one phrase), or None when it can."""
        try:
            v = float(value)
        except (TypeError, ValueError, OverflowError):
            return f"{value!r} is not a number: expected {self.expected()}"
        if not math.isfinite(v) or v > self.hi or v < self.lo or (self.lo_open and v == self.lo):
            return f"{_g(v)} {self.unit}: expected {self.expected()}".replace(" : ", ": ")
        return None

    def expected(self) -> str:
        """The range in words: "a bandwidth above 0 and at most 100,000 GB/s"."""
        low = f"above {_g(self.lo)} and at most" if self.lo_open else f"from {_g(self.lo)} to"
        return f"{self.name} {low} {_g(self.hi)} {self.unit}".rstrip()

    def check(self, value: float, source: str, key_path: str) -> float:
        """``value`` as a float when it is in range, else a one-line :class:`ScenarioError` at ``source: key_path``."""
        reason = self.problem(value)
        if reason:
            raise ScenarioError(source, key_path, reason)
        return float(value)

    def parse(self, raw: str | None, source: str, key_path: str, required: bool = True) -> float | None:
        """A table cell as this quantity: None when blank and not ``required``, else a float in range or a one-line
        error."""
        text = (raw or "").strip()
        if not text:
            if required:
                raise ScenarioError(source, key_path, f"missing value: expected {self.expected()}")
            return None
        try:
            value = float(text)
        except ValueError:
            raise ScenarioError(source, key_path, f"bad value {text[:40]!r}: expected {self.expected()}") from None
        return self.check(value, source, key_path)


# The quantities inputs hold. Bounds far beyond any machine of today, so that only impossible values are refused.
BANDWIDTH_GBPS = Quantity("a bandwidth", "GB/s", 0.0, 100_000.0,
                          "HBM3e is 8 TB/s per GPU, NVLink 5 1.8 TB/s; 100 TB/s is beyond any one device or link")
TOKENS_PER_S = Quantity("a token rate", "tok/s", 0.0, 10_000_000.0,
                        "prompt processing of a small model on a B200 is about 1e5 tok/s; 1e7 is beyond any machine")
SIZE_BYTES = Quantity("a size", "bytes", 0.0, 1e15, "the largest published models are about 2 TB; 1 PB is beyond")
SIZE_GB = Quantity("a size", "GB", 0.0, 1_000_000.0, "the largest published models are about 2 TB; 1 PB is beyond")
SECONDS = Quantity("a time", "s", 0.0, 1e7, "about four months: no load, test or request of a measurement lasts longer")
TOKENS = Quantity("a token count", "tokens", 0.0, 1e9, "contexts are at most about 1e7 tokens; 1e9 is beyond",
                  lo_open=False)
PARAMETERS = Quantity("a parameter count", "parameters", 0.0, 1e14, "the largest published models are about 2e12")
SHARE = Quantity("a share", "", 0.0, 1.0, "a fraction of a whole", lo_open=False)
SIZE_KIB = Quantity("a size", "KiB", 0.0, 1e12, "a request or buffer in KiB; 1e12 KiB is 1 PB, as SIZE_BYTES")
