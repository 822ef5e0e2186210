"""``sim run``'s text about a llama.cpp engine: where every tensor went, what each device holds, the llama-bench
table, and the served workload's rates."""

from __future__ import annotations

from collections.abc import Sequence

from sim.core.units import GIB
from sim.llamacpp.fit import merged_rules
from sim.llamacpp.placement import CPU
from sim.llamacpp.setup import LlamaSetup


def placement_lines(st: LlamaSetup) -> list[str]:
    """The placement in llama.cpp's terms and every device's allocations."""
    pl, s = st.placement, st.settings
    blocks = pl.model.blocks
    on_gpu = sum(1 for d in pl.block_device if d != CPU) + (1 if pl.output_device != CPU else 0)
    flags = [f"-ngl {s.n_gpu_layers}"] + ([f"--n-cpu-moe {s.n_cpu_moe}"] if s.n_cpu_moe else []) + \
        (["--cpu-moe"] if s.cpu_moe else []) + [f"-ot {r}" for r in merged_rules(s.override_tensor)]
    lines = [f"  {s.build} {' '.join(flags)} -c {s.ctx_size} -ub {s.ubatch_size} -t {st.threads}: "
             f"offloaded {on_gpu}/{blocks + 1} layers to GPU, routed experts of {pl.cpu_expert_blocks()} of "
             f"{pl.model.geometry.moe_layers} MoE layers on the CPU"]
    lines += [f"    {m.summary()}" for m in st.memory]
    lines += [f"    note: {n}" for n in st.notes]
    return lines


def bench_table(rows: Sequence, model: str, size_gib: float) -> list[str]:
    """The tests as llama-bench prints them (one row per test, rates in tok/s)."""
    head = f"| {'model':<14} | {'size':>10} | {'test':>14} | {'t/s':>10} | {'VRAM GiB':>8} | {'RAM GiB':>8} |"
    out = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        rate = f"{r.tok_s:10.2f}" if not r.error else f"{'n/a':>10}"
        vram = f"{r.vram_gib:8.2f}" if not r.error else f"{'':>8}"
        ram = f"{r.ram_gib:8.2f}" if not r.error else f"{'':>8}"
        out.append(f"| {model[:14]:<14} | {size_gib:6.2f} GiB | {r.test:>14} | {rate} | {vram} | {ram} |")
        if r.error:
            out.append(f"  {r.test}: {r.error}")
    return out


def serve_report_lines(st: LlamaSetup, metrics: dict[str, float]) -> list[str]:
    lines = ["engine: llama.cpp"] + placement_lines(st)
    if "decode_tok_s" in metrics:
        m = metrics
        lines.append(f"  served {m['requests']:.0f} requests: prompt {m.get('prefill_tok_s', float('nan')):.1f} "
                     f"tok/s, decode {m['decode_tok_s']:.1f} tok/s, TTFT median {m['ttft_s_median']:.3f} s; "
                     f"decode time on the GPUs {m['gpu_share']:.0%}, on the CPU {m['cpu_share']:.0%}")
    return lines


def model_size_gib(st: LlamaSetup) -> float:
    return sum(t.bytes for t in st.tensors.tensors) / GIB
