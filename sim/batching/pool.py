"""The KV pool of a continuous-batching engine and its scheduler's knobs, from a scenario's engine section.

The pool is what the card has left once other tenants, the weights (dense weights and whatever expert cache the
engine keeps) and the runtime (activations, CUDA graphs) took theirs, as vLLM's profiling run finds it:

- ``gpu_memory_utilization`` u: the engine takes ``u x VRAM`` in all, so the pool is that less the weights and the
  runtime; other tenants must leave that much free, or it refuses to start (vLLM's check at start-up);
- ``num_gpu_blocks_override`` (or the ``# GPU blocks`` an engine's log reports) x ``block_size`` tokens replaces
  the sizing;
- ``iteration.kv_pool_gib`` (older key): that many GiB;
- otherwise everything left.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.batching.server import Scheduler
from sim.config.engine import Engine
from sim.core.errors import SimulationError
from sim.core.units import GIB, KIB


@dataclass(frozen=True)
class Pool:
    """A KV pool: its tokens and GiB, and the VRAM the engine holds in all (GiB)."""

    tokens: int
    gib: float
    engine_gib: float  # weights + runtime + pool


def kv_pool(where: str, e: Engine, *, vram_gib: float, tenants_gib: float, weights_gib: float,
            kv_kib_per_token: float, state_kib_per_sequence: float = 0.0) -> Pool:
    """The pool of engine ``e`` (at key path ``where``) on a card of ``vram_gib`` with ``tenants_gib`` taken by other
    programs, holding ``weights_gib`` of weights; KV of ``kv_kib_per_token`` per token, and for a model with
    linear-attention layers ``state_kib_per_sequence`` per sequence it may batch (:func:`max_num_seqs` of them,
    set aside before the tokens are counted, as vLLM's hybrid allocator gives each running request its state)."""
    sc = e.scheduler
    it = e.iteration
    left = vram_gib - tenants_gib - weights_gib - e.runtime_gib
    per_token = kv_kib_per_token * KIB
    if sc is not None and sc.num_gpu_blocks_override is not None:
        tokens = sc.num_gpu_blocks_override * sc.block_size
        gib = tokens * per_token / GIB
        if gib > left + 1e-9:
            raise SimulationError(f"{where}.scheduler.num_gpu_blocks_override: {sc.num_gpu_blocks_override} blocks of "
                                  f"{sc.block_size} tokens need {gib:.2f} GiB of KV; the card leaves {left:.2f} GiB")
        return Pool(tokens, gib, weights_gib + e.runtime_gib + gib)
    if sc is not None and sc.gpu_memory_utilization is not None:
        budget = sc.gpu_memory_utilization * vram_gib
        free = vram_gib - tenants_gib
        if budget > free + 1e-9:
            raise SimulationError(f"{where}.scheduler.gpu_memory_utilization: the engine wants {budget:.2f} GiB "
                                  f"({sc.gpu_memory_utilization:g} x {vram_gib:g} GiB) but other tenants leave "
                                  f"{free:.2f} GiB free (vLLM refuses to start); lower it")
        gib = budget - weights_gib - e.runtime_gib
        where_key = f"{where}.scheduler.gpu_memory_utilization"
    elif it is not None and it.kv_pool_gib is not None:
        gib = it.kv_pool_gib
        where_key = f"{where}.iteration.kv_pool_gib"
        if gib > left + 1e-9:
            raise SimulationError(f"{where}: does not fit: {vram_gib:g} GiB less other tenants {tenants_gib:g} GiB, "
                                  f"weights {weights_gib:.2f} GiB and runtime {e.runtime_gib:g} GiB leaves "
                                  f"{left:.2f} GiB for a KV pool of {gib:g} GiB")
    else:
        gib = left
        where_key = where
    if gib <= 0:
        raise SimulationError(f"{where_key}: does not fit: {vram_gib:g} GiB less other tenants {tenants_gib:g} GiB, "
                              f"weights {weights_gib:.2f} GiB and runtime {e.runtime_gib:g} GiB leaves no room for a "
                              "KV pool")
    states = max_num_seqs(e) * state_kib_per_sequence * KIB / GIB
    if states >= gib:
        raise SimulationError(f"{where_key}: a KV pool of {gib:.3g} GiB cannot hold the per-sequence states of "
                              f"{max_num_seqs(e)} sequences ({states:.3g} GiB of {state_kib_per_sequence:g} KiB each, "
                              "the model's linear-attention layers): fewer max_num_seqs, or more memory")
    tokens = int((gib - states) * GIB // per_token)
    if tokens < 1:
        raise SimulationError(f"{where_key}: a KV pool of {gib:.3g} GiB holds no token of {kv_kib_per_token:g} KiB")
    return Pool(tokens, gib, weights_gib + e.runtime_gib + gib)


def moe_kv_pool(e: Engine, *, kv_kib_per_token: float, left_gib: float, state_kib_per_sequence: float = 0.0) -> Pool:
    """The pool of a batching MoE engine: the scheduler's block override, else the context it allocates KV for
    (``context_tokens``, inside its overhead), else what its expert cache leaves (``left_gib``) once the per-sequence
    states of a model with linear-attention layers are set aside (one per sequence it may batch)."""
    sc = e.scheduler
    per_token = kv_kib_per_token * KIB
    if sc is not None and sc.num_gpu_blocks_override is not None:
        tokens = sc.num_gpu_blocks_override * sc.block_size
    elif e.context_tokens > 0:
        tokens = e.context_tokens
    else:
        left = left_gib - max_num_seqs(e) * state_kib_per_sequence * KIB / GIB if state_kib_per_sequence else left_gib
        tokens = int(left * GIB // per_token) if per_token > 0 else 10**12
    return Pool(tokens, tokens * per_token / GIB, 0.0)


def max_num_seqs(e: Engine) -> int:
    """Sequences batched at most: ``scheduler.max_num_seqs``, else ``parallel``."""
    sc = e.scheduler
    return sc.max_num_seqs if sc is not None and sc.max_num_seqs is not None else e.parallel


def token_budget(e: Engine) -> int:
    """Tokens one iteration processes at most: ``scheduler.max_num_batched_tokens``, else
    ``iteration.token_budget``, else 512."""
    sc = e.scheduler
    if sc is not None and sc.max_num_batched_tokens is not None:
        return sc.max_num_batched_tokens
    return e.iteration.token_budget if e.iteration is not None else 512


def scheduler_for(e: Engine, pool: Pool, swap_s_per_token: float) -> Scheduler:
    """The scheduler of engine ``e`` over ``pool``; a swapped token's KV costs ``swap_s_per_token`` each way; its
    prefix cache holds whole blocks of ``scheduler.block_size`` tokens (16 without a scheduler section)."""
    sc = e.scheduler
    budget = token_budget(e)
    if sc is None:
        return Scheduler(budget, pool.tokens, swap_s_per_token=swap_s_per_token)
    return Scheduler(budget, pool.tokens, chunked_prefill=sc.enable_chunked_prefill,
                     prefix_caching=sc.enable_prefix_caching, preemption=sc.preemption_mode,
                     swap_s_per_token=swap_s_per_token, block_size=sc.block_size)
