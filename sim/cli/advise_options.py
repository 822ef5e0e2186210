"""What the machine options of ``sim advise`` and ``sim llama`` resolve to beyond a catalog machine: a unified-memory
chip's GPU share (``--gpu-gib``), the share ``sim advise`` searches up to, and several ``--quant`` values searched
side by side."""

from __future__ import annotations

import math

from sim.core.errors import ScenarioError


def quant_sizes(advices: dict, scn, machine: str) -> dict[str, float]:
    """Each searched quantization's weights (GiB), from the model file's tensors at it."""
    from sim.llamacpp.setup import placement_model

    spec = scn.models[scn.machines[machine].engine.model]
    return {q: placement_model(spec.file, q, None).geometry.weights_bytes / 2**30 for q in advices}


def quants_option(quant: str | None, anchor: str | None, model_gib: float | None) -> list:
    """``--quant``: one quantization, or several (``Q4_K_M,Q6_K,Q8_0``) searched side by side."""
    if quant is None or "," not in quant:
        return [quant]
    quants = list(dict.fromkeys(q.strip() for q in quant.split(",") if q.strip()))
    if len(quants) > 8:
        raise ScenarioError("--quant", quant, "expected at most 8 quantizations")
    if anchor:
        raise ScenarioError("--anchor", anchor, "a measured run belongs to one quantization: give one --quant")
    if model_gib:
        raise ScenarioError("--model-gib", str(model_gib), "one file's size: give one --quant with it")
    return quants


def gpu_gib_option(gpu: str | None, gib: float | None) -> float | None:
    """--gpu-gib, checked: only a unified-memory chip's GPU has a share of a pool to set."""
    if gib is None:
        return None
    from sim.catalog import gpu_entries

    if not gpu_entries().get(gpu or "", {}).get("unified"):
        raise ScenarioError("--gpu-gib", str(gib), "only for a unified-memory chip (--gpu gb10, radeon_8060s, m2_max, "
                            "...): a discrete card's VRAM is its own")
    if not math.isfinite(gib) or gib <= 0:
        raise ScenarioError("--gpu-gib", str(gib), "expected GiB, more than 0")
    return gib


def unified_search(scn, machine: str) -> dict | None:
    """On a unified machine whose GPU share is the platform's default: search with all of the pool the OS leaves
    (a placement beyond the default then says what to set); None for a discrete machine."""
    from sim.config.unified import gpu_memory_gib, gpu_memory_rule, most_gpu_gib, pool_gib, unified_card

    m = scn.machines[machine]
    card = unified_card(scn, m)
    if card is None:
        return None
    info = {"pool_gib": pool_gib(scn, m), "default_gib": gpu_memory_gib(scn, m), "rule": gpu_memory_rule(scn, m),
            "vendor": card.vendor, "os": m.host.os if m.host is not None else "linux", "set": m.unified_memory_gib}
    info["raised"] = m.unified_memory_gib is None and most_gpu_gib(scn, m) > info["default_gib"]
    if info["raised"]:
        scn.machines[machine] = m.model_copy(update={"unified_memory_gib": most_gpu_gib(scn, m)})
    return info
