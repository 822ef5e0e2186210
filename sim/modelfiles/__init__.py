"""A model's geometry from the files people have: a Hugging Face ``config.json`` (:func:`read_hf_config`) or a GGUF
file's header (:func:`read_gguf`), and the scenario ``models:`` sections it gives (:func:`moe_fields`,
:func:`dense_fields`, :func:`model_fields`).

Only ``sim.core`` below it: the scenario schema (``sim.config.models``) may use it, not the other way round.
"""

from __future__ import annotations

import os
from typing import Any

from sim.core.errors import ScenarioError
from sim.modelfiles.geometry import ModelGeometry, TensorSpec
from sim.modelfiles.gguf_file import read_gguf
from sim.modelfiles.hf_config import ARCHITECTURES, read_hf_config

__all__ = ["ARCHITECTURES", "ModelGeometry", "TensorSpec", "dense_fields", "model_fields", "moe_fields", "read_gguf",
           "read_hf_config", "read_model_file"]


def read_model_file(path: str, quant: str | None = None, kv_type: str = "f16",
                    weights_bytes: float | None = None) -> ModelGeometry:
    """The geometry of the model in ``path``: a ``.gguf`` file (its own tensor types: ``quant`` must be None) or a
    config.json (any other name, or a folder holding one) at quantization ``quant``. ``kv_type`` is the KV cache's
    value type (f16: 2 bytes); ``weights_bytes`` a real file's size that a config.json's tensors are scaled to
    (required for a mix whose types cannot be derived, UD-*). Raises ScenarioError (one line: file, key, what was
    expected)."""
    path = os.fspath(path)
    if path.lower().endswith(".gguf"):
        if quant is not None:
            raise ScenarioError("--quant", quant, f"{path} is a GGUF file: its quantization is its tensors' own "
                                "types; --quant applies to a config.json")
        return read_gguf(path, kv_type)
    return read_hf_config(path, quant, kv_type, weights_bytes)


def _figure(x: float) -> float:
    """``x`` to 6 significant figures (scenario files stay readable; far below any tolerance)."""
    return float(f"{x:.6g}")


def moe_fields(g: ModelGeometry) -> dict[str, Any]:
    """The scenario sections of an MoE model: ``weights_gib`` and ``moe`` (layers, experts_per_layer, top_k,
    expert_mib, dense_gib, kv_kib_per_token), as :class:`sim.config.models.ModelSpec` reads them."""
    if not g.is_moe:
        raise ValueError(f"{g.source}: a dense model has no moe section (use dense_fields)")
    moe = {"layers": g.moe_layers, "experts_per_layer": g.experts_per_layer, "top_k": g.top_k,
           "expert_mib": _figure(g.expert_bytes / 2**20), "dense_gib": _figure(g.dense_bytes / 2**30),
           "kv_kib_per_token": _figure(g.kv_bytes_per_token / 1024)}
    return {"weights_gib": _figure(g.weights_bytes / 2**30), "moe": moe | _state(g)}


def _state(g: ModelGeometry) -> dict[str, Any]:
    """``state_kib_per_sequence`` of a model with linear-attention layers (none for the others)."""
    linear = sum(1 for k in (g.layer_kinds or ()) if k == "linear")
    if not linear or not g.recurrent_state_bytes:
        return {}
    return {"state_kib_per_sequence": _figure(linear * g.recurrent_state_bytes / 1024)}


def dense_fields(g: ModelGeometry) -> dict[str, Any]:
    """The scenario sections of a dense model: ``weights_gib`` and ``dense`` (params_b, layers, hidden,
    kv_kib_per_token), as :class:`sim.config.models.ModelSpec` reads them."""
    return {"weights_gib": _figure(g.weights_bytes / 2**30),
            "dense": {"params_b": _figure(g.total_params / 1e9), "layers": g.layers, "hidden": g.hidden,
                      "kv_kib_per_token": _figure(g.kv_bytes_per_token / 1024)} | _state(g)}


def model_fields(g: ModelGeometry) -> dict[str, Any]:
    """:func:`moe_fields` for a model with routed experts, else :func:`dense_fields`."""
    return moe_fields(g) if g.is_moe else dense_fields(g)
