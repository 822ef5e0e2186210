"""Simulated MoE decode speed (not a test): python benchmarks/bench_moe.py [--requests N]

Serves the shipped ``scenarios/gen3_5090.yaml`` (round 1: 5784 expert slots, 480 lookups per token, 4 drafts) and
reports simulated generated tokens per wall-second and milliseconds per 1,000-token request, for both fidelities:
``counts`` (default: distinct experts per layer-step sampled from their law) and ``lookups`` (every lookup sampled).
Also in units of a fixed pure-Python reference loop timed in the same run, so machines compare.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import ROOT, reference_loop_s  # puts the project on sys.path

import sim
from sim.moe.decode_batch import decode_many
from sim.moe.lookups import decode_request

SCENARIO = f"{ROOT}/scenarios/gen3_5090.yaml"


def decode_one(eng, fidelity: str, rng: np.random.Generator) -> None:
    """One 1,000-token request's decode, by counts (vectorised) or by every lookup."""
    if fidelity == "counts":
        decode_many(eng, np.array([1000]), np.array([np.nan]), rng)
    else:
        decode_request(eng, 1000, rng)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    ref = min(reference_loop_s() for _ in range(3))
    print(f"reference loop: {ref * 1e3:.1f} ms")
    for fidelity, requests in (("counts", args.requests), ("lookups", max(10, args.requests // 10))):
        scenario = sim.load(SCENARIO, {"serve.requests": requests, "serve.fidelity": fidelity})
        start = time.perf_counter()
        run = scenario.run(seed=0)
        wall = time.perf_counter() - start
        tokens = int(run.metrics["output_tokens"])
        eng = scenario.engine()
        rng = np.random.default_rng(1)
        decode_one(eng, fidelity, rng)  # warm-up
        per = []
        for _ in range(20 if fidelity == "counts" else 3):
            t0 = time.perf_counter()
            decode_one(eng, fidelity, rng)
            per.append(time.perf_counter() - t0)
        ms = 1e3 * float(np.median(per))
        print(f"{fidelity:<8} {requests:>5} requests, {tokens:>7} tokens in {wall:6.2f} s: "
              f"{tokens / wall:>9,.0f} simulated tok/s; 1,000-token request {ms:6.2f} ms ({ms / 1e3 / ref:.3f} ref)")


if __name__ == "__main__":
    main()
