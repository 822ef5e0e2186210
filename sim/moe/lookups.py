"""The reference decode (``serve.fidelity: lookups``): every expert lookup of every position sampled, request by
request (:class:`sim.moe.routing.RequestRouter`: each token's ``top_k`` distinct experts per layer, consecutive
positions sharing experts through the reuse), and sorted per layer to find the distinct experts each verification
step touches in each tier. With an LRU cache each lookup hits with its expert's probability from the reuse-aware Che
companion (:func:`sim.moe.expert_cache.che_reuse_hit_probabilities`), the same marginal the counts fidelity uses.

Slow by design: it is what the counts fidelity (:mod:`sim.moe.decode_batch`, which samples how many distinct
experts a step touches from their law) is checked against; a 48-layer, 512-expert model with reuse samples about
4,000 tokens a second. Telemetry per request is what the engines print: hit rate over lookups, distinct experts read
over PCIe, decode seconds by what the GPU did.
"""

from __future__ import annotations

import numpy as np

from sim.moe.routing import RequestRouter
from sim.moe.setup import EngineSetup
from sim.moe.stepcost import StepTimes, step_times, tokens_per_step
from sim.serving.telemetry import SUM_NAMES

CHUNK_STEPS = 64  # verification steps sampled at once


def _add_steps(acc: dict[str, float], t: StepTimes, **counts: int) -> None:
    if acc["first_step_s"] < 0:
        acc["first_step_s"] = float(t.total_s[0])
    acc["decode_s"] += float(t.total_s.sum())
    acc["pcie_reads"] += int(t.pcie_reads.sum())
    acc["cpu_experts"] += int(t.cpu_experts.sum())
    acc["compute_s"] += float(t.compute_s.sum())
    acc["stall_s"] += float(t.stall_s.sum())
    acc["eager_s"] += float(t.eager_s.sum())
    acc["host_s"] += float(t.host_s.sum())
    for key, value in counts.items():
        acc[key] += value


def _steps_needed(made: np.ndarray, produced: int, tokens: int) -> tuple[int, int]:
    """How many of these steps finish the request, and the tokens produced after them."""
    done = np.cumsum(made) + produced
    n = int(min(np.searchsorted(done, tokens) + 1, made.size))
    return n, int(done[n - 1])


def decode_request(eng: EngineSetup, tokens: int, rng: np.random.Generator, acceptance: float | None = None
                   ) -> dict[str, float]:
    """Decode one request of ``tokens`` generated tokens, every lookup sampled; returns its telemetry sums (the
    quantities of :data:`sim.serving.telemetry.STEP_SUMS`, ``first_step_s`` and ``output_tokens``). ``acceptance``:
    its draft acceptance (None or NaN: the model's)."""
    router = RequestRouter.start(eng.law, eng.alias, rng, eng.popularity)
    acc: dict[str, float] = dict.fromkeys(SUM_NAMES, 0)
    acc["first_step_s"] = -1.0
    a = eng.moe.draft.acceptance if acceptance is None or acceptance != acceptance else acceptance
    moe = eng.moe
    positions = 1 + moe.draft.tokens
    layers, k = moe.layers, moe.top_k
    host = eng.peers
    produced, eager, steps = 0, False, 0
    while produced < tokens:
        made = tokens_per_step(moe.draft.tokens, a, CHUNK_STEPS, rng)
        n, produced = _steps_needed(made, produced, tokens)
        steps += n
        ids = router.next_tokens(n * positions).reshape(n, positions, layers, k)  # only the steps it needs
        per_layer = np.transpose(ids, (0, 2, 1, 3)).reshape(n, layers, positions * k)
        if eng.spec.policy == "lru":
            hit = rng.random(per_layer.shape) < eng.resident[per_layer]
        else:
            hit = eng.resident[per_layer]
        order = np.argsort(per_layer, axis=2, kind="stable")
        sorted_ids = np.take_along_axis(per_layer, order, axis=2)
        sorted_hit = np.take_along_axis(hit, order, axis=2)
        first = np.ones(sorted_ids.shape, dtype=bool)
        first[:, :, 1:] = sorted_ids[:, :, 1:] != sorted_ids[:, :, :-1]
        tier = eng.tier[sorted_ids]
        fetch = first & ~sorted_hit
        per_tier = [(fetch & (tier == t)).sum(axis=2) for t in range(host + 2)]
        peer = np.stack(per_tier[:host], axis=2) if host else None
        disk = per_tier[host + 1] if eng.host_experts is not None else None
        t = step_times((first & sorted_hit).sum(axis=2), per_tier[host], p=eng.params, eager=eager, peer=peer,
                       disk=disk)
        eager = t.eager_after
        lookup_tier = np.where(hit, -1, eng.tier[per_layer])
        _add_steps(acc, t, lookups=int(hit.size), vram_hits=int(hit.sum()),
                   peer_lookups=int(((lookup_tier >= 0) & (lookup_tier < host)).sum()),
                   disk_lookups=int((lookup_tier == host + 1).sum()), routed=int(first.sum()),
                   peer_experts=0 if peer is None else int(peer.sum()),
                   disk_reads=0 if disk is None else int(disk.sum()))
    acc["output_tokens"] = produced
    acc["steps"] = steps
    return acc
