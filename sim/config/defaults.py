"""What a scenario leaves open and the package knows: catalog hardware (``gpus``, a machine's ``host``) and a model's
geometry from its file (``models.NAME.file``). Filled into the scenario mapping before it is validated, so every
value still has a dotted path, ``--set`` changes any one of them, and a value the scenario writes always wins.

A GPU type a machine names (``gpus: {gpu0: {type: rtx4090}}``) that the scenario's ``gpus`` section does not
define comes whole from the catalog; one it defines under a catalog name takes the catalog's values for the keys
it leaves out. A host ``type`` fills the host's keys the same way. :func:`fill_defaults` returns the dotted paths it
filled, which the run reports as catalog and model-file defaults.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from sim.core.errors import ScenarioError


def fill_defaults(raw: dict, source: str) -> list[str]:
    """Fill ``raw`` (a scenario mapping, files already resolved) from the catalog and the model files it names;
    returns the dotted paths filled, in order. Errors name ``source`` (or the model file) and the key path."""
    filled: list[str] = []
    _fill_gpu_types(raw, filled)
    _fill_hosts(raw, filled)
    _fill_models(raw, source, filled)
    return filled


def _fill_missing(target: dict, values: dict, prefix: str, filled: list[str]) -> None:
    """Copy into ``target`` every key of ``values`` it lacks (recursively into nested maps it has)."""
    for key, value in values.items():
        if key not in target:
            target[key] = copy.deepcopy(value)
            filled.append(f"{prefix}.{key}")
        elif isinstance(value, dict) and isinstance(target[key], dict):
            _fill_missing(target[key], value, f"{prefix}.{key}", filled)


def _fill_gpu_types(raw: dict, filled: list[str]) -> None:
    from sim.catalog import GPU_SPEC_KEYS, gpu_entries

    catalog = gpu_entries()
    types = raw.get("gpus")
    if types is None:
        types = raw["gpus"] = {}
    if not isinstance(types, dict):
        return  # the schema reports it
    wanted: list[str] = []
    machines = raw.get("machines")
    for m in (machines.values() if isinstance(machines, dict) else ()):
        gpus = m.get("gpus") if isinstance(m, dict) else None
        for g in (gpus.values() if isinstance(gpus, dict) else ()):
            t = g.get("type") if isinstance(g, dict) else None
            if isinstance(t, str) and t not in wanted:
                wanted.append(t)
    for name in [*types, *[t for t in wanted if t not in types]]:
        entry = catalog.get(name)
        if entry is None or not isinstance(types.get(name, {}), dict):
            continue
        spec = {k: v for k, v in entry.items() if k in GPU_SPEC_KEYS}
        if name not in types:
            types[name] = {}
        _fill_missing(types[name], spec, f"gpus.{name}", filled)
    _fill_unified(machines, types, filled)


def _fill_unified(machines: Any, types: dict, filled: list[str]) -> None:
    """A machine whose GPU is a unified-memory chip is a unified machine, and its GPU has no PCIe slot."""
    for mname, m in (machines.items() if isinstance(machines, dict) else ()):
        gpus = m.get("gpus") if isinstance(m, dict) else None
        if not isinstance(gpus, dict):
            continue
        for g in gpus.values():
            card = types.get(g.get("type")) if isinstance(g, dict) and isinstance(g.get("type"), str) else None
            if not isinstance(card, dict) or card.get("unified") is not True:
                continue
            if "slot_gen" not in g:
                g["slot_gen"] = None
            if "kind" not in m:
                m["kind"] = "unified"
                filled.append(f"machines.{mname}.kind")


def _fill_hosts(raw: dict, filled: list[str]) -> None:
    from sim.catalog import HOST_SPEC_KEYS, host_entries

    machines = raw.get("machines")
    if not isinstance(machines, dict):
        return
    catalog = host_entries()
    for mname, m in machines.items():
        host = m.get("host") if isinstance(m, dict) else None
        if not isinstance(host, dict) or not isinstance(host.get("type"), str) or host["type"] not in catalog:
            continue
        spec = {k: v for k, v in catalog[host["type"]].items() if k in HOST_SPEC_KEYS}
        _fill_missing(host, spec, f"machines.{mname}.host", filled)


def _fill_models(raw: dict, source: str, filled: list[str]) -> None:
    models = raw.get("models")
    if not isinstance(models, dict):
        return
    for name, spec in models.items():
        if not isinstance(spec, dict) or spec.get("file") is None:
            continue
        path = spec["file"]
        if not isinstance(path, str):
            raise ScenarioError(source, f"models.{name}.file", f"bad value {path!r}: expected a file path")
        if not os.path.exists(path):
            raise ScenarioError(source, f"models.{name}.file", f"{path}: no such file (a config.json, a folder "
                                "holding one, or a .gguf)")
        quant = spec.get("quant")
        if quant is not None and path.endswith(".gguf"):
            raise ScenarioError(source, f"models.{name}.quant", f"bad value {quant!r}: a GGUF file's tensors carry "
                                "their own types (leave quant out)")
        quant = quant if isinstance(quant, str) else None
        given = spec.get("weights_gib")
        given = float(given) if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0 else None
        if not _derivable(quant):
            if given is None:
                raise ScenarioError(source, f"models.{name}.weights_gib", f"missing: {quant} is an Unsloth dynamic "
                                    "mix whose per-tensor types cannot be derived from a config.json; give the real "
                                    "file's size (GiB), or the .gguf file itself")
        else:
            given = None  # a file type llama.cpp's rules derive: its own bytes (weights_gib, if given, wins)
        try:
            fields = model_file_fields(path, quant, given)
        except ScenarioError as exc:  # the reader names the file; the scenario's key says where it was named
            if exc.path:
                raise
            raise ScenarioError(exc.source, f"models.{name}.file", exc.problem) from None
        _fill_missing(spec, fields, f"models.{name}", filled)


def _derivable(quant: str | None) -> bool:
    """False for a quantization whose per-tensor types cannot be derived (Unsloth's UD- mixes)."""
    from sim.modelfiles.quant import gguf_quant

    if quant is None:
        return True
    try:
        return gguf_quant(quant).derivable
    except ValueError:
        return True  # the reader reports the unknown name


def model_file_fields(path: str, quant: str | None, weights_gib: float | None = None) -> dict[str, Any]:
    """The ``models.NAME`` fields a model file gives: an ``moe`` section for a model with routed experts (with the
    experts' bits per weight and the dense parameter count), a ``dense`` one otherwise, and the bytes of its weights.
    ``weights_gib``: the real file's size the scenario gives, every tensor scaled to it (needed for a mix whose
    per-tensor types cannot be derived, UD-*)."""
    from sim.modelfiles import dense_fields, moe_fields, read_model_file

    geometry = read_model_file(path, quant, weights_bytes=weights_gib * 2**30 if weights_gib else None)
    if geometry.experts_per_layer == 0:
        return dense_fields(geometry)
    fields = moe_fields(geometry)
    # the experts' and the dense weights' bits differ (gpt-oss: MXFP4 experts, BF16 attention): each its own
    fields["moe"].setdefault("bits_per_weight", round(float(geometry.bits_per_weight_experts), 4))
    fields["moe"].setdefault("dense_params_b", float(f"{geometry.dense_params / 1e9:.6g}"))
    return fields
