"""Prefill time of prompts (FIELD_NOTES section 4): only the tokens not in the prompt cache are processed.

With an engine ``prefill`` section the new tokens are processed in chunks of ``chunk_tokens``:

- GPU compute: ``token_s`` per token, plus ``kv_spill_token_s`` per token whose position lies beyond
  ``kv_resident_tokens`` (its KV streams through host RAM);
- every expert the chunk touches that is not resident in the engine GPU's VRAM is streamed to it at ``stream_gbps``
  (default: the link's rate), overlapped with the chunk's compute: a chunk takes the longer of the two. A chunk of
  thousands of tokens touches most experts of a layer, so a long prompt pays the whole non-resident set per chunk
  and a short one (a prompt-cache hit's few new tokens) only the experts its tokens touch;
- ``fixed_s`` once per prefill (set-up).

Peer GPUs and driver paging on them do not enter: prefill streams weights to the engine GPU rather than sending
activations out, so a fast prefill says nothing about decode. Without a ``prefill`` section, ``prefill_tok_s``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .units import GB


def prefill_seconds(eng, prompt: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """Seconds to prefill ``prompt - cached`` new tokens after ``cached`` cached ones, per request."""
    new = np.maximum(prompt - cached, 0).astype(np.int64)
    e = eng.engine
    pf = e.prefill
    if pf is None:
        return new / e.prefill_tok_s
    chunk = pf.chunk_tokens
    full, rest = np.divmod(new, chunk)
    stream = _stream_seconds(eng)
    combine = max if pf.overlap else (lambda a, b: a + b)
    t = full * combine(chunk * pf.token_s, stream(chunk))
    sizes = np.unique(rest[rest > 0])
    part = np.zeros(new.size)
    for size in sizes:
        part[rest == size] = combine(int(size) * pf.token_s, stream(int(size)))
    t = t + part
    if pf.kv_resident_tokens is not None and pf.kv_spill_token_s > 0:
        beyond = np.maximum(prompt - np.maximum(cached, pf.kv_resident_tokens), 0)
        t = t + beyond * pf.kv_spill_token_s
    return np.where(new > 0, t + pf.fixed_s, 0.0)


def _stream_seconds(eng):
    """Seconds to stream the non-resident experts a chunk of ``tokens`` touches (expected distinct count)."""
    pf = eng.engine.prefill
    q = eng.popularity
    resident = eng.prefill_resident.reshape(q.shape)
    qc = np.minimum(q, 1 - 1e-12)
    log_miss = np.log1p(-qc)
    gbps = pf.stream_gbps if pf.stream_gbps is not None else eng.params.link_gbps
    rate = gbps * GB / eng.params.expert_bytes  # experts per second

    @cache
    def seconds(tokens: int) -> float:
        touched = -np.expm1(tokens * eng.moe.top_k * log_miss)
        return float((touched * ~resident).sum() / rate)

    return seconds
