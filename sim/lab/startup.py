"""A server's start-up as the phases its log shows: process, GPU contexts, weights, KV allocation, warm-up (and, for
vLLM, torch.compile and CUDA graph capture).

The weights phase is the load pipeline's (:mod:`sim.lab.pipeline`); the others are the machine's ``startup``
section, in seconds. A server (re)started for a job pays all of them; the dispatcher estimates the same sum.

vLLM names its phases in its log (:data:`VLLM_PHASES`, the format strings of vLLM's source): a machine whose loader
is one of vLLM's (:data:`VLLM_KINDS`) reports them under those names (:func:`vllm_phases`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.machines import Machine

PHASES = ("process_s", "gpu_context_s", "weights_s", "kv_alloc_s", "warmup_s")
VLLM_KINDS = frozenset(("vllm", "vllm_prefetch", "fastsafetensors", "fastsafetensors_gds", "runai_streamer",
                        "instanttensor"))
# vLLM's start-up log lines, by the phase each times (vllm-project/vllm, docs/research/loaders.md 4):
# model_loader/default_loader.py load_weights @00b5ad07; the v1 GPU model runner's load_model and capture_model
# (code index ids 84859543, 24901595; newer builds: "Model loading took %s GiB memory and %.6f seconds"),
# compilation/monitor.py @00158387 (newer: "torch.compile took %.2f s in total"), v1/engine/core.py (index id
# 53122058033; newer builds append " (compilation: %.2f s)")
VLLM_PHASES = {
    "loading_weights_s": "Loading weights took %.2f seconds",
    "model_loading_s": "Model loading took %.4f GiB and %.6f seconds",
    "torch_compile_s": "torch.compile takes %.2f s in total",
    "graph_capturing_s": "Graph capturing finished in %.0f secs, took %.2f GiB",
    "init_engine_s": "init engine (profile, create kv cache, warmup model) took %.2f seconds",
}


@dataclass(frozen=True)
class Startup:
    """Seconds of each start-up phase of one server start."""

    process_s: float
    gpu_context_s: float  # all GPUs' contexts (created one after another; one on unified memory)
    weights_s: float
    kv_alloc_s: float
    warmup_s: float
    compile_s: float = 0.0  # vLLM's torch.compile
    graph_capture_s: float = 0.0  # vLLM's CUDA graph capture

    @property
    def total_s(self) -> float:
        total = self.process_s + self.gpu_context_s + self.weights_s + self.kv_alloc_s + self.warmup_s
        if self.compile_s or self.graph_capture_s:
            total += self.compile_s + self.graph_capture_s
        return total


def fixed_s(machine: Machine) -> float:
    """Seconds of a start that do not depend on the weights (process, GPU contexts, KV, warm-up, compilation)."""
    return startup(machine, 0.0).total_s


def startup(machine: Machine, weights_s: float) -> Startup:
    s = machine.startup
    contexts = len(machine.gpus) if machine.kind == "discrete" else 1  # unified memory: one GPU, one context
    return Startup(s.process_s, s.gpu_context_s * contexts, weights_s, s.kv_alloc_s, s.warmup_s, s.compile_s,
                   s.graph_capture_s)


def vllm_phases(st: Startup) -> dict[str, float]:
    """The phases of a start as vLLM's log times them (s, keys of :data:`VLLM_PHASES`):

    - ``Loading weights took``: the weights read and copied (default_loader's load_weights);
    - ``Model loading took``: the same, inside the model's construction (the runner's load_model; the
      construction itself is not modelled apart from it);
    - ``torch.compile takes``: Dynamo and Inductor (or the compiled graphs loaded from the cache);
    - ``Graph capturing finished in``: CUDA graph capture;
    - ``init engine (profile, create kv cache, warmup model) took``: what follows the model's load in the engine
      core: profiling and KV cache (``kv_alloc_s``), compilation, warm-up and graph capture."""
    return {"loading_weights_s": st.weights_s, "model_loading_s": st.weights_s, "torch_compile_s": st.compile_s,
            "graph_capturing_s": st.graph_capture_s,
            "init_engine_s": st.kv_alloc_s + st.compile_s + st.warmup_s + st.graph_capture_s}


def startup_metrics(name: str, machine: Machine, cold_s: float, hot_s: float) -> dict[str, float]:
    """Flat metrics ``startup.<machine>.*``: each phase of a cold start (page cache dropped) and the totals of a
    cold and a hot (weights page-cached) start; for a vLLM loader, also the cold start's phases under vLLM's log
    names (``startup.<machine>.vllm.<phase>``)."""
    cold, hot = startup(machine, cold_s), startup(machine, hot_s)
    p = f"startup.{name}."
    out = {p + phase: getattr(cold, phase) for phase in PHASES}
    out[p + "weights_hot_s"] = hot.weights_s
    out[p + "cold_s"] = cold.total_s
    out[p + "hot_s"] = hot.total_s
    if machine.loader.kind in VLLM_KINDS:
        out.update({f"{p}vllm.{k}": v for k, v in vllm_phases(cold).items()})
    return out
