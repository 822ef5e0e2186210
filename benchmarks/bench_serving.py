"""Serving a public trace under load (not a test): python benchmarks/bench_serving.py [--requests N]

Replays the first N (default 10,000) requests of the Azure 2023 conversation trace (``scenarios/azure_conv_5090.yaml``:
the Strata engine of gen3_5090 round 2, one decode slot, arrivals stretched 20x) with the expert cache on, and
reports simulated requests and generated tokens per wall-second, split into the vectorised per-request work
(decode of every request, prefill) and the event simulation (arrivals, queue, slots). Also in units of a fixed
pure-Python reference loop timed in the same run, so machines compare.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from common import ROOT, reference_loop_s  # puts the project on sys.path

import sim
from sim.moe.serve import MoeEngine, serve_metrics

SCENARIO = f"{ROOT}/scenarios/azure_conv_5090.yaml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--scenario", default=SCENARIO)
    args = ap.parse_args()
    ref = min(reference_loop_s() for _ in range(3))
    print(f"reference loop: {ref * 1e3:.1f} ms")
    scn = sim.load(args.scenario, {"serve.requests": args.requests}).config
    import sim.moe.serve as ms

    timings: dict[str, float] = {"work": 0.0, "events": 0.0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            timings[name] += time.perf_counter() - t0
            return out
        return wrapper

    ms.request_work = timed("work", ms.request_work)
    ms.run_queue = timed("events", ms.run_queue)
    start = time.perf_counter()
    served = MoeEngine().serve(scn, np.random.default_rng(0))
    recs = served.requests
    m = serve_metrics(served.setup, recs, served.timeline)
    wall = time.perf_counter() - start
    tokens = int(recs.output_tokens.sum())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(recs):,} requests, {tokens:,} generated tokens, {m['makespan_s']:,.0f} simulated s in {wall:.2f} s "
          f"wall ({wall / ref:.0f} reference loops), peak RSS {peak:.0f} MB")
    print(f"  {len(recs) / wall:,.0f} requests and {tokens / wall:,.0f} tokens per wall-second; per-request work "
          f"(decode, prefill) {timings['work']:.2f} s, events {timings['events']:.2f} s, the rest "
          f"{wall - timings['work'] - timings['events']:.2f} s")


if __name__ == "__main__":
    main()
