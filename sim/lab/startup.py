"""A server's start-up as the phases its log shows: process, GPU contexts, weights, KV allocation, warm-up.

The weights phase is the load pipeline's (:mod:`sim.lab.pipeline`); the others are the machine's ``startup``
section, in seconds. A server (re)started for a job pays all of them; the dispatcher estimates the same sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.machines import Machine

PHASES = ("process_s", "gpu_context_s", "weights_s", "kv_alloc_s", "warmup_s")


@dataclass(frozen=True)
class Startup:
    """Seconds of each start-up phase of one server start."""

    process_s: float
    gpu_context_s: float  # all GPUs' contexts (created one after another; one on unified memory)
    weights_s: float
    kv_alloc_s: float
    warmup_s: float

    @property
    def total_s(self) -> float:
        return self.process_s + self.gpu_context_s + self.weights_s + self.kv_alloc_s + self.warmup_s


def fixed_s(machine: Machine) -> float:
    """Seconds of a start that do not depend on the weights (process, GPU contexts, KV, warm-up)."""
    return startup(machine, 0.0).total_s


def startup(machine: Machine, weights_s: float) -> Startup:
    s = machine.startup
    contexts = len(machine.gpus) if machine.kind == "discrete" else 1  # unified memory: one GPU, one context
    return Startup(s.process_s, s.gpu_context_s * contexts, weights_s, s.kv_alloc_s, s.warmup_s)


def startup_metrics(name: str, machine: Machine, cold_s: float, hot_s: float) -> dict[str, float]:
    """Flat metrics ``startup.<machine>.*``: each phase of a cold start (page cache dropped) and the totals of a
    cold and a hot (weights page-cached) start."""
    cold, hot = startup(machine, cold_s), startup(machine, hot_s)
    p = f"startup.{name}."
    out = {p + phase: getattr(cold, phase) for phase in PHASES}
    out[p + "weights_hot_s"] = hot.weights_s
    out[p + "cold_s"] = cold.total_s
    out[p + "hot_s"] = hot.total_s
    return out
