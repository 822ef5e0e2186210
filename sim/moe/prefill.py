"""Prefill time of prompts (FIELD_NOTES section 4): only the tokens not in the prompt cache are processed.

With an engine ``prefill`` section the new tokens are processed in chunks of ``chunk_tokens`` (``order: chunk``),
or layer by layer, all new tokens through one layer before the next (``order: layer``, as offloading engines do to
move each weight once):

- GPU compute: ``token_s`` per token, plus ``kv_spill_token_s`` per token whose position lies beyond
  ``kv_resident_tokens`` (its KV streams through host RAM);
- every expert the chunk touches that is not resident in the engine GPU's VRAM is streamed to it at ``stream_gbps``
  (default: the link's rate), overlapped with the chunk's compute: a chunk takes the longer of the two. A chunk of
  thousands of tokens touches most experts of a layer, so a long prompt pays the whole non-resident set per chunk
  and a short one (a prompt-cache hit's few new tokens) only the experts its tokens touch;
- ``fixed_s`` once per prefill (set-up).

In layer order, a prompt streams each non-resident expert it touches once (its new tokens' routing decides which),
so a prompt-cache hit with a few new tokens streams little and a long prompt streams the whole non-resident set once.

Peer GPUs and driver paging on them do not enter: prefill streams weights to the engine GPU rather than sending
activations out, so a fast prefill says nothing about decode. Without a ``prefill`` section, ``prefill_tok_s``; without
either, a layer-order prefill from the card's specs (:func:`sim.moe.setup.derived_prefill`).
"""

from __future__ import annotations

import numpy as np

from sim.core.units import GB
from sim.moe.routing import inclusion_probabilities
from sim.moe.setup import EngineSetup


def prefill_seconds(eng: EngineSetup, prompt: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """Seconds to prefill ``prompt - cached`` new tokens after ``cached`` cached ones, per request."""
    new = np.maximum(prompt - cached, 0).astype(np.int64)
    e = eng.spec
    pf = e.prefill if e.prefill is not None else eng.derived_prefill
    if pf is None:
        return new / e.prefill_tok_s
    stream = _stream_seconds(eng)
    combine = np.maximum if pf.overlap else np.add
    if pf.order == "layer":  # every non-resident expert the prompt touches streams once, layer by layer
        return _with_kv(pf, combine(new * pf.token_s, stream(new)), prompt, cached, new)
    chunk = pf.chunk_tokens
    full, rest = np.divmod(new, chunk)
    t = full * combine(chunk * pf.token_s, stream(np.array([chunk]))[0])
    part = np.where(rest > 0, combine(rest * pf.token_s, stream(rest)), 0.0)
    return _with_kv(pf, t + part, prompt, cached, new)


def _with_kv(pf, t: np.ndarray, prompt: np.ndarray, cached: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Add the KV cost of new tokens beyond the resident window, and the set-up of each prefill."""
    if pf.kv_resident_tokens is not None and pf.kv_spill_token_s > 0:
        beyond = np.maximum(prompt - np.maximum(cached, pf.kv_resident_tokens), 0)
        t = t + beyond * pf.kv_spill_token_s
    return np.where(new > 0, t + pf.fixed_s, 0.0)


STREAM_EXACT = 64  # distinct prompt sizes computed exactly; more are interpolated on a geometric grid
STREAM_GRID = 256


def _stream_seconds(eng: EngineSetup):
    """Seconds to stream the non-resident experts ``tokens`` new tokens touch (expected distinct count), for an
    array of token counts."""
    pf = eng.spec.prefill if eng.spec.prefill is not None else eng.derived_prefill
    # consecutive tokens of a prompt leave an expert out with (1 - pi)^(1 + (n - 1)(1 - reuse)) (each token top_k
    # distinct experts, some shared with the token before: sim.moe.routing.untouched)
    pi = inclusion_probabilities(eng.popularity, eng.moe.top_k).ravel()
    cold = ~eng.prefill_resident
    log_out = np.log1p(-np.minimum(pi[cold], 1 - 1e-12))
    reuse = eng.law.locality
    gbps = pf.stream_gbps if pf.stream_gbps is not None else eng.params.link_gbps
    rate = gbps * GB / eng.params.expert_bytes  # experts per second

    def exact(tokens: np.ndarray) -> np.ndarray:
        return np.array([-np.expm1((1.0 + (float(n) - 1.0) * (1.0 - reuse)) * log_out).sum() if n > 0 else 0.0
                         for n in tokens]) / rate

    def seconds(tokens: np.ndarray) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=float)
        sizes, back = np.unique(tokens, return_inverse=True)
        if sizes.size <= STREAM_EXACT:
            return exact(sizes)[back].reshape(tokens.shape)
        grid = np.unique(np.concatenate(([0.0], np.geomspace(1, max(sizes[-1], 1), STREAM_GRID))))
        return np.interp(tokens, grid, exact(grid))  # smooth and monotone in the token count: 0.1% at most

    return seconds
