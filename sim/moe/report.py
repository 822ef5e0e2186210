"""``sim run``'s text about an MoE engine: VRAM arithmetic, the expert cache, decode rate, hit rate and spill, where
decode time goes, tiers below VRAM, energy, the load, and decode by request spill share and hit rate."""

from __future__ import annotations

from sim.config.links import link_info
from sim.config.scenario import Scenario
from sim.moe.setup import EngineSetup
from sim.serving.engine import ServeRun
from sim.serving.report import load_lines


def report_lines(scn: Scenario, run: ServeRun, m: dict[str, float], buckets: list[dict]) -> list[str]:
    eng: EngineSetup = run.setup
    assert scn.serve is not None
    sv, moe, p, e = scn.serve, eng.moe, eng.params, eng.spec
    li = link_info(scn, scn.machines[eng.machine], e.gpu)
    out = ["", f"Serving {e.model} on {eng.machine} ({e.gpu}, "
           f"Gen{li.gen} x{li.lanes} {li.gbps:.1f} GB/s{' measured' if li.measured else ''}), "
           f"policy {e.policy}, {sv.fidelity} fidelity",
           f"  VRAM {eng.vram_gib:.2f} GiB = other tenants {eng.tenants_gib:.2f} + engine overhead "
           f"{eng.overhead_gib:.2f} + free {eng.free_gib:.2f} GiB at start",
           f"  expert cache {eng.expert_slots} of {moe.layers * moe.experts_per_layer} slots ({eng.cache_gib:.2f} GiB, "
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
    if eng.peers or eng.host_experts is not None:
        reqs = run.requests
        lookups = int(reqs.lookups.sum()) or 1
        parts = [f"peer {name} {n} experts" for name, n in zip(e.peers, eng.peer_slots, strict=True)]
        if eng.host_experts is not None:
            parts.append(f"host RAM {eng.host_experts} experts, the rest on disk")
        peer = int(reqs.peer_lookups.sum()) / lookups
        disk = int(reqs.disk_lookups.sum()) / lookups
        out.append(f"  tiers below VRAM: {', '.join(parts)}; lookups served by peers {peer:.1%}, from disk {disk:.2%}")
    if "energy_j_per_token" in m:
        out.append(f"  energy {m['energy_j_per_token']:.2f} J/token at {m['gpu_power_w']:.0f} W average")
    out.append(f"  link: {p.link_share:.0%} of {p.link_gbps:.1f} GB/s for expert reads; CPU computes up to one missed "
               f"expert per {p.cpu_expert_s * 1e6:.0f} us of GPU work per layer")
    out += load_lines(scn, m, sequences=e.parallel, vram=eng.vram, each=f"{eng.slots_per_sequence} experts each",
                      paged=eng.peer_paged)
    out.append("  decode tok/s by request spill share and hit rate (percent):")
    for b in buckets:
        if b["requests"]:
            hi = "" if b["high_pct"] is None else f"{b['high_pct']:g}"
            span = "0 (none)" if b["low_pct"] == 0 and b["high_pct"] == 0 else f"{b['low_pct']:g}-{hi}"
            out.append(f"    {b['bucket_by']:<11}{span:>10}: {b['decode_tok_s']:7.1f} tok/s over {b['requests']} "
                       "requests")
    return out
