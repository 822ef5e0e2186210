"""Top-k choice without replacement from a popularity law: a Zipf law by rank and Rosen's inclusion probabilities.

Pure numpy, shared by the engines that route tokens to experts (:mod:`sim.moe.routing` builds its routing laws and
samplers on these; :mod:`sim.llamacpp.routing` the union of experts a batch touches).
"""

from __future__ import annotations

import numpy as np


def zipf_weights(experts: int, exponent: float) -> np.ndarray:
    """Popularity by rank (rank 1 first), normalised."""
    w = np.arange(1, experts + 1, dtype=float) ** -exponent
    return w / w.sum()


def inclusion_probabilities(q: np.ndarray, top_k: int) -> np.ndarray:
    """Per-token inclusion probability ``pi`` of every expert (same shape as ``q``, rows are layers, each summing to
    ``top_k``) under Plackett-Luce top-k sampling from ``q``, by Rosen's approximation ``pi = 1 - exp(-q t)``.

    ``t`` is solved per row by Newton's method from ``t = top_k``, where the concave sum is at most ``top_k``, so the
    iterates rise monotonically to the root (a handful of steps); a row with at most ``top_k`` experts of positive
    weight includes them all."""
    q = np.asarray(q, dtype=float)
    rows = q.reshape(-1, q.shape[-1])
    positive = rows > 0
    full = positive.sum(axis=1) <= top_k
    t = np.full(rows.shape[0], float(top_k))
    n = rows.shape[1]
    e = np.empty_like(rows)
    for _ in range(200):
        np.multiply(rows, -t[:, None], out=e)
        np.exp(e, out=e)
        step = (e.sum(axis=1) - (n - top_k)) / np.einsum("ij,ij->i", rows, e)  # -f / f', f = n - sum(e) - top_k
        step[full] = 0.0
        t += step
        if not (step > 1e-13 * t).any():
            break
    np.multiply(rows, -t[:, None], out=e)
    pi = -np.expm1(e, out=e)
    pi[full] = positive[full]
    return pi.reshape(q.shape)
