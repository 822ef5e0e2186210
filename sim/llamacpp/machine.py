"""A scenario of one machine running llama.cpp, from catalog names and a model file: what ``sim advise``, ``sim
llama`` (a pasted command line) and the offload fit build instead of asking for a scenario file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from sim.config.scenario import Scenario


@dataclass
class MachineSpec:
    """The hardware in catalog terms: a GPU type (``gpus`` of it), its link, a host and its OS."""

    gpu: str | None  # catalog GPU type; None: a CPU-only machine (llama.cpp without a card)
    host: str | None  # catalog host; None: the host_fields describe it
    gpus: int = 1
    slot_gen: int | None = None  # default: the card's own generation
    slot_lanes: int = 16
    os: str | None = "linux"  # None: the platform's own (macOS for an Apple chip, else Linux)
    reserved_gib: float = 0.0  # VRAM other processes hold on each card
    host_fields: dict[str, Any] = field(default_factory=dict)  # mt_s, channels, cores, ram_gib overrides
    gpu_gib: float | None = None  # a unified-memory chip: what its GPU may allocate of the pool (None: the rule)


def scenario_dict(spec: MachineSpec, model_file: str, quant: str | None, settings: dict[str, Any],
                  file_gib: float | None = None, name: str = "llamacpp", bench: dict | None = None) -> dict:
    """The scenario (as a dict, to write or validate) of ``spec`` running ``model_file`` with llama.cpp ``settings``
    (its flags' keys)."""
    from sim.catalog import gpu_entries

    host: dict[str, Any] = ({"type": spec.host} if spec.host else {}) | dict(spec.host_fields)
    os_name = spec.os
    if os_name is None:  # an Apple chip runs macOS, everything else Linux unless said
        os_name = "macos" if gpu_entries().get(spec.gpu or "", {}).get("vendor") == "apple" else "linux"
    if os_name != "linux":
        host["os"] = os_name
    gpus: dict[str, Any] = {}
    if spec.gpu is not None:
        card = gpu_entries().get(spec.gpu, {})
        gen = spec.slot_gen if spec.slot_gen is not None else card.get("pcie_max_gen") or 4  # 0 is for the schema
        for i in range(spec.gpus):  # a unified-memory chip has no slot (filled in as none)
            gpus[f"gpu{i}"] = {"type": spec.gpu} if card.get("unified") else \
                {"type": spec.gpu, "slot_gen": gen, "slot_lanes": spec.slot_lanes}
            if spec.reserved_gib:
                gpus[f"gpu{i}"]["reserved_gib"] = spec.reserved_gib
    model: dict[str, Any] = {"file": os.path.abspath(model_file)}
    if quant:
        model["quant"] = quant
    if file_gib is not None:  # 0 included: the schema refuses it
        model["weights_gib"] = file_gib
    key = model_key(model_file)
    engine: dict[str, Any] = {"model": key, "llamacpp": dict(settings)}
    if gpus:
        engine["gpu"] = "gpu0"
    machine: dict[str, Any] = {"host": host, "gpus": gpus, "engine": engine}
    if spec.gpu_gib is not None:
        machine["unified_memory_gib"] = spec.gpu_gib
    out: dict[str, Any] = {"name": name, "models": {key: model}, "machines": {"box": machine}}
    if bench:
        out["bench"] = {"machine": "box"} | bench
    return out


def model_key(path: str) -> str:
    """A scenario key for a model file: its name without the extension, in letters, digits and ``_``."""
    import re

    stem = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
    if stem == "config":  # a folder's config.json: the folder names the model
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_").lower() or "model"


def build_scenario(raw: dict, source: str) -> Scenario:
    """Validate a scenario dict as a file would be (catalog and model-file defaults filled)."""
    import copy

    from sim.config.defaults import fill_defaults
    from sim.config.load import validate

    raw = copy.deepcopy(raw)
    filled = fill_defaults(raw, source)
    scn = validate(raw, source)
    scn._defaults = tuple(filled)
    return scn
