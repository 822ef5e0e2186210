"""``sim run``'s text about a dense engine: VRAM and the KV pool, the iteration roofline, decode rates and time per
output token, batch and KV use, preemptions, and the load."""

from __future__ import annotations

from sim.config.scenario import Scenario
from sim.dense.setup import DenseSetup
from sim.serving.engine import ServeRun
from sim.serving.report import load_lines


def report_lines(scn: Scenario, run: ServeRun, m: dict[str, float]) -> list[str]:
    """A dense model under continuous batching: VRAM and KV pool, the roofline, rates, batch and KV use."""
    eng: DenseSetup = run.setup
    e, c = eng.spec, eng.cost
    card = scn.gpus[scn.machines[eng.machine].gpus[e.gpu].type]
    it = e.iteration
    assert it is not None
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
    return out + load_lines(scn, m, e.parallel, eng.vram)
