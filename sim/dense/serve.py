"""Serving a dense model with continuous batching: the dense engine kind.

``serve`` builds the workload (:mod:`sim.serving.workload`) and moves it through the queue into the batching loop
of :mod:`sim.batching.server`, whose iterations cost what :class:`sim.batching.cost.StepCost` says. Metrics: the
server's (throughput, TTFT, queueing), decode rates and time per output token, batch size, KV use and preemptions,
and how many iterations were bound by memory reads; with a workload of shared prefixes (system prompts, chat
sessions), the prefix cache's hits (:func:`sim.batching.metrics.prefix_metrics`: its requests' ``cached_tokens`` are
then the tokens each did not prefill at its first admission, hand-set or found in the cache).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from sim.batching.admission import ReservingBatchingServer, log_pool_tokens, sequence_tokens
from sim.batching.metrics import batching_metrics, prefix_metrics
from sim.batching.pool import max_num_seqs
from sim.batching.server import BatchingServer
from sim.config.scenario import Scenario
from sim.core.output import Table
from sim.dense.report import report_lines
from sim.dense.setup import DenseSetup, setup_dense
from sim.serving.engine import ServeRun
from sim.serving.metrics import load_metrics, share
from sim.serving.queue import QueueSpec, Work, run_queue
from sim.serving.served import ServedRequests
from sim.serving.telemetry import TABLE
from sim.serving.workload import RequestTable, build_table


def _serve_table(setup: DenseSetup, table: RequestTable, max_tokens: int | None, spec: QueueSpec,
                 rng: np.random.Generator, exact: bool = False) -> ServeRun:
    out = table.output_tokens if max_tokens is None else np.minimum(table.output_tokens, max_tokens)
    n = len(table)
    zeros = np.zeros(n)
    work = Work(zeros, zeros, total_s=zeros, output_tokens=out, capped=out < table.output_tokens,
                telemetry={"decode_s": np.zeros(n)})
    booking = {}
    factory: type[BatchingServer] = BatchingServer
    if log_pool_tokens(setup.spec) is not None:  # the pool of the engine's log: whole sequences booked at admission
        factory = ReservingBatchingServer
        booking = {"kv_pool_tokens": setup.kv_pool_tokens, "kv_sequence": sequence_tokens(table.prompt_tokens, out)}
    shared = table.prefix_segment is not None and table.prefix_tokens is not None
    if shared:  # the prefix cache's segments (sim.batching.prefix)
        booking["prefix"] = (table.prefix_segment, table.prefix_tokens)
    server = partial(factory, cost=setup.cost, sched=setup.scheduler, prompt=table.prompt_tokens,
                     cached=table.cached_tokens, exact=exact, **booking)
    tl, eng = run_queue(table, work, spec, rng, server)
    memo = {"kv_booked_peak_tokens": eng.kv_booked_peak} if "kv_sequence" in booking else {}
    if shared:  # what each request did not prefill at its first admission: hand-set, or the cache's hit
        cached = np.asarray(eng.cached, dtype=np.int64)
        if eng.cache is not None:
            cached = np.maximum(cached, np.asarray(eng.prefix_hit, dtype=np.int64))
        table = replace(table, cached_tokens=cached)
        memo["prefix_evicted_tokens"] = eng.cache.evicted_tokens if eng.cache is not None else 0
    share = np.asarray(eng.share_s)  # GPU seconds: each iteration's time divided among its sequences
    sums = {"decode_s": work.telemetry["decode_s"], "compute_s": share}
    requests = ServedRequests.of_run(table, tl, output_tokens=out, prefill_s=np.asarray(eng.prefill_s), sums=sums,
                                     decode_gpu_s=share)
    return ServeRun(setup, requests, tl, dict(eng.stats), memo=memo)


def serve_dense(scn: Scenario, rng: np.random.Generator, exact: bool = False) -> ServeRun:
    """Serve the scenario's workload on its dense engine (``exact``: every decode iteration its own event)."""
    assert scn.serve is not None
    sv = scn.serve
    setup = setup_dense(scn, sv.machine)
    table = build_table(sv, rng)
    spec = QueueSpec.of(sv, max_num_seqs(setup.spec))
    return _serve_table(setup, table, max_tokens=sv.max_tokens, spec=spec, rng=rng, exact=exact)


class DenseEngine:
    """The dense engine kind (:class:`sim.serving.engine.EngineKind`)."""

    name = "dense"
    first_token_in_prefill = True  # the iteration that reads the prompt's last chunk yields it

    def setup(self, scn: Scenario, machine: str) -> DenseSetup:
        return setup_dense(scn, machine)

    def serve(self, scn: Scenario, rng: np.random.Generator) -> ServeRun:
        return serve_dense(scn, rng)

    def replay(self, scn: Scenario, table: RequestTable, rng: np.random.Generator) -> ServeRun:
        """One request after another, alone on the engine; no cap on lengths."""
        assert scn.serve is not None
        setup = setup_dense(scn, scn.serve.machine)
        return _serve_table(setup, table, None, QueueSpec(1, scn.serve.request_overhead_s), rng)

    def metrics(self, run: ServeRun) -> dict[str, float]:
        return dense_metrics(run)

    def tables(self, run: ServeRun) -> dict[str, Table]:
        return {"requests": Table(TABLE, run.requests.table_rows())}

    def summary(self, run: ServeRun) -> dict:
        return {}

    def report_lines(self, scn: Scenario, run: ServeRun, metrics: dict[str, float]) -> list[str]:
        return report_lines(scn, run, metrics)


def dense_metrics(run: ServeRun) -> dict[str, float]:
    """Load metrics (:func:`sim.serving.metrics.load_metrics`), decode rates and time per output token, batch size, KV
    use and the roofline regime of the iterations."""
    setup: DenseSetup = run.setup
    recs, tl, stats = run.requests, run.timeline, run.counters
    out = load_metrics(recs, tl, setup.vram)
    r = recs.subset(recs.served)
    span = tl.makespan_s
    out |= {"kv_pool_gib": setup.kv_pool_gib} | batching_metrics(stats, setup.kv_pool_tokens, recs, tl)
    if "kv_booked_peak_tokens" in run.memo:  # the pool's admission rule (sim.batching.admission)
        out["kv_booked_peak_share"] = run.memo["kv_booked_peak_tokens"] / setup.kv_pool_tokens
    if "prefix_evicted_tokens" in run.memo:  # a workload of shared prefixes
        out |= prefix_metrics(recs, run.memo["prefix_evicted_tokens"])
    if len(r):
        tokens = int(r.output_tokens.sum())
        decode_wall = float(r.decode_s.sum())
        out |= {
            "decode_tok_s": (tokens - len(r)) / decode_wall if decode_wall > 0 else float("nan"),
            "ttft_s_median": float(np.median(r.ttft_s)),
            "requests": float(len(r)),
            "output_tokens": float(tokens),
            "gpu_busy_share": share(stats["busy_s"], span),
        }
    return out
