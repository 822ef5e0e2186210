"""Human-readable text for ``sim run`` and ``sim breakeven``."""

from __future__ import annotations

import math

from sim.lab.hardware import link_info
from sim.runner import RunResult


def _num(x: float, fmt: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def run_text(res: RunResult) -> str:
    scn = res.scenario
    out = [f"scenario {scn.name} (seed {res.seed})", ""]
    if res.probes:
        p0 = res.probes[0]
        out.append(f"Load of {p0.model} ({p0.gb:.2f} GB), {scn.loading.composition} stages, "
                   f"{scn.loading.chunk_mib:g} MiB chunks")
        out.append(f"  {'machine':<14}{'link (GB/s)':<22}{'cold':>7}{'hot':>7}{'link':>7} GB/s"
                   f"{'disk':>8}{'other':>7} s/GB   cold s = disk + loader + link")
        for p in res.probes:
            m = scn.machines[p.machine]
            if m.kind == "unified":
                link = "unified memory"
            else:
                groups: dict[str, int] = {}
                for g in m.gpus:
                    li = link_info(scn, m, g)
                    key = f"Gen{li.gen} x{li.lanes} {li.gbps:.2f}"
                    groups[key] = groups.get(key, 0) + 1
                link = " + ".join(f"{n}x {k}" if n > 1 else k for k, n in groups.items())
            c = p.cold
            out.append(f"  {p.machine:<14}{link:<22}{p.cold.gbps:>7.2f}{p.hot.gbps:>7.2f}"
                       f"{_num(p.link.link_gbps if p.link else None):>7}     "
                       f"{p.disk_s_per_gb:>8.3f}{p.other_s_per_gb:>7.3f}"
                       f"      {c.wall_s:>6.2f} = {c.disk_s:.2f} + {c.loader_s:.2f} + {c.link_s:.2f}")
            if not p.fits:
                spilled = p.cold.spilled_bytes / 2**30
                out.append(f"    ! {p.model} does not fit: {spilled:.1f} GiB would stay in host RAM")
            if m.note:
                out.append(f"    note: {m.note}")
        out.append("")
    if res.jobs:
        d = scn.dispatch
        tb = d.tie_break.rule + (f" {list(d.tie_break.order)}" if d.tie_break.rule == "prefer" else "")
        out.append(f"Jobs (isolation {d.isolation}, tie threshold {d.tie_threshold:.0%}, tie-break {tb})")
        for j in res.jobs:
            out.append(f"  {j.id}: {j.tokens} tokens of {j.model}, arrives at {j.arrival_s:g} s")
            for e in j.estimates:
                if e.eligible:
                    out.append(f"    {e.machine:<14}{e.total_s:>9.1f} s = wait {e.wait_s:.1f} + load {e.load_s:.1f}"
                               f" + decode {e.decode_s:.1f} ({e.decode_tok_s:g} tok/s)")
                else:
                    out.append(f"    {e.machine:<14}{'n/a':>9}   {e.why_not}")
            out.append(f"    -> {j.machine or 'nowhere'}: {j.decision.reason}")
            if j.machine:
                out.append(f"       simulated: done at {j.completed_s:.1f} s "
                           f"(predicted {j.predicted_completion_s:.1f} s);"
                           f" waited {j.wait_s:.1f} s, loaded {j.load_s:.1f} s, decoded {j.decode_s:.1f} s"
                           + (f", SPILLED {j.spilled_gib:.1f} GiB to host RAM" if j.spilled_gib > 0 else ""))
    if res.engine is not None:
        lines = serve_lines(res) if hasattr(res.engine, "slots") else dense_serve_lines(res)
        out += lines[0 if out[-1] else 1:]
    return "\n".join(out) + "\n"


def dense_serve_lines(res: RunResult) -> list[str]:
    """A dense model under continuous batching: VRAM and KV pool, the roofline, rates, batch and KV use."""
    eng, m, scn = res.engine, res.serve_metrics, res.scenario
    e, c = eng.engine, eng.cost
    card = scn.gpus[scn.machines[eng.machine].gpus[e.gpu].type]
    it = e.iteration
    out = ["", f"Serving {eng.model} (dense) on {eng.machine} ({e.gpu}): continuous batching of up to {e.parallel} "
           f"sequences, {eng.token_budget} tokens per iteration (chunked prefill)",
           f"  VRAM {card.vram_gib:.2f} GiB = other tenants {eng.tenants_gib:.2f} + weights {eng.weights_gib:.2f} + "
           f"runtime {e.runtime_gib:.2f} + KV pool {eng.kv_pool_gib:.2f} GiB ({eng.kv_pool_tokens:,} tokens)",
           f"  an iteration: {c.overhead_s * 1e3:.2f} ms + the longer of reading the weights "
           f"({c.weights_s * 1e3:.2f} ms at {it.memory_efficiency:.0%} of {card.hbm_gbps:g} GB/s) and the KV, and "
           f"computing ({c.token_s * 1e6:.1f} us per token at {it.compute_efficiency:.0%} of {card.tflops:g} TFLOP/s)"]
    if "decode_tok_s" in m:
        out.append(f"  {int(m['requests'])} requests served, {m['output_tokens'] / m['requests']:.0f} tokens on "
                   f"average: decode {m['decode_tok_s']:.1f} tok/s per sequence (median request "
                   f"{m['decode_tok_s_median']:.1f}), time per output token p50 {m.get('tpot_p50_s', 0) * 1e3:.1f} "
                   f"ms, p99 {m.get('tpot_p99_s', 0) * 1e3:.1f} ms")
    out.append(f"  {int(m['iterations']):,} iterations, {m['memory_bound_share']:.0%} bound by memory reads, "
               f"{m['prefill_iteration_share']:.0%} carrying prefill; mean batch {m['batch_mean']:.1f} sequences; "
               f"KV use mean {m['kv_mean_share']:.1%}, peak {m['kv_peak_share']:.1%} of the pool; "
               f"{int(m['kv_preemptions'])} preemptions")
    out += load_lines(res)
    return out


def serve_lines(res: RunResult) -> list[str]:
    eng, m, scn = res.engine, res.serve_metrics, res.scenario
    assert eng is not None and scn.serve is not None
    sv, moe, p = scn.serve, eng.moe, eng.params
    li = link_info(scn, scn.machines[eng.machine], eng.engine.gpu)
    out = ["", f"Serving {eng.engine.model} on {eng.machine} ({eng.engine.gpu}, "
           f"Gen{li.gen} x{li.lanes} {li.gbps:.1f} GB/s{' measured' if li.measured else ''}), "
           f"policy {eng.engine.policy}, {sv.fidelity} fidelity",
           f"  VRAM {eng.vram_gib:.2f} GiB = other tenants {eng.tenants_gib:.2f} + engine overhead "
           f"{eng.overhead_gib:.2f} + free {eng.free_gib:.2f} GiB at start",
           f"  expert cache {eng.slots} of {moe.layers * moe.experts_per_layer} slots ({eng.cache_gib:.2f} GiB, "
           f"coverage {eng.coverage:.1%}); {moe.top_k * moe.layers} lookups per token, "
           f"{moe.draft.tokens} drafts at {moe.draft.acceptance:.1%} acceptance",
           f"  {int(m['requests'])} requests served, {m['output_tokens'] / m['requests']:.0f} tokens on average: "
           f"decode {m['decode_tok_s']:.1f} tok/s (token-weighted; median request {m['decode_tok_s_median']:.1f}), "
           f"TTFT median {m['ttft_s_median'] * 1000:.0f} ms",
           f"  hit rate {m['expert_hit_rate']:.1%} and PCIe spill {m['pcie_spill_share']:.2%} of routed experts "
           f"(medians over requests); requests that ever read over PCIe: {m['requests_spilling_share']:.0%}",
           f"  where decode time goes: compute {m['compute_share']:.0%}, stalled on PCIe or peers "
           f"{m['stall_share']:.0%}, eager steps {m['eager_share']:.0%}, host {m['host_share']:.0%}; GPU busy as the "
           f"driver reports it {m['gpu_busy_share']:.0%}"]
    if eng.peers or eng.host_slots is not None:
        reqs = res.requests
        lookups = int(reqs.lookups.sum()) or 1
        parts = [f"peer {name} {n} experts" for name, n in zip(eng.engine.peers, eng.peer_slots, strict=True)]
        if eng.host_slots is not None:
            parts.append(f"host RAM {eng.host_slots} experts, the rest on disk")
        peer = int(reqs.peer_lookups.sum()) / lookups
        disk = int(reqs.disk_lookups.sum()) / lookups
        out.append(f"  tiers below VRAM: {', '.join(parts)}; lookups served by peers {peer:.1%}, from disk {disk:.2%}")
    if "energy_j_per_token" in m:
        out.append(f"  energy {m['energy_j_per_token']:.2f} J/token at {m['gpu_power_w']:.0f} W average")
    out.append(f"  link: {p.link_share:.0%} of {p.link_gbps:.1f} GB/s for expert reads; CPU computes up to one missed "
               f"expert per {p.cpu_expert_s * 1e6:.0f} us of GPU work per layer")
    out += load_lines(res)
    out.append("  decode tok/s by request spill share and hit rate (percent):")
    for b in res.buckets:
        if b["requests"]:
            hi = "" if b["high_pct"] is None else f"{b['high_pct']:g}"
            span = "0 (none)" if b["low_pct"] == 0 and b["high_pct"] == 0 else f"{b['low_pct']:g}-{hi}"
            out.append(f"    {b['bucket_by']:<11}{span:>10}: {b['decode_tok_s']:7.1f} tok/s over {b['requests']} "
                       "requests")
    return out


def workload_text(scn) -> str:
    sv = scn.serve
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


def load_lines(res: RunResult) -> list[str]:
    """The server under load: workload, admission, throughput, TTFT, queue, VRAM per GPU."""
    eng, m, scn = res.engine, res.serve_metrics, res.scenario
    sv = scn.serve
    adm = sv.admission
    admission = "unbounded FIFO" if adm.queue_limit is None and adm.timeout_s is None else (
        f"queue limit {adm.queue_limit if adm.queue_limit is not None else 'none'}, timeout "
        f"{adm.timeout_s if adm.timeout_s is not None else 'none'} s")
    slots = f"{eng.engine.parallel} decode slot{'s' if eng.engine.parallel > 1 else ''}" + (
        f" ({eng.slot_slots} experts each)" if hasattr(eng, "slot_slots") else "")
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
    vram = [f"{name} {m[f'vram.{name}.used_mib']:,.0f} MiB used, {m[f'vram.{name}.free_mib']:,.0f} free"
            + (" (PAGED)" if 0 < i <= len(getattr(eng, "peer_paged", ())) and eng.peer_paged[i - 1] else "")
            for i, (name, _, _) in enumerate(eng.vram)]
    out.append("  VRAM: " + "; ".join(vram))
    return out


def _tok(x: float | None) -> str:
    return "never" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def _region(r: list[float] | None) -> str:
    if r is None:
        return "never"
    lo, hi = r
    if math.isinf(hi):
        return "always" if lo == 0 else f"from {lo:,.0f}"
    return f"below {hi:,.0f}" if lo == 0 else f"{lo:,.0f} to {hi:,.0f}"


def breakeven_text(r: dict) -> str:
    a, b, cf = r["a"], r["b"], r["closed_form"]
    lines = [f"break-even of {r['model']}: {a} vs {b} (seed {r['seed']}, {r['evaluations']} simulated jobs)"]
    for m in (a, b):
        spill = r["spilled_gib"][m]
        note = f" ({spill:.1f} GiB spilled to host RAM, streamed every token)" if spill > 0 else ""
        lines.append(f"  {m}: decodes {r['decode_tok_s'][m]:.4g} tok/s{note}, loads in {r['load_s'][m]:.2f} s")
    lines += ["", f"  {'tokens':<46}{'simulated':>16}{'closed form':>18}",
              f"  {'break-even (load counted, no tie rule)':<46}{_tok(r['breakeven_tokens']):>16}"
              f"{_tok(cf['breakeven_tokens']):>18}"]
    for m in (a, b):
        lines.append(f"  {m + ' wins clearly (tie rule ' + format(r['tie_threshold'], '.0%') + ')':<46}"
                     f"{_region(r['clear_win'][m]):>16}{_region(cf['clear_win'][m]):>18}")
    lines.append("")
    short, long = r["wins_short_jobs"], r["wins_long_jobs"]
    if math.isfinite(r["breakeven_tokens"]) and r["breakeven_tokens"] > 1:
        lines.append(f"  Jobs shorter than {_tok(r['breakeven_tokens'])} tokens finish sooner on {short}, longer ones "
                     f"on {long}; where neither wins clearly the estimates tie and the tie-break decides.")
    else:
        lines.append(f"  {long} finishes sooner at every job length: the two never break even.")
    if not r["closed_form_agrees"]:
        lines.append("  ! simulation and closed form disagree by more than one token: the simulation includes what the "
                     "closed form leaves out (decode jitter, page-cache state)")
    u = r.get("uncertainty")
    if u:
        lines += ["", f"  over {u['draws']} draws of {', '.join(u['parameters'])}:"]
        for key, label in (("breakeven_tokens", "break-even"),
                           ("clear_win_tokens", f"{u['clear_win_machine']} wins clearly from")):
            q = u[key]
            never = f"; never in {q['never_share']:.0%} of draws" if q["never_share"] > 0 else ""
            lines.append(f"    {label}: {_tok(q['median'])} tokens (90% interval {_tok(q['p5'])} to "
                         f"{_tok(q['p95'])}){never}")
        lines.append("    faster decoder: " + ", ".join(f"{m} in {share:.0%} of draws"
                                                       for m, share in u["faster_decoder_share"].items()))
    return "\n".join(lines) + "\n"
