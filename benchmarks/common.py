"""Shared by the benchmark scripts: a machine-speed unit so that timings from different machines compare."""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sim.core.numerics import reproducible_numerics  # noqa: E402

reproducible_numerics()  # the sim command's numerics, asked before numpy is imported (a no-op if it already is)


def reference_loop_s() -> float:
    """A fixed pure-Python workload (1e6 additions) as a machine-speed unit."""
    start = time.perf_counter()
    total = 0
    for i in range(1_000_000):
        total += i
    return time.perf_counter() - start
