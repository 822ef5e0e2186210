"""``sim run``'s text about a continuous-batching engine, dense or MoE: its batch limits, the sequences running and
the requests queued, the KV pool and its use, preemptions; and what a request waits for, in the words of a batch
(a batching engine has no decode slots: its limits are ``max_num_seqs``, the token budget and the pool)."""

from __future__ import annotations

from sim.batching.admission import log_pool_tokens
from sim.batching.pool import max_num_seqs, token_budget
from sim.config.engine import Engine
from sim.core.text import plural


def admission_phrase(e: Engine) -> str:
    """What a request waits for before it joins the batch (for the admission line of
    :func:`sim.serving.report.load_lines`)."""
    holds = "its whole sequence (prompt and output, booked: the pool of the engine's log)" \
        if log_pool_tokens(e) is not None else "its prompt"
    return f"into the batch while fewer than max_num_seqs run and the KV pool holds {holds}"


def limits_line(e: Engine) -> str:
    """The batch limits: sequences an iteration batches and tokens it processes at most."""
    return f"  batch limits: max_num_seqs {max_num_seqs(e):,}, max_num_batched_tokens {token_budget(e):,} (tokens " \
        "an iteration)"


def batch_lines(m: dict[str, float]) -> list[str]:
    """Running sequences and queued requests (time averages over the run and peaks), the KV pool (GiB and tokens)
    with its use (mean and peak, percent of the pool), preemptions and swaps."""
    out = [f"  running sequences (the batch): mean {m['running_mean']:.1f}, peak {m['running_peak']:,.0f}; "
           f"queued requests: mean {m['queued_mean']:.1f}, peak {m['queued_peak']:,.0f}"]
    booked = f"; admission booked at most {m['kv_booked_peak_share']:.1%}" if "kv_booked_peak_share" in m else ""
    out.append(f"  KV pool {m['kv_pool_gib']:.2f} GiB ({m['kv_pool_tokens']:,.0f} tokens): use mean "
               f"{m['kv_mean_share']:.1%}, peak {m['kv_peak_share']:.1%}{booked}; "
               f"{plural(int(m['kv_preemptions']), 'preemption')}, {plural(int(m['kv_swaps']), 'swap')}")
    if "prefix_hit_rate" in m:  # a workload with shared prefixes
        out.append(f"  prefix cache: {m['prefix_hit_rate']:.1%} of prompt tokens found cached (mean "
                   f"{m['prefix_cached_tokens_mean']:,.0f} a request), {m.get('prefix_evicted_tokens', 0):,.0f} "
                   "tokens evicted")
    return out
