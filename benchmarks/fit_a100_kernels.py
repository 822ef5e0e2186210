"""Fit the A100's two iteration efficiencies to real kernel timings: python benchmarks/fit_a100_kernels.py [--json]

``calibration/vidur_a100/llama2_7b_tp1_mlp_ops.csv`` holds the matrix products of one Llama-2-7B block that Vidur's
authors profiled on real A100 80 GB GPUs (medians, ms; its README gives the provenance). The linear operator of
:class:`sim.batching.cost.StepCost` prices the four weight products of a block as one roofline,

    32 x max(layer weight bytes / (memory_efficiency x 2,039 GB/s), 2 x layer params x tokens / (compute_efficiency x
    312 TFLOP/s)),

so the two efficiencies are fitted (least squares on log time) to the measured sums at five token counts and checked
on the three others, chosen before fitting. The result is what ``calibration/a100_llama2_7b.yaml`` ships; this
script reproduces it. Nothing per row: two physical parameters for the card.
"""

from __future__ import annotations

import argparse
import csv
import json
import os

import numpy as np
from scipy.optimize import least_squares

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "calibration", "vidur_a100", "llama2_7b_tp1_mlp_ops.csv")
LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")  # the products with the weights
LAYERS, HIDDEN, FFN = 32, 4096, 11008
LAYER_PARAMS = 4 * HIDDEN * HIDDEN + 3 * HIDDEN * FFN  # q, k, v, o and the gated MLP (Llama-2-7B)
HBM_GBPS, TFLOPS = 2039.0, 312.0  # A100-SXM4-80GB datasheet (dense FP16 tensor)
FIT = (1, 32, 128, 1024, 4096)  # token counts fitted; the others are the check
CHECK = (8, 512, 2048)


def measured() -> dict[int, float]:
    """Seconds of the 32 blocks' weight products per token count (the mean of repeated rows' medians)."""
    rows: dict[int, list[float]] = {}
    with open(TABLE, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            ms = sum(float(row[f"{op}_median_ms"]) for op in LINEAR)
            rows.setdefault(int(row["num_tokens"]), []).append(LAYERS * ms / 1000)
    return {n: float(np.mean(v)) for n, v in rows.items()}


def roofline(tokens: np.ndarray, memory_efficiency: float, compute_efficiency: float) -> np.ndarray:
    read = LAYERS * LAYER_PARAMS * 2 / (memory_efficiency * HBM_GBPS * 1e9)
    flops = LAYERS * 2 * LAYER_PARAMS * tokens / (compute_efficiency * TFLOPS * 1e12)
    return np.maximum(read, flops)


def fit() -> dict:
    data = measured()
    x = np.array(FIT, dtype=float)
    y = np.array([data[n] for n in FIT])
    def loss(p):
        return np.log(roofline(x, *p)) - np.log(y)

    # the roofline's kink makes the loss piecewise: every start of a coarse grid, the lowest end
    starts = [(m, c) for m in np.linspace(0.3, 1.0, 8) for c in np.linspace(0.3, 1.0, 8)]
    best = min((least_squares(loss, x0=s, bounds=([0.05, 0.05], [1, 1])) for s in starts), key=lambda r: r.cost)
    mem, comp = (float(v) for v in best.x)
    check = {n: float(roofline(np.array([n]), mem, comp)[0] / data[n] - 1) for n in CHECK}
    train = {n: float(roofline(np.array([n]), mem, comp)[0] / data[n] - 1) for n in FIT}
    return {"memory_efficiency": round(mem, 3), "compute_efficiency": round(comp, 3), "fit_error": train,
            "check_error": check, "measured_s": {n: data[n] for n in (*FIT, *CHECK)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    out = fit()
    if ap.parse_args().json:
        print(json.dumps(out, indent=2))
        return
    print(f"memory_efficiency {out['memory_efficiency']}, compute_efficiency {out['compute_efficiency']}")
    for label, errs in (("fit", out["fit_error"]), ("check", out["check_error"])):
        print(f"{label}: " + ", ".join(f"{n} tokens {e:+.1%}" for n, e in errs.items()))


if __name__ == "__main__":
    main()
