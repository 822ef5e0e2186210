"""``sim run``'s text about any engine as a server under load: its workload, admission, throughput, TTFT, queue and
VRAM per GPU (GiB, as every VRAM figure of the run's text)."""

from __future__ import annotations

from sim.config.scenario import Scenario
from sim.core.text import fmt_time, plural, time_unit
from sim.core.units import GIB, MIB
from sim.serving.metrics import VramRows


def workload_text(scn: Scenario) -> str:
    """The served workload in one phrase: who sends how many requests of which lengths."""
    sv = scn.serve
    assert sv is not None
    w = sv.workload
    lengths = f"{sv.output_tokens_mean:g} tokens mean (exponential)" if sv.output_tokens_mean is not None else \
        f"{sv.output_tokens_min}-{sv.output_tokens_max} tokens"
    if w.lengths is not None:
        cap = f", at most {w.lengths_max_tokens:,} tokens" if w.lengths_max_tokens is not None else ""
        lengths = f"lengths from {w.lengths}{cap}"
    requests = plural(sv.requests, "request")
    shared = ""
    if w.system_prompt_tokens:
        shared = (f", after a shared system prompt of {w.system_prompt_tokens:,} tokens"
                  + (f" (one of {w.system_prompts:,})" if w.system_prompts > 1 else ""))
    return _workload(sv, w, lengths, requests) + shared


def _workload(sv, w, lengths: str, requests: str) -> str:
    if w.kind == "trace":
        return f"trace {w.trace} (first {plural(sv.requests, 'row')}, times x{w.time_scale:g})"
    if w.kind == "open":
        return f"open loop, {w.arrival_law} arrivals at {w.rate_per_s:g}/s, {requests} of {lengths}"
    if w.kind == "agent":
        return (f"{plural(w.clients, 'agent session')} of {plural(w.turns, 'turn')} (+{w.turn_tokens:,} tokens a "
                f"turn, earlier context cached), {requests} of {lengths}")
    ramp = f", started over a {w.ramp_s:g} s ramp" if w.ramp_s > 0 and w.kind != "sequential" else ""
    if w.kind == "chat":
        return (f"{plural(w.clients, 'chat client')} (think {w.think_s:g} s{ramp}) in sessions of "
                f"{plural(w.turns, 'turn')}, each turn resending the conversation so far, {requests} of {lengths}")
    clients = 1 if w.kind == "sequential" else w.clients
    runs = f" in {plural(w.runs, 'run')}" if w.runs > 1 else ""
    return f"{plural(clients, 'closed-loop client')} (think {w.think_s:g} s{ramp}), {requests}{runs} of {lengths}"


def load_lines(scn: Scenario, m: dict[str, float], sequences: int, vram: VramRows, each: str = "",
               paged: tuple[bool, ...] = (), batch: str | None = None) -> list[str]:
    """The server under load: workload, admission, throughput, TTFT, queue, VRAM per GPU. ``sequences`` decode
    slots, each with ``each`` (its share of a cache, e.g. ``"5,785 experts"``), or for a batching engine ``batch``:
    what a request waits for to join the batch (its limits are the engine's own lines, not slots); ``paged``: per
    GPU after the engine's own, whether the driver pages it."""
    sv = scn.serve
    assert sv is not None
    adm = sv.admission
    admission = "unbounded FIFO queue" if adm.queue_limit is None and adm.timeout_s is None else (
        f"queue limit {adm.queue_limit if adm.queue_limit is not None else 'none'}, timeout "
        + (f"{adm.timeout_s:g} s" if adm.timeout_s is not None else "none"))
    slots = batch if batch is not None else \
        plural(sequences, "decode slot") + (f" ({each}{' each' if sequences > 1 else ''})" if each else "")
    out = [f"  workload: {workload_text(scn)}",
           f"  admission: {slots}, {admission}",
           f"  {plural(int(m['requests_completed']), 'request')} completed, {int(m['requests_rejected']):,} rejected, "
           f"{int(m['requests_cancelled']):,} cancelled in {m['makespan_s']:,.1f} s: throughput "
           f"{m.get('throughput_tok_s', float('nan')):,.1f} tok/s, prefill "
           f"{m.get('prefill_tok_s', float('nan')):,.0f} tok/s"]
    if "ttft_mean_s" in m:
        f, unit = time_unit(m["ttft_mean_s"], m["ttft_p50_s"], m["ttft_p99_s"], m["queue_wait_mean_s"])
        out.append(f"  TTFT mean {fmt_time(m['ttft_mean_s'], f, unit)}, p50 {fmt_time(m['ttft_p50_s'], f, unit)}, "
                   f"p99 {fmt_time(m['ttft_p99_s'], f, unit)}; queue wait mean "
                   f"{fmt_time(m['queue_wait_mean_s'], f, unit)} (peak queue {int(m['queue_peak']):,}); "
                   f"GPU active {m['gpu_active_share']:.0%} of the run")
    if "requests_in_engine_mean" in m:
        out.append(f"  Little's law: {m['requests_in_engine_mean']:.3f} requests in the engine on average = arrival "
                   f"rate x mean time in it {m['little_lambda_w']:.3f}")
    gib = MIB / GIB
    rows = [f"{name} {m[f'vram.{name}.used_mib'] * gib:.2f} used, {m[f'vram.{name}.free_mib'] * gib:.2f} free"
            + (" (PAGED)" if 0 < i <= len(paged) and paged[i - 1] else "") for i, (name, _, _) in enumerate(vram)]
    out.append("  VRAM per GPU (GiB): " + "; ".join(rows))
    return out
