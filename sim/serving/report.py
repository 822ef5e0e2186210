"""``sim run``'s text about any engine as a server under load: its workload, admission, throughput, TTFT, queue and
VRAM per GPU."""

from __future__ import annotations

from sim.config.scenario import Scenario
from sim.serving.metrics import VramRows


def workload_text(scn: Scenario) -> str:
    sv = scn.serve
    assert sv is not None
    w = sv.workload
    lengths = f"{sv.output_tokens_mean:g} tokens mean (exponential)" if sv.output_tokens_mean is not None else \
        f"{sv.output_tokens_min}-{sv.output_tokens_max} tokens"
    if w.lengths is not None:
        cap = f", at most {w.lengths_max_tokens:,} tokens" if w.lengths_max_tokens is not None else ""
        lengths = f"lengths from {w.lengths}{cap}"
    if w.kind == "trace":
        return f"trace {w.trace} (first {sv.requests} rows, times x{w.time_scale:g})"
    if w.kind == "open":
        return f"open loop, {w.arrival_law} arrivals at {w.rate_per_s:g}/s, {sv.requests} requests of {lengths}"
    if w.kind == "agent":
        return (f"{w.clients} agent sessions of {w.turns} turns (+{w.turn_tokens} tokens a turn, earlier context "
                f"cached), {sv.requests} requests of {lengths}")
    clients = 1 if w.kind == "sequential" else w.clients
    runs = f" in {w.runs} runs" if w.runs > 1 else ""
    return (f"{clients} closed-loop client{'s' if clients > 1 else ''} (think {w.think_s:g} s), {sv.requests} "
            f"requests{runs} of {lengths}")


def load_lines(scn: Scenario, m: dict[str, float], sequences: int, vram: VramRows, each: str = "",
               paged: tuple[bool, ...] = ()) -> list[str]:
    """The server under load: workload, admission, throughput, TTFT, queue, VRAM per GPU. ``each``: what every
    decode slot has (its share of a cache); ``paged``: per GPU after the engine's own, whether the driver pages it."""
    sv = scn.serve
    assert sv is not None
    adm = sv.admission
    admission = "unbounded FIFO" if adm.queue_limit is None and adm.timeout_s is None else (
        f"queue limit {adm.queue_limit if adm.queue_limit is not None else 'none'}, timeout "
        f"{adm.timeout_s if adm.timeout_s is not None else 'none'} s")
    slots = f"{sequences} decode slot{'s' if sequences > 1 else ''}" + (f" ({each})" if each else "")
    out = [f"  load: {workload_text(scn)}; {slots}, {admission}",
           f"  {int(m['requests_completed'])} completed, {int(m['requests_rejected'])} rejected, "
           f"{int(m['requests_cancelled'])} cancelled in {m['makespan_s']:.1f} s: throughput "
           f"{m.get('throughput_tok_s', float('nan')):.1f} tok/s, prefill {m.get('prefill_tok_s', float('nan')):.0f} "
           "tok/s"]
    if "ttft_mean_s" in m:
        out.append(f"  TTFT mean {m['ttft_mean_s']:.2f} s, p50 {m['ttft_p50_s']:.2f} s, p99 {m['ttft_p99_s']:.2f} s; "
                   f"queue wait mean {m['queue_wait_mean_s']:.2f} s (peak queue {int(m['queue_peak'])}); GPU active "
                   f"{m['gpu_active_share']:.0%} of the run")
    if "requests_in_engine_mean" in m:
        out.append(f"  Little's law: {m['requests_in_engine_mean']:.3f} requests in the engine on average = arrival "
                   f"rate x mean time in it {m['little_lambda_w']:.3f}")
    rows = [f"{name} {m[f'vram.{name}.used_mib']:,.0f} MiB used, {m[f'vram.{name}.free_mib']:,.0f} free"
            + (" (PAGED)" if 0 < i <= len(paged) and paged[i - 1] else "") for i, (name, _, _) in enumerate(vram)]
    out.append("  VRAM: " + "; ".join(rows))
    return out
