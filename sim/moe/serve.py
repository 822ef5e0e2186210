"""Serving an MoE model from an expert cache in VRAM: the MoE engine kind.

``serve`` builds the workload (:mod:`sim.serving.workload`), samples every request's GPU work (decode by
:mod:`sim.moe.decode_batch` or, with ``fidelity: lookups``, :mod:`sim.moe.lookups`; prefill by :mod:`sim.moe.prefill`)
and moves the requests through the queue (:mod:`sim.serving.queue`: slots taking turns on the GPU), or with
``engine.batching`` through the continuous-batching engine dense models share (:mod:`sim.batching`: chunked
prefill, a KV pool, admission and preemption), its experts an operator of the iteration
(:mod:`sim.moe.batch_cost`). Metrics are what the engines print: hit rate over lookups, share of routed experts read
over PCIe, decode tok/s, where decode time goes, energy.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from sim.batching.admission import ReservingBatchingServer, ReservingSlotServer, log_pool_tokens, sequence_tokens
from sim.batching.metrics import batching_metrics
from sim.batching.pool import max_num_seqs, moe_kv_pool, scheduler_for
from sim.batching.server import BatchingServer
from sim.config.scenario import Scenario
from sim.core.output import Table
from sim.core.units import GB, GIB, KIB
from sim.moe.batch_cost import TALLY, moe_step_cost
from sim.moe.decode_batch import decode_many, engine_step_law, steps_needed
from sim.moe.expert_counts import draws_per_step
from sim.moe.lookups import decode_request
from sim.moe.prefill import prefill_seconds
from sim.moe.report import report_lines
from sim.moe.setup import EngineSetup, setup_engine
from sim.serving.engine import ServeRun
from sim.serving.metrics import SPILL_BUCKETS, fsum, load_metrics, share, spill_buckets
from sim.serving.queue import QueueSpec, Timeline, Work, run_queue
from sim.serving.served import ServedRequests, as_served
from sim.serving.telemetry import SUM_NAMES, TABLE
from sim.serving.workload import RequestTable, build_table


def request_work(eng: EngineSetup, table: RequestTable, max_tokens: int | None, rng: np.random.Generator,
                 fidelity: str = "counts") -> Work:
    """Every request's GPU work alone on the engine: its prefill, and its decode sampled up front (it does not depend
    on the queue)."""
    out = table.output_tokens if max_tokens is None else np.minimum(table.output_tokens, max_tokens)
    capped = out < table.output_tokens
    if fidelity == "counts":
        d = decode_many(eng, out, table.acceptance, rng)
    else:  # every lookup sampled, request by request (slow; for checking the counts law)
        rows = [decode_request(eng, int(k), rng, float(a)) for k, a in zip(out, table.acceptance, strict=True)]
        d = {key: np.array([r[key] for r in rows], dtype=float) for key in rows[0]} if rows else {}
    add_context_reads(eng, d, table.prompt_tokens.astype(float))
    pre = prefill_seconds(eng, table.prompt_tokens, table.cached_tokens)
    return Work(pre, pre + d["first_step_s"], total_s=pre + d["decode_s"], output_tokens=out, capped=capped,
                telemetry=d)


def add_context_reads(eng: EngineSetup, d: dict[str, np.ndarray], context: np.ndarray) -> None:
    """Add the attention's KV reads to each request's decode: every step reads the KV of its whole context, which
    starts at the prompt and grows by the tokens each step yields (their mean: ``output / steps``), so a request
    of ``S`` steps and ``T`` tokens reads ``S x prompt + T (S - 1) / 2`` tokens' KV, at the card's memory rate."""
    kv = eng.specs.kv_s_per_token if eng.specs is not None else 0.0
    if kv == 0 or "steps" not in d:
        return
    steps, tokens = d["steps"], d["output_tokens"]
    extra = kv * (steps * context + tokens * np.maximum(steps - 1, 0) / 2)
    for key in ("decode_s", "compute_s"):
        d[key] = d[key] + extra
    d["first_step_s"] = d["first_step_s"] + np.where(steps > 0, kv * context, 0.0)


def _served(eng: EngineSetup, table: RequestTable, work: Work, tl: Timeline, shared: bool) -> ServedRequests:
    """The requests' telemetry. A request that shared the GPU (``shared``: batched, or slots taking turns) decodes in
    wall time and keeps its GPU seconds apart; slots taking turns: from its first token to its end, plus its first
    step."""
    d = work.telemetry
    sums = {k: d[k] for k in SUM_NAMES}
    gpu = None
    if shared:
        gpu = d["compute_s"] + d["stall_s"] + d["eager_s"] + d["host_s"]
        sums["decode_s"] = tl.end_s - tl.first_token_s + d["first_step_s"]
    return ServedRequests.of_run(table, tl, output_tokens=work.output_tokens, prefill_s=work.prefill_s, sums=sums,
                                 decode_gpu_s=gpu)


class MoeEngine:
    """The MoE engine kind (:class:`sim.serving.engine.EngineKind`)."""

    name = "moe"
    first_token_in_prefill = False  # the first verification step yields it, inside decode_s

    def setup(self, scn: Scenario, machine: str) -> EngineSetup:
        return setup_engine(scn, machine)

    def serve(self, scn: Scenario, rng: np.random.Generator) -> ServeRun:
        assert scn.serve is not None
        sv = scn.serve
        eng = setup_engine(scn, sv.machine)
        table = build_table(sv, rng)
        if eng.spec.batching:
            return serve_batched(eng, table, sv.max_tokens, QueueSpec.of(sv, max_num_seqs(eng.spec)), rng)
        work = request_work(eng, table, sv.max_tokens, rng, sv.fidelity)
        pool = log_pool_tokens(eng.spec)
        if pool is None:  # slots with their own context each (llama.cpp's -np): no pool beyond the slots
            tl, _ = run_queue(table, work, QueueSpec.of(sv, eng.spec.parallel), rng)
            return ServeRun(eng, _served(eng, table, work, tl, eng.spec.parallel > 1), tl)
        server = partial(ReservingSlotServer, kv_pool_tokens=pool,
                         kv_sequence=sequence_tokens(table.prompt_tokens, work.output_tokens))
        tl, srv = run_queue(table, work, QueueSpec.of(sv, eng.spec.parallel), rng, server)
        memo = {"kv_pool_tokens": pool, "kv_pool_gib": pool * (eng.moe.kv_kib_per_token or 0.0) * KIB / GIB,
                "kv_booked_peak_tokens": srv.kv_booked_peak}
        return ServeRun(eng, _served(eng, table, work, tl, eng.spec.parallel > 1), tl, memo=memo)

    def replay(self, scn: Scenario, table: RequestTable, rng: np.random.Generator) -> ServeRun:
        """One request after another, one decode slot, every lookup's law by counts; no cap on lengths."""
        assert scn.serve is not None
        eng = setup_engine(scn, scn.serve.machine)
        work = request_work(eng, table, None, rng)
        tl, _ = run_queue(table, work, QueueSpec(1, scn.serve.request_overhead_s), rng)
        return ServeRun(eng, _served(eng, table, work, tl, shared=False), tl)

    def metrics(self, run: ServeRun) -> dict[str, float]:
        out = serve_metrics(run.setup, run.requests, run.timeline)
        if run.counters:  # continuous batching: the pool, the batch, preemptions, time per output token
            out |= batching_metrics(run.counters, int(run.memo["kv_pool_tokens"]), run.requests, run.timeline)
            out["kv_pool_gib"] = run.memo["kv_pool_gib"]
        elif "kv_pool_tokens" in run.memo:  # slots under the pool of the engine's log
            out |= {"kv_pool_tokens": float(run.memo["kv_pool_tokens"]), "kv_pool_gib": run.memo["kv_pool_gib"]}
        if "kv_booked_peak_tokens" in run.memo:  # the pool's admission rule (sim.batching.admission)
            out["kv_booked_peak_share"] = run.memo["kv_booked_peak_tokens"] / run.memo["kv_pool_tokens"]
        return out

    def tables(self, run: ServeRun) -> dict[str, Table]:
        return {"requests": Table(TABLE, run.requests.table_rows()),
                "spill_buckets": Table(SPILL_BUCKETS, _buckets(run))}

    def summary(self, run: ServeRun) -> dict:
        return {"spill_buckets": _buckets(run)}

    def report_lines(self, scn: Scenario, run: ServeRun, metrics: dict[str, float]) -> list[str]:
        return report_lines(scn, run, metrics, _buckets(run))


def serve_batched(eng: EngineSetup, table: RequestTable, max_tokens: int | None, spec: QueueSpec,
                  rng: np.random.Generator) -> ServeRun:
    """Serve ``table`` by continuous batching (:mod:`sim.batching`) on MoE engine ``eng``: each request's decode
    needs the verification steps its output takes after the first token (drawn from its acceptance); each
    iteration costs its operators, the experts its positions touch among them. Per request, what the tiers served
    is its share of the iterations it was in (GPU seconds over the mean iteration), at the run's mean batch."""
    out = table.output_tokens if max_tokens is None else np.minimum(table.output_tokens, max_tokens)
    moe, e = eng.moe, eng.spec
    acc = np.where(np.isnan(table.acceptance), moe.draft.acceptance, table.acceptance)
    steps = steps_needed(np.maximum(out - 1, 0), acc, moe.draft.tokens, rng)
    cost, experts = moe_step_cost(eng, rng)
    kv_kib = moe.kv_kib_per_token or 0.0
    pool = moe_kv_pool(e, kv_kib_per_token=kv_kib, left_gib=eng.free_gib - eng.cache_gib - moe.draft.head_mib / 1024,
                       state_kib_per_sequence=moe.state_kib_per_sequence)
    sched = scheduler_for(e, pool, kv_kib * KIB / (eng.params.link_gbps * GB))
    n = len(table)
    work = Work(np.zeros(n), np.zeros(n), total_s=np.zeros(n), output_tokens=out, capped=out < table.output_tokens,
                telemetry={"decode_s": np.zeros(n)})
    booking = {}
    factory: type[BatchingServer] = BatchingServer
    if log_pool_tokens(e) is not None:  # the pool of the engine's log: whole sequences booked at admission
        factory = ReservingBatchingServer
        booking = {"kv_pool_tokens": pool.tokens, "kv_sequence": sequence_tokens(table.prompt_tokens, out)}
    server = partial(factory, cost=cost, sched=sched, prompt=table.prompt_tokens, cached=table.cached_tokens,
                     steps=steps, **booking)
    tl, srv = run_queue(table, work, spec, rng, server)
    stats = dict(srv.stats)
    share_s = np.asarray(srv.share_s)
    d = {key: np.zeros(n) for key in SUM_NAMES}
    d["decode_s"] = work.telemetry["decode_s"]
    iterations = stats["iterations"]
    if iterations and stats["busy_s"] > 0:
        mean_iteration = stats["busy_s"] / iterations
        positions = stats["batch_area"] / stats["busy_s"] * cost.positions_per_step
        shares = share_s / mean_iteration  # iterations each request was in, each divided among its members
        for key in TALLY:
            d[key] = shares * experts.value(positions, key)
        d["host_s"] = shares * eng.params.host_s
        d["compute_s"] = np.maximum(share_s - d["stall_s"] - d["eager_s"] - d["host_s"], 0.0)
    batch_lookups(eng, steps + (out > 0), d, rng)
    sums = {k: d[k] for k in SUM_NAMES}
    requests = ServedRequests.of_run(table, tl, output_tokens=out, prefill_s=np.asarray(srv.prefill_s), sums=sums,
                                     decode_gpu_s=share_s)
    memo = {"kv_pool_tokens": pool.tokens, "kv_pool_gib": pool.gib}
    if booking:
        memo["kv_booked_peak_tokens"] = srv.kv_booked_peak
    return ServeRun(eng, requests, tl, stats, memo=memo)


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


def _buckets(run: ServeRun) -> list[dict]:
    """Decode by request spill share and hit rate (``spill_buckets.csv``), computed once per run."""
    if "spill_buckets" not in run.memo:
        run.memo["spill_buckets"] = spill_buckets(run.requests)
    return run.memo["spill_buckets"]


def serve_metrics(eng: EngineSetup, requests, tl: Timeline | None = None) -> dict[str, float]:
    """Decode telemetry over the served requests (a run's columns, or records); with the run's timeline, the load
    metrics too."""
    reqs = as_served(requests)
    r = reqs.subset(reqs.served)
    out = load_metrics(reqs, tl, eng.vram) if tl is not None else {}
    if not len(r):
        return out
    c = r.columns
    tokens = int(c["output_tokens"].sum())
    wall = fsum(c["decode_s"]) or float("nan")  # all step costs zero: no rate to report
    decode = fsum(c["decode_gpu_s"]) or float("nan")  # GPU seconds: the time shares are of these
    idle_share = eng.params.break_idle_share
    busy = fsum(c["compute_s"] + c["stall_s"] + (1 - idle_share) * c["eager_s"])
    routed = c["routed"]
    offload = c["peer_experts"] + c["cpu_experts"] + c["pcie_reads"]
    out |= {
        "expert_slots": float(eng.expert_slots),
        "expert_coverage": eng.coverage,
        "expert_cache_gib": eng.cache_gib,
        "free_vram_gib": eng.free_gib,
        "expert_hit_rate": float(np.median(r.hit_rate)),
        "pcie_spill_share": float(np.median(r.pcie_share)),
        "decode_tok_s": tokens / wall,
        "decode_tok_s_median": float(np.median(r.decode_tok_s)),
        "gpu_busy_share": share(busy, decode),
        "compute_share": share(fsum(c["compute_s"]), decode),
        "stall_share": share(fsum(c["stall_s"]), decode),
        "eager_share": share(fsum(c["eager_s"]), decode),
        "host_share": share(fsum(c["host_s"]), decode),
        "requests_spilling_share": float(np.mean(c["pcie_reads"] > 0)),
        # routed experts not served from the engine GPU's VRAM: peers, host CPU, PCIe reads (Basalt's "pcie=")
        "offload_share": float(np.median(np.divide(offload, routed, out=np.zeros(routed.size), where=routed > 0))),
        "ttft_s_median": float(np.median(c["ttft_s"])),
        "requests": float(len(r)),
        "output_tokens": float(tokens),
    }
    pw = eng.power
    if pw is not None:
        energy = fsum(pw.busy_w * c["compute_s"] + pw.stalled_w * (c["stall_s"] + (1 - idle_share) * c["eager_s"])
                      + pw.idle_w * (c["host_s"] + idle_share * c["eager_s"]))
        out["energy_j_per_token"] = energy / tokens
        out["gpu_power_w"] = energy / decode
    return out
