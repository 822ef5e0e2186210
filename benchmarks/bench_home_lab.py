"""Time the home-lab commands in-process (not a test): python benchmarks/bench_home_lab.py

Prints milliseconds per call of `sim run` (probes + three jobs) and `sim breakeven` (about 120 simulated jobs),
and the same in units of a fixed pure-Python reference loop timed in the same run, so that figures from
different machines can be compared.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sim.breakeven import breakeven  # noqa: E402
from sim.runner import run  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402

SCENARIO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios", "home_lab.yaml")


def reference_loop_s() -> float:
    """A fixed pure-Python workload (1e6 additions) as a machine-speed unit."""
    start = time.perf_counter()
    total = 0
    for i in range(1_000_000):
        total += i
    return time.perf_counter() - start


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ref = min(reference_loop_s() for _ in range(3))
    scn, _ = load_scenario(SCENARIO)
    cases = {
        "load scenario": lambda: load_scenario(SCENARIO),
        "sim run home_lab": lambda: run(scn, 0),
        "sim breakeven 9B mining_box rtx4090_box": lambda: breakeven(scn, "9B", "mining_box", "rtx4090_box", 0),
    }
    print(f"reference loop: {ref * 1e3:.1f} ms")
    for name, fn in cases.items():
        t = best_of(fn)
        print(f"{name:<42}{t * 1e3:>9.1f} ms {t / ref:>8.2f} ref")


if __name__ == "__main__":
    main()
