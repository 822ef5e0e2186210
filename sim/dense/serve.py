"""Serving a dense model with continuous batching: the dense engine kind.

``serve`` builds the workload (:mod:`sim.serving.workload`) and moves it through the queue into the batching loop
of :mod:`sim.dense.server`, whose iterations cost what the roofline of :mod:`sim.dense.step` says. Metrics: the
server's (throughput, TTFT, queueing), decode rates and time per output token, batch size, KV use and preemptions,
and how many iterations were bound by memory reads.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from sim.config.scenario import Scenario
from sim.core.output import Table
from sim.dense.report import report_lines
from sim.dense.server import DenseServer
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
    server = partial(DenseServer, setup=setup, prompt=table.prompt_tokens, cached=table.cached_tokens, exact=exact)
    tl, eng = run_queue(table, work, spec, rng, server)
    share = np.asarray(eng.share_s)  # GPU seconds: each iteration's time divided among its sequences
    sums = {"decode_s": work.telemetry["decode_s"], "compute_s": share}
    requests = ServedRequests.of_run(table, tl, output_tokens=out, prefill_s=np.asarray(eng.prefill_s), sums=sums,
                                     decode_gpu_s=share)
    return ServeRun(setup, requests, tl, dict(eng.stats))


def serve_dense(scn: Scenario, rng: np.random.Generator, exact: bool = False) -> ServeRun:
    """Serve the scenario's workload on its dense engine (``exact``: every decode iteration its own event)."""
    assert scn.serve is not None
    sv = scn.serve
    setup = setup_dense(scn, sv.machine)
    table = build_table(sv, rng)
    return _serve_table(setup, table, max_tokens=sv.max_tokens, spec=QueueSpec.of(sv, setup.spec.parallel), rng=rng,
                        exact=exact)


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
    busy = stats["busy_s"]
    iterations = stats["iterations"]
    out |= {
        "kv_pool_tokens": float(setup.kv_pool_tokens),
        "kv_pool_gib": setup.kv_pool_gib,
        "kv_peak_share": stats["kv_peak_tokens"] / setup.kv_pool_tokens,
        "kv_mean_share": share(stats["kv_area"] / busy, setup.kv_pool_tokens) if busy > 0 else 0.0,
        "kv_preemptions": float(stats["preemptions"]),
        "iterations": float(iterations),
        "memory_bound_share": stats["memory_bound_iterations"] / iterations if iterations else 0.0,
        "prefill_iteration_share": stats["prefill_iterations"] / iterations if iterations else 0.0,
        "batch_mean": stats["batch_area"] / busy if busy > 0 else 0.0,
    }
    if len(r):
        tokens = int(r.output_tokens.sum())
        decode_wall = float(r.decode_s.sum())
        after_first = r.output_tokens - 1  # the first token comes with the prefill
        decoded = (after_first > 0) & (r.decode_s > 0)
        tpot = r.decode_s[decoded] / after_first[decoded]
        out |= {
            "decode_tok_s": (tokens - len(r)) / decode_wall if decode_wall > 0 else float("nan"),
            "ttft_s_median": float(np.median(r.ttft_s)),
            "requests": float(len(r)),
            "output_tokens": float(tokens),
            "gpu_busy_share": share(busy, span),
        }
        if tpot.size:
            out |= {"decode_tok_s_median": float(np.median(1 / tpot)), "tpot_p50_s": float(np.percentile(tpot, 50)),
                    "tpot_p99_s": float(np.percentile(tpot, 99))}
    return out
