"""Fit a dense engine's two iteration efficiencies per GPU family to real kernel timings, judged leave-one-source-out:
python benchmarks/fit_kernel_families.py [--json]

Vidur's authors profiled one transformer block's operators on real GPUs (``calibration/vidur_*/``, MIT; each
folder's README gives the provenance). A source is one (card, model) profile. The linear operator of
:class:`sim.batching.cost.StepCost` prices a block's four weight products as one roofline,

    max(layer weight bytes / (memory_efficiency x hbm_gbps), 2 x layer params x tokens / (compute_efficiency x tflops)),

with the card's datasheet figures (sim's catalog). A family's two efficiencies are fitted (least squares on log time,
every profiled token count from 1 to 4,096) to all its sources at once; each source is then predicted by the fit
of its family's other sources (leave one source out: A40 from the A100's, and so on). A family with one source is
fitted but cannot be held out. The fitted values are what :data:`sim.batching.families.FAMILIES` ships.
"""

from __future__ import annotations

import argparse
import csv
import json
import os

import numpy as np
from scipy.optimize import least_squares

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")  # the products with the weights
MAX_TOKENS = 4096


def layer_params(hidden: int, kv_dim: int, ffn: int) -> int:
    """Weights of one block's four products: q and o (hidden^2 each), k and v (hidden x kv_dim), the gated MLP."""
    return 2 * hidden * hidden + 2 * hidden * kv_dim + 3 * hidden * ffn


# (source, family, file, catalog card's hbm GB/s, dense FP16 tensor TFLOP/s, block weights)
SOURCES = (
    ("A100 80GB / Llama-2-7B", "ampere", "vidur_a100/llama2_7b_tp1_mlp_ops.csv", 2039.0, 312.0,
     layer_params(4096, 4096, 11008)),
    ("A100 80GB / Llama-3-8B", "ampere", "vidur_a100/llama3_8b_mlp_ops.csv", 2039.0, 312.0,
     layer_params(4096, 1024, 14336)),
    ("A40 / Llama-2-7B", "ampere", "vidur_a40/llama2_7b_tp1_mlp_ops.csv", 696.0, 149.7,
     layer_params(4096, 4096, 11008)),
    ("H100 SXM / Llama-2-7B", "hopper", "vidur_h100/llama2_7b_tp1_mlp_ops.csv", 3350.0, 989.4,
     layer_params(4096, 4096, 11008)),
)


def measured(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(token counts, seconds of one block's weight products) at tensor parallel 1, repeated rows averaged."""
    rows: dict[int, list[float]] = {}
    with open(os.path.join(ROOT, "calibration", path), newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("tensor_parallel", "1") != "1" or int(row["num_tokens"]) > MAX_TOKENS:
                continue
            rows.setdefault(int(row["num_tokens"]), []).append(sum(float(row[f"{op}_median_ms"]) for op in LINEAR))
    tokens = np.array(sorted(rows), dtype=float)
    return tokens, np.array([np.mean(rows[int(n)]) / 1000 for n in tokens])


def roofline(tokens: np.ndarray, gbps: float, tflops: float, params: int, mem: float, comp: float) -> np.ndarray:
    return np.maximum(params * 2 / (mem * gbps * 1e9), 2 * params * tokens / (comp * tflops * 1e12))


def fit(sources) -> tuple[float, float]:
    data = [(measured(s[2]), s[3], s[4], s[5]) for s in sources]

    def loss(p):
        return np.concatenate([np.log(roofline(t, g, f, n, *p)) - np.log(y) for (t, y), g, f, n in data])

    starts = [(m, c) for m in np.linspace(0.3, 1.0, 6) for c in np.linspace(0.3, 1.0, 6)]
    best = min((least_squares(loss, x0=s, bounds=([0.05, 0.05], [1, 1])) for s in starts), key=lambda r: r.cost)
    return float(best.x[0]), float(best.x[1])


def error(source, mem: float, comp: float) -> float:
    """Median |predicted / measured - 1| over the source's token counts."""
    (t, y), g, f, n = measured(source[2]), source[3], source[4], source[5]
    return float(np.median(np.abs(roofline(t, g, f, n, mem, comp) / y - 1)))


def run() -> dict:
    families = sorted({s[1] for s in SOURCES})
    out: dict = {"families": {}, "held_out": []}
    for fam in families:
        members = [s for s in SOURCES if s[1] == fam]
        mem, comp = fit(members)
        out["families"][fam] = {"memory_efficiency": round(mem, 3), "compute_efficiency": round(comp, 3),
                                "sources": [s[0] for s in members],
                                "in_sample_error": {s[0]: error(s, mem, comp) for s in members}}
        for s in members:
            rest = [r for r in members if r is not s]
            if not rest:
                out["held_out"].append({"source": s[0], "family": fam, "error": None,
                                        "note": "the family's only source: not held out"})
                continue
            m, c = fit(rest)
            out["held_out"].append({"source": s[0], "family": fam, "fitted_on": [r[0] for r in rest],
                                    "memory_efficiency": round(m, 3), "compute_efficiency": round(c, 3),
                                    "error": error(s, m, c)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    out = run()
    if ap.parse_args().json:
        print(json.dumps(out, indent=2))
        return
    for fam, v in out["families"].items():
        print(f"{fam}: memory_efficiency {v['memory_efficiency']}, compute_efficiency {v['compute_efficiency']} "
              f"({', '.join(v['sources'])})")
    for h in out["held_out"]:
        err = ("not held out" if h["error"] is None
               else f"median error {h['error']:.1%} from {', '.join(h['fitted_on'])}")
        print(f"  held out {h['source']}: {err}")


if __name__ == "__main__":
    main()
