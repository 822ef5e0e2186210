"""Serving requests on a llama.cpp engine (``llama-server``): the llamacpp engine kind.

Every request costs its prompt (the tokens not already cached, in ubatches, after the cached ones) and its decode
steps, each at its growing context (:mod:`sim.llamacpp.costs`). The queue in front (:mod:`sim.serving.queue`)
gives it one of ``parallel`` slots; slots take turns on the devices (one step at a time: a batched step of several
slots is the next engine's work). Metrics are llama-server's: prompt and decode tok/s, TTFT, and the load metrics
of every engine.
"""

from __future__ import annotations

import numpy as np

from sim.config.scenario import Scenario
from sim.core.output import Table
from sim.llamacpp.report import serve_report_lines
from sim.llamacpp.setup import LlamaSetup, setup_llamacpp
from sim.serving.engine import ServeRun
from sim.serving.metrics import fsum, load_metrics, share
from sim.serving.queue import QueueSpec, SharedGpuServer, Work, run_queue
from sim.serving.served import ServedRequests
from sim.serving.telemetry import TABLE
from sim.serving.workload import RequestTable, build_table


def request_work(st: LlamaSetup, table: RequestTable, max_tokens: int | None) -> Work:
    """Every request's prompt and decode alone on the engine (s)."""
    out = table.output_tokens if max_tokens is None else np.minimum(table.output_tokens, max_tokens)
    e, s = st.engine, st.settings
    ubatch = min(s.ubatch_size, s.batch_size)
    n = len(table)
    prefill, first, decode, gpu, cpu, link = (np.zeros(n) for _ in range(6))
    memo: dict[tuple[int, int], float] = {}
    for i in range(n):
        prompt, cached, tokens = int(table.prompt_tokens[i]), int(table.cached_tokens[i]), int(out[i])
        key = (prompt - cached, cached)
        if key not in memo:
            memo[key] = st.prompt.prompt_s(prompt - cached, cached, ubatch)
        prefill[i] = memo[key]
        step = e.decode_step(1, prompt)
        first[i] = step.total_s if tokens else 0.0
        decode[i] = e.generate_s(tokens, prompt)
        mid = e.decode_step(1, prompt + max(tokens - 1, 0) / 2) if tokens else step
        gpu[i], cpu[i], link[i] = mid.gpu_s * tokens, mid.cpu_s * tokens, mid.link_s * tokens
    telemetry = {"decode_s": decode, "compute_s": gpu, "host_s": cpu, "stall_s": link}
    return Work(prefill, prefill + first, total_s=prefill + decode, output_tokens=out,
                capped=out < table.output_tokens, telemetry=telemetry)


def _served(table: RequestTable, work: Work, tl, shared: bool) -> ServedRequests:
    d = work.telemetry
    sums = {k: d[k] for k in ("decode_s", "compute_s", "host_s", "stall_s")}
    gpu = None
    if shared:  # slots taking turns: a request's decode lasts from its first token to its end in wall time
        gpu = d["decode_s"]
        sums["decode_s"] = tl.end_s - tl.first_token_s + (work.first_token_s - work.prefill_s)
    return ServedRequests.of_run(table, tl, output_tokens=work.output_tokens, prefill_s=work.prefill_s, sums=sums,
                                 decode_gpu_s=gpu)


class LlamaCppEngine:
    """The llama.cpp engine kind (:class:`sim.serving.engine.EngineKind`)."""

    name = "llamacpp"
    first_token_in_prefill = False  # the first decode step yields it

    def setup(self, scn: Scenario, machine: str) -> LlamaSetup:
        return setup_llamacpp(scn, machine)

    def serve(self, scn: Scenario, rng: np.random.Generator) -> ServeRun:
        assert scn.serve is not None
        sv = scn.serve
        st = setup_llamacpp(scn, sv.machine)
        table = build_table(sv, rng)
        work = request_work(st, table, sv.max_tokens)
        tl, _ = run_queue(table, work, QueueSpec.of(sv, st.settings.parallel), rng, SharedGpuServer)
        return ServeRun(st, _served(table, work, tl, st.settings.parallel > 1), tl)

    def replay(self, scn: Scenario, table: RequestTable, rng: np.random.Generator) -> ServeRun:
        assert scn.serve is not None
        st = setup_llamacpp(scn, scn.serve.machine)
        work = request_work(st, table, None)
        tl, _ = run_queue(table, work, QueueSpec(1, scn.serve.request_overhead_s), rng)
        return ServeRun(st, _served(table, work, tl, False), tl)

    def metrics(self, run: ServeRun) -> dict[str, float]:
        return llamacpp_metrics(run)

    def tables(self, run: ServeRun) -> dict[str, Table]:
        return {"requests": Table(TABLE, run.requests.table_rows())}

    def summary(self, run: ServeRun) -> dict:
        st: LlamaSetup = run.setup
        return {"devices": [{"device": m.device, "weights_gib": m.weights / 2**30, "kv_gib": m.kv / 2**30,
                             "compute_gib": m.compute / 2**30, "free_gib": None if m.free is None else m.free / 2**30}
                            for m in st.memory]}

    def report_lines(self, scn: Scenario, run: ServeRun, metrics: dict[str, float]) -> list[str]:
        return serve_report_lines(run.setup, metrics)


def llamacpp_metrics(run: ServeRun) -> dict[str, float]:
    """Load metrics, prompt and decode rates, where decode time goes, VRAM and RAM used."""
    st: LlamaSetup = run.setup
    reqs, tl = run.requests, run.timeline
    vram = tuple((m.device, m.total / 2**20, m.free / 2**20) for m in st.memory if m.free is not None)
    out = load_metrics(reqs, tl, vram)
    r = reqs.subset(reqs.served)
    out |= {"vram_used_gib": st.vram_gib(), "ram_used_gib": st.ram_gib(),
            "cpu_expert_layers": float(st.placement.cpu_expert_blocks())}
    if not len(r):
        return out
    c = r.columns
    tokens = int(c["output_tokens"].sum())
    wall = fsum(c["decode_s"]) or float("nan")
    gpu_time = fsum(c["decode_gpu_s"]) or float("nan")
    out |= {
        "decode_tok_s": tokens / wall,
        "decode_tok_s_median": float(np.median(r.decode_tok_s)),
        "gpu_share": share(fsum(c["compute_s"]), gpu_time),
        "cpu_share": share(fsum(c["host_s"]), gpu_time),
        "link_share": share(fsum(c["stall_s"]), gpu_time),
        "ttft_s_median": float(np.median(c["ttft_s"])),
        "requests": float(len(r)),
        "output_tokens": float(tokens),
    }
    return out
