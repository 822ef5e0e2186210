"""A dense batching engine's iteration costs that specs do not determine, by GPU family and by engine.

The two efficiencies (the share of a card's memory bandwidth its reads get, of its tensor throughput its arithmetic
gets) are fitted per family to real kernel timings: the linear operators of transformer blocks that Vidur's authors
profiled on A100, A40 and H100 GPUs (``calibration/vidur_*/``), against the catalog's datasheet figures, by
``python benchmarks/fit_kernel_families.py``, which also judges them leave-one-source-out (a source: one card and
model; held out, the A100's two profiles are predicted within a median 3.4% and 4.2%, the A40's within 9.7%). A
family without a profile takes the nearest fitted one's, and the run's text says so.

Decode attention is a kernel of its own: its KV reads stream at their own efficiency, after a fixed ramp per call
(launch, the first wave's memory latency, the split-KV reduction). Both are fitted to FlashAttention-2's paged decode
kernel timed on an A30 (the A100's GA100 die; ``calibration/attention_kernels/``,
``python benchmarks/fit_attention_kernels.py``: median error 4.8% over the batched rows) and carried to the Ampere
family; a family without such timings reads its KV at its memory efficiency with no ramp (said so).

The overhead per iteration (scheduling, sampling, launches) is the engine's own. No public measurement in the
project's ground truth isolates it yet: 1 ms is assumed for vLLM and SGLang alike, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass

# family: (memory_efficiency, compute_efficiency, source)
FAMILIES: dict[str, tuple[float, float, str]] = {
    "ampere": (0.602, 0.676, "fitted to Vidur's A100 (Llama-2-7B, Llama-3-8B) and A40 kernel profiles"),
    "hopper": (0.576, 0.651, "fitted to Vidur's H100 kernel profile (one source: not held out)"),
}
# family: (kv_read_efficiency, attention_call_s per layer per iteration, source)
ATTENTION: dict[str, tuple[float, float, str]] = {
    "ampere": (0.885, 4.24e-5, "fitted to FlashAttention-2 paged decode timed on an A30 (GA100)"),
}
NEAREST = {"ada": "ampere", "turing": "ampere", "volta": "ampere", "pascal": "ampere", "blackwell": "hopper",
           "cdna2": "ampere", "cdna3": "hopper"}
FALLBACK = "ampere"
ENGINE_OVERHEAD_S: dict[str, tuple[float, str]] = {
    "vllm": (1e-3, "assumed: no public measurement isolates vLLM's per-iteration overhead yet"),
    "sglang": (1e-3, "assumed: no public measurement isolates SGLang's per-iteration overhead yet"),
}
DEFAULT_ENGINE = "vllm"
RUNTIME_GIB = 2.0  # assumed: CUDA graphs, activations and buffers of a vLLM engine beside its KV pool (GiB)


@dataclass(frozen=True)
class IterationCosts:
    """The efficiencies (fractions) and overhead (s) an engine's iterations use, and where each came from."""

    memory_efficiency: float
    compute_efficiency: float
    overhead_s: float
    sources: tuple[str, ...]  # one line per value not given by the scenario
    kv_read_efficiency: float | None = None  # the attention kernels' KV reads (fraction); None: memory_efficiency
    attention_call_s: float = 0.0  # each layer's attention call, besides its bytes (s)


def iteration_costs(memory_efficiency: float | None, compute_efficiency: float | None, overhead_s: float | None,
                    family: str | None, engine: str | None = None, kv_read_efficiency: float | None = None,
                    attention_call_s: float | None = None) -> IterationCosts:
    """The scenario's values where given, else the family's fitted ones and the engine's overhead."""
    sources: list[str] = []
    if kv_read_efficiency is None or attention_call_s is None:
        kv_default, call_default, why_a = ATTENTION.get(family or "", (None, 0.0, ""))
        if kv_read_efficiency is None and kv_default is not None:
            kv_read_efficiency = kv_default
            sources.append(f"kv_read_efficiency {kv_default:g}: {family}, {why_a}")
        if attention_call_s is None:
            attention_call_s = call_default
            if call_default:
                sources.append(f"attention_call_s {call_default * 1e6:.1f} us: {family}, {why_a}")
    fam = family if family in FAMILIES else NEAREST.get(family or "", FALLBACK)
    mem, comp, why = FAMILIES[fam]
    carried = "" if fam == family else (f" (the card's family {family} has no profile: {fam}'s carried over)"
                                        if family else f" (the card names no family: {fam}'s carried over)")
    if memory_efficiency is None:
        memory_efficiency = mem
        sources.append(f"memory_efficiency {mem:g}: {fam}, {why}{carried}")
    if compute_efficiency is None:
        compute_efficiency = comp
        sources.append(f"compute_efficiency {comp:g}: {fam}, {why}{carried}")
    if overhead_s is None:
        name = engine if engine in ENGINE_OVERHEAD_S else DEFAULT_ENGINE
        overhead_s, why_o = ENGINE_OVERHEAD_S[name]
        sources.append(f"overhead_s {overhead_s:g} s: {name}, {why_o}")
    if kv_read_efficiency is None and family not in ATTENTION:
        sources.append("KV reads at memory_efficiency, no attention ramp: no attention kernel timings for this family")
    return IterationCosts(memory_efficiency, compute_efficiency, overhead_s, tuple(sources), kv_read_efficiency,
                          attention_call_s)
