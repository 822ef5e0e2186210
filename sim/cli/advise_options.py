"""What the machine options of ``sim advise`` and ``sim llama`` resolve to beyond a catalog machine: a unified-memory
chip's GPU share (``--gpu-gib``), the share ``sim advise`` searches up to, and several ``--quant`` values searched
side by side; and the bounds of the machine (at most :data:`MAX_GPUS` cards) and of ``sim advise``'s search (its
token options within the context, its lists of values short, each value in the engine's range)."""

from __future__ import annotations

import math

from sim.config.base import MAX_GIB
from sim.config.llamacpp import MAX_CTX, MAX_PARALLEL, MAX_UBATCH
from sim.core.errors import ScenarioError

MAX_GPUS = 16  # cards of one machine: llama.cpp's GGML_CUDA_MAX_DEVICES (ggml/include/ggml-cuda.h)
MAX_SEARCH_VALUES = 16  # values of one searched list (--parallel, --ubatch, --kv)
MAX_SEARCH_SETUPS = 64  # --ubatch x --kv x --parallel x --quant values: each is searched at every layer placement


def shown(text: str, width: int = 60) -> str:
    """An option's value as an error shows it: control characters escaped, cut to ``width`` characters."""
    from sim.formats.inputs import shown_path

    text = shown_path(text)
    return text if len(text) <= width else text[:width - 3] + "..."


def machine_spec(gpu: str | None, gpus: int, host: str, ram_gib: float | None, os_name: str | None,
                 slot_gen: int | None, slot_lanes: int, reserved_gib: float, gpu_gib: float | None):
    """The machine options as a :class:`sim.llamacpp.machine.MachineSpec`; ``--gpus`` from 0 (llama.cpp on the CPU
    alone) to :data:`MAX_GPUS`. A value given is passed on, ``0`` included, for the schema to check."""
    from sim.llamacpp.machine import MachineSpec

    if not 0 <= gpus <= MAX_GPUS:
        raise ScenarioError("--gpus", str(gpus), f"expected 0 to {MAX_GPUS} cards (llama.cpp's "
                            "GGML_CUDA_MAX_DEVICES; 0: llama.cpp on the CPU alone)")
    return MachineSpec(gpu, host, gpus=gpus, slot_gen=slot_gen, slot_lanes=slot_lanes, os=os_name,
                       reserved_gib=reserved_gib, host_fields={} if ram_gib is None else {"ram_gib": ram_gib},
                       gpu_gib=gpu_gib_option(gpu, gpu_gib))


def token_options(n_prompt: int, n_gen: int, depth: int, ctx: int) -> None:
    """``sim advise``'s request: --prompt and --gen at least 1, --depth at least 0, --ctx from 1 to the engine's
    :data:`MAX_CTX`, and the request (its depth, prompt and generated tokens) within --ctx cells."""
    for flag, v, low in (("--prompt", n_prompt, 1), ("--gen", n_gen, 1), ("--depth", depth, 0)):
        if v < low:
            raise ScenarioError(flag, str(v), f"expected at least {low} token{'s' if low != 1 else ''}")
    if not 1 <= ctx <= MAX_CTX:
        raise ScenarioError("--ctx", str(ctx), f"expected 1 to {MAX_CTX:,} KV cells (tokens)")
    if depth + n_prompt + n_gen > ctx:
        raise ScenarioError("--prompt", str(n_prompt), f"--depth {depth:,} + --prompt {n_prompt:,} + --gen "
                            f"{n_gen:,} = {depth + n_prompt + n_gen:,} tokens do not fit the context, --ctx {ctx}: "
                            "expected at most that many tokens in all")


def search_ints(text: str, flag: str, high: int) -> tuple[int, ...]:
    """A searched list of whole numbers (``--parallel 1,2,4``): 1 to :data:`MAX_SEARCH_VALUES` values, each from 1
    to ``high`` (the engine's bound for that flag)."""
    items = text.split(",")
    if len(items) > MAX_SEARCH_VALUES:
        raise ScenarioError(flag, f"{len(items):,} values", f"expected at most {MAX_SEARCH_VALUES} values")
    try:
        values = tuple(int(x) for x in items if x.strip())
    except ValueError:
        raise ScenarioError(flag, shown(text), "expected comma-separated whole numbers") from None
    if not values or min(values) < 1 or max(values) > high:
        raise ScenarioError(flag, shown(text), f"expected whole numbers from 1 to {high:,}")
    return values


def kv_option(text: str) -> tuple[str, ...]:
    """``--kv f16,q8_0``: 1 to :data:`MAX_SEARCH_VALUES` KV cache types."""
    from sim.llamacpp.memory import KV_TYPE_BYTES

    items = text.split(",")
    if len(items) > MAX_SEARCH_VALUES:
        raise ScenarioError("--kv", f"{len(items):,} values", f"expected at most {MAX_SEARCH_VALUES} values")
    kvs = tuple(x.strip() for x in items if x.strip())
    if not kvs or any(k not in KV_TYPE_BYTES for k in kvs):
        raise ScenarioError("--kv", shown(text), f"expected KV types among {', '.join(KV_TYPE_BYTES)}")
    return kvs


def search_lists(parallel: str, ubatches: str, kv_types: str, quants: int) -> tuple[tuple, tuple, tuple]:
    """(``-np``, ``-ub`` and KV type values) of ``sim advise``'s search, checked: at most :data:`MAX_SEARCH_SETUPS`
    of their combinations times the ``quants`` searched."""
    found = (search_ints(parallel, "--parallel", MAX_PARALLEL), search_ints(ubatches, "--ubatch", MAX_UBATCH),
             kv_option(kv_types))
    setups = len(found[0]) * len(found[1]) * len(found[2]) * quants
    if setups > MAX_SEARCH_SETUPS:
        raise ScenarioError("--parallel", shown(parallel), f"--parallel x --ubatch x --kv x --quant values make "
                            f"{setups:,} setups, each searched at every layer placement: expected at most "
                            f"{MAX_SEARCH_SETUPS}")
    return found


def margin_option(margin_gib: float) -> float:
    """``--margin-gib``: the VRAM a placement leaves free on every card, 0 to :data:`sim.config.base.MAX_GIB` GiB."""
    if not math.isfinite(margin_gib) or not 0 <= margin_gib <= MAX_GIB:
        raise ScenarioError("--margin-gib", str(margin_gib), f"expected GiB, from 0 to {MAX_GIB:,.0f}")
    return margin_gib


def quant_sizes(advices: dict, scn, machine: str) -> dict[str, float]:
    """Each searched quantization's weights (GiB), from the model file's tensors at it."""
    from sim.llamacpp.setup import placement_model

    spec = scn.models[scn.machines[machine].engine.model]
    return {q: placement_model(spec.file, q, None).geometry.weights_bytes / 2**30 for q in advices}


def quants_option(quant: str | None, anchor: str | None, model_gib: float | None, most: int = 8) -> list:
    """``--quant``: one quantization, or several (``Q4_K_M,Q6_K,Q8_0``, at most ``most``) searched side by side;
    an empty one is refused (never taken as not given)."""
    if quant is None:
        return [quant]
    quants = list(dict.fromkeys(q.strip() for q in quant.split(",") if q.strip()))
    if not quants:
        raise ScenarioError("--quant", repr(quant), "expected a quantization such as Q4_K_M")
    if "," not in quant:
        return [quant]
    if len(quants) > most:
        raise ScenarioError("--quant", shown(quant), f"expected at most {most} quantization{'s' * (most > 1)}")
    if anchor is not None:
        raise ScenarioError("--anchor", shown(anchor), "a measured run belongs to one quantization: give one --quant")
    if model_gib is not None:
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
