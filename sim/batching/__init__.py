"""The continuous-batching engine dense and MoE models share: per-operator step costs (:mod:`sim.batching.cost`)
and the scheduler with its KV pool, chunked prefill, admission and preemption (:mod:`sim.batching.server`)."""
