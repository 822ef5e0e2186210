"""``sim run``'s text about an MoE engine: VRAM arithmetic, the expert cache, decode rate, hit rate and spill, where
decode time goes, tiers below VRAM, energy, the load, and decode by request spill share and hit rate. Batching, its
batch limits, running and queued sequences and KV pool (:mod:`sim.batching.report`), and what a request waits for in
a batch's words; taking turns, its decode slots."""

from __future__ import annotations

from sim.batching.report import admission_phrase, batch_lines, limits_line
from sim.config.links import link_info
from sim.config.scenario import Scenario
from sim.core.text import plural, table
from sim.moe.setup import EngineSetup
from sim.serving.engine import ServeRun
from sim.serving.report import load_lines


def report_lines(scn: Scenario, run: ServeRun, m: dict[str, float], buckets: list[dict]) -> list[str]:
    """The engine's set-up, its decode telemetry, the server under load and the spill buckets, as lines."""
    eng: EngineSetup = run.setup
    assert scn.serve is not None
    sv, moe, p, e = scn.serve, eng.moe, eng.params, eng.spec
    li = link_info(scn, scn.machines[eng.machine], e.gpu)
    draft = moe.draft
    drafts = f"{plural(draft.tokens, 'draft')} at {draft.acceptance:.1%} acceptance" if draft.tokens > 0 else \
        "no speculative decoding"
    out = ["", f"Serving {e.model} on {eng.machine} ({e.gpu}, "
           f"{li.label} {li.gbps:.1f} GB/s{' measured' if li.measured else ''}), "
           f"policy {e.policy}, {sv.fidelity} fidelity",
           f"  VRAM {eng.vram_gib:.2f} GiB = other tenants {eng.tenants_gib:.2f} + engine overhead "
           f"{eng.overhead_gib:.2f} + free {eng.free_gib:.2f} GiB at start",
           f"  expert cache {eng.expert_slots:,} of {moe.layers * moe.experts_per_layer:,} slots "
           f"({eng.cache_gib:.2f} GiB, coverage {eng.coverage:.1%}); {moe.top_k * moe.layers:,} lookups per token, "
           f"{drafts}"]
    if e.batching:
        out.append(limits_line(e))
    if m.get("requests"):
        n = int(m["requests"])
        out += [f"  {plural(n, 'request')} served, {m['output_tokens'] / n:,.0f} tokens"
                f"{' on average' if n > 1 else ''}: decode {m['decode_tok_s']:.1f} tok/s (token-weighted; "
                f"median request {m['decode_tok_s_median']:.1f})",
                f"  hit rate {m['expert_hit_rate']:.1%} and PCIe spill {m['pcie_spill_share']:.2%} of routed experts "
                f"(medians over requests); requests that ever read over PCIe: {m['requests_spilling_share']:.0%}",
                f"  where decode time goes: compute {m['compute_share']:.0%}, stalled on the CPU, PCIe or peers "
                f"{m['stall_share']:.0%}, eager steps {m['eager_share']:.0%}, host {m['host_share']:.0%}",
                f"  GPU busy as the driver reports it {m['gpu_busy_share']:.0%}"
                + (f"; energy {m['energy_j_per_token']:.2f} J/token at {m['gpu_power_w']:.0f} W average"
                   if "energy_j_per_token" in m else "")]
    else:
        out.append("  no request served")
    if e.batching:
        out += batch_lines(m)
    elif "kv_pool_tokens" in m:  # slots under the pool of the engine's log (sim.batching.admission)
        out.append(f"  KV pool {m['kv_pool_gib']:.2f} GiB ({m['kv_pool_tokens']:,.0f} tokens, the engine's log): a "
                   f"request takes a slot while the pool holds its whole sequence (booked at most "
                   f"{m['kv_booked_peak_share']:.1%}); running mean {m['running_mean']:.1f}, peak "
                   f"{m['running_peak']:,.0f}; queued mean {m['queued_mean']:.1f}, peak {m['queued_peak']:,.0f}")
    if eng.peers or eng.host_experts is not None:
        reqs = run.requests
        lookups = int(reqs.lookups.sum()) or 1
        parts = [f"peer {name} {plural(n, 'expert')}" for name, n in zip(e.peers, eng.peer_slots, strict=True)]
        if eng.host_experts is not None:
            parts.append(f"host RAM {plural(eng.host_experts, 'expert')}, the rest on disk")
        peer = int(reqs.peer_lookups.sum()) / lookups
        disk = int(reqs.disk_lookups.sum()) / lookups
        out.append(f"  tiers below VRAM: {', '.join(parts)}; lookups served by peers {peer:.1%}, from disk {disk:.2%}")
    cpu = f"{p.cpu_expert_s * 1e6:.1f} us per missed expert on the CPU (+ {p.cpu_sync_s * 1e6:.0f} us per layer)" \
        if p.cpu_expert_s != float("inf") else "no CPU tier (missed experts all cross PCIe)"
    out.append(f"  step costs: dense {p.dense_s * 1e3:.2f} ms per step, {p.gpu_expert_s * 1e6:.2f} us per resident "
               f"expert, {cpu}; link: {p.link_share:.0%} of {p.link_gbps:.1f} GB/s for expert reads")
    out += default_lines(scn, eng)
    out += load_lines(scn, m, sequences=e.parallel, vram=eng.vram, each=plural(eng.slots_per_sequence, "expert"),
                      paged=eng.peer_paged, batch=admission_phrase(e) if e.batching else None)
    return out + bucket_lines(buckets)


def _span(b: dict) -> str:
    """A bucket's range of percent: ``0 (none)``, ``above 0, under 0.5``, ``0.5-3``, ``5 and over``."""
    lo, hi = b["low_pct"], b["high_pct"]
    if lo == 0 and hi == 0:
        return "0 (none)"
    if hi is None:
        return f"{lo:g} and over"
    if lo == 0:
        return f"above 0, under {hi:g}" if b["bucket_by"] == "pcie_spill" else f"under {hi:g}"
    return f"{lo:g}-{hi:g}"


def bucket_lines(buckets: list[dict]) -> list[str]:
    """The non-empty rows of ``spill_buckets.csv`` as a table: bucket, range (percent), requests, mean decode
    tok/s."""
    rows = [[b["bucket_by"], _span(b), f"{b['requests']:,}", f"{b['decode_tok_s']:.1f}"]
            for b in buckets if b["requests"]]
    if not rows:
        return []
    return ["  decode by request PCIe spill share and hit rate (spill_buckets.csv):",
            *table(rows, [["bucket_by", "range", "requests", "decode"], ["", "%", "", "tok/s"]], "llrr", indent=4)]


def default_lines(scn: Scenario, eng: EngineSetup) -> list[str]:
    """Which values came from the package, not the scenario or its calibrations: catalog hardware, a model file's
    geometry, step-cost defaults (each with its source), and what the step costs derive from the specs."""
    out: list[str] = []
    filled = scn._defaults
    if filled:
        groups: dict[str, list[str]] = {}
        used_types = {g.type for m in scn.machines.values() for g in m.gpus.values()}
        for path in filled:
            head, _, key = path.rpartition(".")
            used = not head.startswith("gpus.") or head.removeprefix("gpus.") in used_types
            if used and key not in ("name", "source", "note", "vendor", "memory", "dram"):  # numbers, not labels
                groups.setdefault(head, []).append(key)
        for head, keys in groups.items():
            origin = "model file" if head.startswith("models.") else "catalog"
            out.append(f"  {origin} defaults: {head}: {', '.join(keys)}")
    if eng.specs is not None:
        defaults = [f"{s.name} {s.value:.4g} {s.unit}" for s in eng.specs.sources if s.how.startswith("default")]
        if defaults:
            out.append(f"  package defaults (sim.moe.spec_costs.DEFAULTS): {', '.join(defaults)}")
        derived = [f"{s.name} {s.value:.4g} {s.unit} ({s.how.removeprefix('derived: ')})" for s in eng.specs.sources
                   if s.how.startswith("derived")]
        out += [f"  from specs: {d}" for d in derived]
    return out
