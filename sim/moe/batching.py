"""Continuous batching (``engine.batching: true``): one verification step serves every decoding sequence and fetches
the union of their experts.

Up to ``parallel`` sequences are admitted. A newly admitted sequence prefills alone (prefill has priority: the decode
batch pauses, as a scheduler without chunked prefill does), then joins the batch. A step of a batch of ``k``
sequences touches, per layer, the distinct experts of ``k x (1 + drafts) x top_k`` draws of the routing law: more
than one sequence's step, fewer than ``k`` of them, which is what batching buys; its time comes from
:mod:`sim.moe.stepcost` with the engine's whole cache (batching does not divide it). Each sequence advances one
verification step per batch step (its own number of steps, from its own acceptance). A batch that reads over PCIe
pays the eager overhead on that step only (membership changes, so eagerness does not stick).

The batch advances in vectorised chunks: up to the next completion, sampled at once; a new admission stops it at
the step in progress. Per-sequence telemetry: its decode seconds are wall time from joining the batch to its last
step; compute, stall and eager seconds and distinct experts are the batch's, shared equally among its members; hit
rate per lookup is the routing law's (batching does not change which tier serves a lookup).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import simpy

from sim.moe.decode_batch import TierSampler, engine_step_law
from sim.moe.expert_counts import draws_per_step
from sim.moe.setup import EngineSetup
from sim.moe.spec_costs import tokens_per_expert
from sim.moe.stepcost import StepParams, StepTimes
from sim.serving.queue import QueueSpec, Server, Timeline, Work
from sim.serving.telemetry import LOOKUP_COUNTS, SUM_NAMES

CHUNK_STEPS = 256  # batch steps sampled at once at most


class BatchSteps:
    """Samples batch step times for a batch of ``k`` sequences (laws built once per ``k``)."""

    def __init__(self, eng: EngineSetup, rng: np.random.Generator) -> None:
        self.eng, self.rng = eng, rng
        self.params = dataclasses.replace(eng.params, break_mode="per_step")
        self.batch_params: dict[int, StepParams] = {}
        self.laws: dict[int, TierSampler] = {}
        moe = eng.moe
        self.draws = draws_per_step(moe.top_k, 1 + moe.draft.tokens, eng.law.locality)

    def law(self, k: int) -> TierSampler:
        if k not in self.laws:
            self.laws[k] = TierSampler.build(engine_step_law(self.eng, self.eng.popularity, k * self.draws))
        return self.laws[k]

    def params_for(self, k: int) -> StepParams:
        """Step costs of a batch of ``k`` sequences: the dense work's arithmetic grows with the positions it
        processes and each resident expert's with the tokens routed to it (a roofline: bytes or arithmetic,
        whichever takes longer); from the card's specs, unless the scenario gives those costs in seconds."""
        if k not in self.batch_params:
            specs, moe = self.eng.specs, self.eng.moe
            p = self.params
            if specs is not None and k > 1:
                positions = k * (1 + moe.draft.tokens)
                tpe = tokens_per_expert(positions * moe.top_k, moe.experts_per_layer)
                p = dataclasses.replace(p, dense_s=specs.dense_s(positions), gpu_expert_s=specs.gpu_expert_s(tpe))
            self.batch_params[k] = p
        return self.batch_params[k]

    def sample(self, k: int, steps: int, context_tokens: float = 0.0) -> tuple[StepTimes, dict[str, np.ndarray]]:
        """Step times of ``steps`` batch steps whose members hold ``context_tokens`` tokens of context together,
        and per step the distinct experts touched, computed by peers and read from disk."""
        c = self.law(k).sample(self.eng, steps, self.rng)
        experts = {"routed": c.routed}
        if c.peer is not None:
            experts["peer_experts"] = c.peer.sum(axis=(1, 2))
        if c.disk is not None:
            experts["disk_reads"] = c.disk.sum(axis=1)
        t = c.times(self.params_for(k))
        kv = self.eng.specs.kv_s_per_token if self.eng.specs is not None else 0.0
        if kv and context_tokens:  # attention reads every member's KV once per step
            t = dataclasses.replace(t, compute_s=t.compute_s + kv * context_tokens)
        return t, experts


class BatchServer(Server):
    """Admission and queue as :class:`sim.serving.queue.Server`; the GPU runs prefills, then batch steps (its own
    process), and counts as busy whenever a sequence is active."""

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline, done,
                 steps: np.ndarray, sampler: BatchSteps, context: np.ndarray | None = None) -> None:
        super().__init__(env, work, spec, tl, done)
        self.steps, self.sampler = steps, sampler
        self.context = np.zeros(len(steps)) if context is None else context  # each sequence's prompt (tokens)
        self.prefill_q: list[int] = []
        self.decoding: dict[int, int] = {}  # sequence -> verification steps left
        self.joined: dict[int, float] = {}
        self.wake = env.event()
        d = work.telemetry
        for key in (*SUM_NAMES, "first_step_s"):  # what the steps add up (batch_lookups gave the lookups)
            if key not in LOOKUP_COUNTS:
                d[key] = np.zeros(len(steps))
        env.process(self._loop())

    def _start(self, i: int) -> None:
        super()._start(i)
        self.prefill_q.append(i)
        if not self.wake.triggered:
            self.wake.succeed()

    def _loop(self):
        env, work, d = self.env, self.work, self.work.telemetry
        while True:
            if self.prefill_q:
                i = self.prefill_q.pop(0)
                yield env.timeout(float(work.prefill_s[i]))
                if self.wake.triggered:  # admissions during the prefill are in prefill_q already
                    self.wake = env.event()
                self._account()
                self.decoding[i] = int(self.steps[i])
                self.joined[i] = env.now
                continue
            if not self.decoding:
                yield self.wake
                self.wake = env.event()
                continue
            members = list(self.decoding)
            k = len(members)
            m = min(min(self.decoding.values()), CHUNK_STEPS)
            made = work.output_tokens[members] / np.maximum(self.steps[members], 1)  # tokens per step, mean
            done = self.steps[members] - np.array([self.decoding[i] for i in members])
            # the members' context at the chunk's middle step: it grows by `made` per step within the chunk
            context = float(np.sum(self.context[members] + made * (done + (m - 1) / 2)))
            t, experts = self.sampler.sample(k, m, context)
            ends = env.now + np.cumsum(t.total_s)
            timer = env.timeout(float(ends[-1] - env.now))
            yield timer | self.wake
            done = m
            if timer.processed and self.wake.triggered:  # woke at the chunk's very end: nothing to cut
                self.wake = env.event()
            elif not timer.processed:  # a sequence was admitted: finish the step in progress, then let it prefill
                self.wake = env.event()
                j = min(int(np.searchsorted(ends, env.now, side="left")), m - 1)
                if ends[j] > env.now:
                    yield env.timeout(float(ends[j] - env.now))
                done = j + 1
            self._account()
            share = 1.0 / k
            for key, values in (("compute_s", t.compute_s), ("stall_s", t.stall_s), ("eager_s", t.eager_s),
                                ("host_s", t.host_s), ("pcie_reads", t.pcie_reads), ("cpu_experts", t.cpu_experts),
                                *experts.items()):
                d[key][members] += float(values[:done].sum()) * share
            for i in members:
                if self.decoding[i] == self.steps[i]:  # its first step: the first token
                    self.tl.first_token_s[i] = float(ends[0])
                    d["first_step_s"][i] = float(t.total_s[0])
                self.decoding[i] -= done
                if self.decoding[i] == 0:
                    del self.decoding[i]
                    d["decode_s"][i] = env.now - self.joined[i]
                    self._complete(i)
            self._admit_waiting()


def batch_lookups(eng: EngineSetup, steps: np.ndarray, d: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """Lookups and the tiers serving them, per sequence: batching does not change which tier serves a lookup."""
    moe = eng.moe
    sl = engine_step_law(eng, eng.popularity, draws_per_step(moe.top_k, 1 + moe.draft.tokens, eng.law.locality))
    lookups = steps * (1 + moe.draft.tokens) * moe.layers * moe.top_k
    by_tier = rng.multinomial(lookups, sl.lookup_shares)
    host = eng.peers
    d["lookups"], d["vram_hits"] = lookups.astype(float), by_tier[:, 0].astype(float)
    d["peer_lookups"] = by_tier[:, 1:host + 1].sum(axis=1).astype(float)
    d["disk_lookups"] = by_tier[:, -1].astype(float)
