"""Fit decode attention's two kernel parameters to real kernel timings: python benchmarks/fit_attention_kernels.py

``calibration/attention_kernels/a30_fa2_paged_decode.csv`` holds FlashAttention-2's paged-KV decode kernel timed by
nvbench on an NVIDIA A30 (the GA100 die of the A100, 933 GB/s), L2 flushed, for 1, 16 and 128 sequences of 32 to
16,384 tokens (32 heads of 128, fp16; the file's header gives the source). One call of the kernel (one layer) takes

    attention_call_s + KV bytes read / (kv_read_efficiency x 933 GB/s),

a fixed ramp (launch, the first wave's memory latency, the split-KV reduction) and a stream. The two are fitted
(soft-L1 least squares on log time) to the batched rows (16 and 128 sequences: how a serving engine calls it); the
single-sequence rows are reported beside them (one sequence leaves most of the chip idle: slower per byte). The
result is what :data:`sim.batching.families.ATTENTION` ships for the Ampere family.
"""

from __future__ import annotations

import csv
import os

import numpy as np
from scipy.optimize import least_squares

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "calibration", "attention_kernels", "a30_fa2_paged_decode.csv")
PEAK_GBPS = 933.0  # A30, as nvbench reports it


def rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sequences, bytes read, seconds) per timed call."""
    with open(TABLE, encoding="utf-8") as fh:
        data = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return (np.array([int(r["num_seqs"]) for r in data]), np.array([float(r["reads_bytes"]) for r in data]),
            np.array([float(r["gpu_time_us"]) for r in data]) * 1e-6)


def model(call_s: float, efficiency: float, reads: np.ndarray) -> np.ndarray:
    return call_s + reads / (efficiency * PEAK_GBPS * 1e9)


def fit() -> dict:
    seqs, reads, seconds = rows()
    batched = seqs > 1
    res = least_squares(lambda p: np.log(model(p[0] * 1e-6, p[1], reads[batched])) - np.log(seconds[batched]),
                        [30.0, 0.9], bounds=([0.0, 0.05], [500.0, 1.0]), loss="soft_l1")
    call_s, eff = float(res.x[0]) * 1e-6, float(res.x[1])
    err = model(call_s, eff, reads) / seconds - 1
    return {"attention_call_s": round(call_s, 7), "kv_read_efficiency": round(eff, 3),
            "batched_median_error": float(np.median(np.abs(err[batched]))),
            "single_sequence_median_error": float(np.median(np.abs(err[~batched])))}


if __name__ == "__main__":
    out = fit()
    print(f"attention_call_s {out['attention_call_s'] * 1e6:.1f} us, kv_read_efficiency {out['kv_read_efficiency']}; "
          f"median error {out['batched_median_error']:.1%} on the batched rows, "
          f"{out['single_sequence_median_error']:.1%} on the single-sequence rows (not fitted)")
