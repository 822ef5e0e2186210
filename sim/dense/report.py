"""``sim run``'s text about a dense engine: its batch limits, VRAM and the KV pool, the iteration roofline, decode rates
and time per output token, running and queued sequences, KV use, preemptions, and the load."""

from __future__ import annotations

from sim.batching.report import admission_phrase, batch_lines, limits_line
from sim.config.scenario import Scenario
from sim.core.text import plural
from sim.dense.setup import DenseSetup
from sim.serving.engine import ServeRun
from sim.serving.report import load_lines


def report_lines(scn: Scenario, run: ServeRun, m: dict[str, float]) -> list[str]:
    """A dense model under continuous batching: its batch limits, VRAM and KV pool, the roofline, rates, running and
    queued sequences, KV use and preemptions. The parts of an iteration and the time per output token are in ms."""
    eng: DenseSetup = run.setup
    e, c = eng.spec, eng.cost
    card = scn.gpus[scn.machines[eng.machine].gpus[e.gpu].type]
    costs = eng.costs
    assert costs is not None
    out = ["", f"Serving {eng.model} (dense) on {eng.machine} ({e.gpu}), continuous batching with chunked prefill",
           limits_line(e),
           f"  VRAM {card.vram_gib:.2f} GiB{' per card' if eng.tensor_parallel > 1 else ''} = other tenants "
           f"{eng.tenants_gib:.2f} + weights {eng.weights_gib / eng.tensor_parallel:.2f} + "
           f"runtime {e.runtime_gib:.2f} + KV pool {eng.kv_pool_gib:.2f} GiB ({eng.kv_pool_tokens:,} tokens)",
           f"  iteration time: {c.overhead_s * 1e3:.2f} ms + the longer of reading the weights "
           f"({c.weights_s * 1e3:.2f} ms at {costs.memory_efficiency:.0%} of {card.hbm_gbps:,g} GB/s) and the KV,",
           f"    and computing ({c.token_s * 1e3:.3g} ms per token at {costs.compute_efficiency:.0%} of "
           f"{card.tflops:,g} TFLOP/s)"]
    out += cost_lines(eng)
    if "decode_tok_s" in m:
        n = int(m["requests"])
        out += [f"  {plural(n, 'request')} served, {m['output_tokens'] / n:,.0f} tokens"
                f"{' on average' if n > 1 else ''}: decode {m['decode_tok_s']:.1f} tok/s per sequence (median "
                f"request {m['decode_tok_s_median']:.1f})",
                f"  time per output token p50 {m.get('tpot_p50_s', 0) * 1e3:.1f} ms, "
                f"p99 {m.get('tpot_p99_s', 0) * 1e3:.1f} ms"]
    out += [f"  {plural(int(m['iterations']), 'iteration')}: {m['memory_bound_share']:.0%} bound by memory reads, "
            f"{m['prefill_iteration_share']:.0%} carrying prefill; mean batch {m['batch_mean']:.1f} sequences",
            *batch_lines(m)]
    return out + load_lines(scn, m, e.parallel, eng.vram, batch=admission_phrase(e))


def cost_lines(eng: DenseSetup) -> list[str]:
    """Where the iteration's costs came from when the scenario did not give them, the profiled operators and the
    tensor parallelism (empty for a scenario that gives every cost on one card: its text stays as it was)."""
    c = eng.cost
    out = [f"    {line}" for line in (eng.costs.sources if eng.costs is not None else ())]
    if c.linear_table is not None:
        t = c.linear_table
        out.append(f"    linear layers: profiled operators ({len(t.tokens)} token counts from {t.tokens[0]:g} to "
                   f"{t.tokens[-1]:g}, tensor parallel {t.tensor_parallel}): {c.linear_s(1) * 1e3:.2f} ms for one "
                   f"token, {c.linear_s(512) * 1e3:.2f} ms for 512 (from {t.source})")
    if eng.tensor_parallel > 1:
        out.append(f"    tensor parallel over {eng.tensor_parallel} cards: all-reduces "
                   f"{c.allreduce_fixed_s * 1e3:.2f} ms an iteration + {c.allreduce_token_s * 1e6:.2f} us per token")
    return out
