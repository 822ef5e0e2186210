"""Time the home-lab commands in-process (not a test): python benchmarks/bench_home_lab.py

Prints milliseconds per call of `sim run` (probes + three jobs) and `sim breakeven` (about 120 simulated jobs),
and the same in units of a fixed pure-Python reference loop timed in the same run, so that figures from
different machines can be compared.
"""

from __future__ import annotations

import time

from common import ROOT, reference_loop_s  # puts the project on sys.path

from sim.config.load import load_scenario
from sim.lab.breakeven import breakeven
from sim.runner import run

SCENARIO = f"{ROOT}/scenarios/home_lab.yaml"


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
