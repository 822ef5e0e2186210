"""Which experts a batch of tokens touches under llama.cpp: a token's inclusion probability of each expert, from the
model's routing law.

A batched decode step of B sequences (``-np``, llama-batched-bench) reads each routed expert that any of its B tokens
chose, ``sum_e 1 - (1 - pi_e)^B`` of a block's experts. Routers are skewed: some experts are chosen far more often
than others. The union therefore grows more slowly than uniform routing's ``E (1 - (1 - k/E)^B)``.

The law is the one the expert-cache engine uses (:mod:`sim.moe.routing`). Each layer has a Zipf popularity. Each
request puts ``drift_weight`` of its lookups on a hot set of its own; over many requests these hot sets average to
uniform. So B independent sequences route by ``(1 - w) zipf + w / E``. The exponent and the drift weight come from
the public routing traces, fitted by ``sim fit-routing`` (calibration/routing.yaml, repeated below, a test keeps them
equal). The exponent is the model's own where its traces were fitted, otherwise the mean of the fitted ones. A
scenario's ``models.M.moe.routing`` wins when it sets an exponent.
"""

from __future__ import annotations

import os
from functools import cache

from sim.core.topk import inclusion_probabilities, zipf_weights

# calibration/routing.yaml: exponent.<model> by the config file it is read from, and the shared drift weight
MEASURED_EXPONENT: dict[str, float] = {"qwen3-30b-a3b": 1.42887, "gpt-oss-20b": 1.31109}
POOLED_EXPONENT = sum(MEASURED_EXPONENT.values()) / len(MEASURED_EXPONENT)
DRIFT_WEIGHT = 0.325714


@cache
def batch_inclusion(experts: int, top_k: int, exponent: float, drift_weight: float) -> tuple[float, ...]:
    """A token's inclusion probability of each of ``experts`` under the law that B independent sequences route by."""
    if experts <= 0 or top_k <= 0:
        return ()
    q = (1.0 - drift_weight) * zipf_weights(experts, exponent) + drift_weight / experts
    return tuple(float(p) for p in inclusion_probabilities(q[None, :], min(top_k, experts))[0])


def model_exponent(model_file: str, routing=None) -> float:
    """The Zipf exponent a model routes by: the scenario's when it sets one, the model's fitted one, else pooled."""
    if routing is not None and "exponent" in routing.model_fields_set:
        return float(routing.exponent)
    stem = os.path.splitext(os.path.basename(model_file))[0].lower()
    return MEASURED_EXPONENT.get(stem, POOLED_EXPONENT)
