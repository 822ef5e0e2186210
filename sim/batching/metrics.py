"""What a continuous-batching run reports beyond the queue's metrics: its KV pool's use and preemptions, running and
queued sequences, the batch, the iterations' regime, and time per output token; with shared prefixes, the prefix
cache's hits."""

from __future__ import annotations

import numpy as np

from sim.serving.metrics import share
from sim.serving.queue import Timeline
from sim.serving.served import ServedRequests


def batching_metrics(stats: dict[str, float], pool_tokens: int, requests: ServedRequests, tl: Timeline
                     ) -> dict[str, float]:
    """``stats``: the server's counters (:class:`sim.batching.server.BatchingServer`); ``pool_tokens``: the KV pool."""
    busy = stats["busy_s"]
    iterations = stats["iterations"]
    span = tl.makespan_s
    out = {
        "kv_pool_tokens": float(pool_tokens),
        "kv_peak_share": stats["kv_peak_tokens"] / pool_tokens,
        "kv_mean_share": share(stats["kv_area"] / busy, pool_tokens) if busy > 0 else 0.0,
        "kv_preemptions": float(stats["preemptions"]),
        "kv_swaps": float(stats["swaps"]),
        "iterations": float(iterations),
        "memory_bound_share": stats["memory_bound_iterations"] / iterations if iterations else 0.0,
        "prefill_iteration_share": stats["prefill_iterations"] / iterations if iterations else 0.0,
        "batch_mean": stats["batch_area"] / busy if busy > 0 else 0.0,
        # sequences holding a place (decoding or prefilling) and requests waiting for one, averaged over the run
        "running_seqs_mean": tl.active_area / span if span > 0 else 0.0,
        "queued_seqs_mean": (tl.in_system_area - tl.active_area) / span if span > 0 else 0.0,
    }
    r = requests.subset(requests.served)
    if len(r):
        after_first = r.output_tokens - 1  # the first token comes with the prefill
        decoded = (after_first > 0) & (r.decode_s > 0)
        tpot = r.decode_s[decoded] / after_first[decoded]
        if tpot.size:
            out |= {"decode_tok_s_median": float(np.median(1 / tpot)), "tpot_p50_s": float(np.percentile(tpot, 50)),
                    "tpot_mean_s": float(tpot.mean()), "tpot_p99_s": float(np.percentile(tpot, 99))}
    return out


def prefix_metrics(requests: ServedRequests, evicted_tokens: int) -> dict[str, float]:
    """The prefix cache over the served requests (a workload of shared prefixes only: other runs keep their keys):
    ``prefix_hit_rate``, prompt tokens not prefilled over prompt tokens (fraction); ``prefix_cached_tokens_mean``,
    those per request (tokens); ``prefix_evicted_tokens``, cached tokens evicted to make room (tokens). A request's
    tokens not prefilled are its ``cached_tokens`` as the engine found them at its first admission."""
    r = requests.subset(requests.served)
    prompt = int(r.prompt_tokens.sum()) if len(r) else 0
    cached = int(r.cached_tokens.sum()) if len(r) else 0
    return {"prefix_hit_rate": cached / prompt if prompt else 0.0,
            "prefix_cached_tokens_mean": cached / len(r) if len(r) else 0.0,
            "prefix_evicted_tokens": float(evicted_tokens)}
