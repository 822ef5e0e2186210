"""A Hugging Face ``config.json`` (read by :mod:`sim.formats.hf_config`) -> :class:`ModelGeometry`: the model's
tensors as llama.cpp's converter writes them (:mod:`sim.modelfiles.hf_layouts`), each typed and sized at a
quantization (:mod:`sim.modelfiles.quant`), the layers' kinds and the caches they keep.

Supported (dispatch on ``model_type``, a multimodal wrapper's ``text_config.model_type``, else ``architectures``):
see :data:`ARCHITECTURES`. A multimodal config's ``text_config`` is read over its top level (the vision tower is not
counted: llama.cpp keeps it in a separate mmproj file). Keys starting with ``_`` are ignored (``_source`` says where
a shipped example comes from).

The quantization: ``quant`` names a llama.cpp file type (its per-tensor rules), a GGUF type, an ik_llama.cpp type
or an Unsloth dynamic mix (``UD-``: its sizes cannot be derived, ``weights_bytes`` must give the file's); without
it, the checkpoint's own: its ``quantization_config`` (mxfp4 for gpt-oss, fp8 for DeepSeek-V3, gptq/awq by their
bits and group size) else ``torch_dtype`` (or ``dtype``), bf16 when neither is given.
"""

from __future__ import annotations

import os
from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.hf_config import read_config_object
from sim.modelfiles.geometry import ModelGeometry, assemble, scaled, spec
from sim.modelfiles.hf_blocks import Config, Layout
from sim.modelfiles.hf_layouts import BUILDERS, CLASS_DEFAULTS, NEEDED, TEXT_TYPES
from sim.modelfiles.llama_quant import Target, ik_note
from sim.modelfiles.quant import Quant, checkpoint_quant, gguf_quant, kv_bytes, slot_types

ARCHITECTURES = {mt: cls for mt, (_, cls) in BUILDERS.items()}  # model_type -> the transformers class
_BY_CLASS = {cls: mt for mt, cls in ARCHITECTURES.items()}
_BY_CLASS.update({"MistralForCausalLM": "mistral", "Mistral3ForConditionalGeneration": "mistral",
                  "Qwen3_5ForCausalLM": "qwen3_5", "Qwen3_5MoeForCausalLM": "qwen3_5_moe",
                  "Llama4ForCausalLM": "llama4", "KimiK2ForCausalLM": "kimi_k2"})


def read_hf_config(path: str, quant: str | None = None, kv_type: str = "f16",
                   weights_bytes: float | None = None) -> ModelGeometry:
    """Read ``path`` (a config.json, or a folder holding one) as a model at quantization ``quant`` (see the module
    docstring; None: the checkpoint's own) with a KV cache of ``kv_type`` values (f16 default: 2 bytes each);
    ``weights_bytes``: a real file's size, every tensor scaled to it. Raises ScenarioError (file, key, what was
    expected) for a missing or malformed file, a missing or wrong key or an unsupported architecture."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    top = read_config_object(path)
    cfg, model_type = _text_config(path, top)
    try:
        value_bytes = kv_bytes(kv_type)
    except ValueError as exc:
        raise ScenarioError("--kv-type", kv_type, str(exc)) from None
    builder = BUILDERS[model_type][0]
    lay: Layout = builder(cfg, model_type, value_bytes)
    if lay.top_k > lay.experts:
        raise ScenarioError(path, cfg.key("num_experts_per_tok"), f"{lay.top_k} experts per token of "
                            f"{lay.experts}: expected at most the experts per layer")
    q = _quant(path, top, cfg, quant)
    layers = len(lay.kinds)
    target = Target(lay.gguf_arch, lay.experts, lay.n_gqa, layers + _mtp_blocks(lay), lay.type_70b)
    try:
        typed = slot_types(lay.slots + lay.mtp, q, target)
    except ValueError as exc:  # rows that are no whole number of the type's blocks: llama.cpp refuses them too
        raise ScenarioError(path, "", f"{exc}: llama.cpp cannot store this model at {q.name} (a tensor's rows must be "
                            "whole blocks of its type; a width of the config out of its range?)") from None
    specs = [spec(s.name, s.shape, t, b) for s, (t, b) in zip(lay.slots + lay.mtp, typed, strict=True)]
    tensors, mtp = specs[:len(lay.slots)], specs[len(lay.slots):]
    notes = list(lay.notes)
    kinds = lay.kinds
    cached = [k for k in kinds if k in ("full", "mla")] or [k for k in kinds if k == "sliding"]
    if "sliding" in kinds and "full" in kinds:
        notes.append(f"{kinds.count('sliding')} sliding-window layers not counted per token: they hold at most "
                     f"{lay.sliding_window} tokens each, "
                     f"{kinds.count('sliding') * lay.sliding_window * lay.kv_per_layer / 2**20:.3g} MiB in all")
    elif cached and cached[0] == "sliding":
        notes.append(f"every layer has a sliding window of {lay.sliding_window} tokens: the KV cache stops growing "
                     "there")
    if "linear" in kinds:
        notes.append(f"{kinds.count('linear')} linear-attention layers keep a fixed-size state, not a per-token KV "
                     f"cache ({lay.dims['recurrent_state_bytes'] / 2**20:.3g} MiB per sequence each)")
    if mtp:
        notes.append(f"{_mtp_blocks(lay)} multi-token-prediction block(s) not counted "
                     f"({sum(t.bytes for t in mtp) / 2**20:.4g} MiB; a GGUF converted with them holds them too)")
    notes += _quant_notes(q)
    g = assemble(tensors=tensors, mtp_tensors=mtp, architecture=model_type, source=path, quant=q.name,
                 layers=layers, hidden=cfg.int("hidden_size"), heads=lay.heads, kv_heads=lay.kv_heads,
                 head_dim=lay.head_dim, vocab=cfg.int("vocab_size"), experts=lay.experts, top_k=lay.top_k,
                 shared_experts=lay.shared, kv_bytes_per_token=len(cached) * lay.kv_per_layer,
                 attention_layers=len(cached), notes=notes, layer_kinds=tuple(kinds),
                 sliding_window=lay.sliding_window, value_head_dim=lay.value_dim,
                 kv_bytes_per_layer_f16=lay.kv_per_layer_f16, train_context=cfg.int("max_position_embeddings", 0, 0),
                 bytes_from="checkpoint" if q.kind == "checkpoint" else "llama.cpp rules", **lay.dims)
    if weights_bytes:
        return scaled(g, weights_bytes, f"every tensor scaled by {weights_bytes / g.weights_bytes:.4g} to the "
                      f"file's {weights_bytes / 2**30:.4g} GiB")
    if not q.derivable:
        raise ScenarioError("--quant", quant or "", f"{q.name} is an Unsloth dynamic mix: its per-tensor types "
                            "cannot be derived from config.json; give the .gguf file, or the file's size "
                            "(weights_gib; sim model --weights-gib) to scale "
                            f"{q.recipe.ftype if q.recipe else 'its'} tensors to")
    return g


def _mtp_blocks(lay: Layout) -> int:
    return len({s.name.split(".")[1] for s in lay.mtp})


def _quant_notes(q: Quant) -> list[str]:
    if q.kind == "unsloth":
        return [f"{q.name}: Unsloth's dynamic mix; its tensors listed at {q.recipe.ftype if q.recipe else '?'} "
                "(the mix's types cannot be derived)"]
    if q.kind == "gguf" and q.recipe is not None:
        note = ik_note(q.recipe)
        return [note] if note else []
    return []


def _text_config(path: str, top: dict[str, Any]) -> tuple[Config, str]:
    """The config the text model is read from (``text_config`` over the top level) and its builder's key."""
    text = top.get("text_config")
    if isinstance(text, dict):
        merged = {**{k: v for k, v in top.items() if k != "text_config"}, **text}
        merged.setdefault("tie_word_embeddings", top.get("tie_word_embeddings"))
        kind = _model_type(Config(path, merged, "text_config."), top, text)
        return Config(path, merged, "text_config.", CLASS_DEFAULTS.get(kind)), kind
    kind = _model_type(Config(path, top), top, None)
    return Config(path, top, "", CLASS_DEFAULTS.get(kind)), kind


def _model_type(cfg: Config, top: dict[str, Any], text: dict[str, Any] | None) -> str:
    """The builder's key: the top level's model_type, the text model's, or the first known architectures class."""
    model_type, classes = top.get("model_type"), top.get("architectures")
    text_type = text.get("model_type") if text else None
    for key, value in (("model_type", model_type), ("text_config.model_type", text_type)):
        if value is not None and not isinstance(value, str):
            raise ScenarioError(cfg.path, key, f"bad value {str(value)[:60]}: expected the architecture's name, "
                                "a text such as 'llama'")
    classes = [c for c in classes if isinstance(c, str)] if isinstance(classes, list) else classes
    if text_type in ("mistral", "mistral3") or model_type == "mistral3":
        return "mistral"
    if model_type in BUILDERS:
        return str(model_type)
    if text_type in TEXT_TYPES:
        return TEXT_TYPES[text_type]
    if text_type in BUILDERS:
        return str(text_type)
    for cls in classes if isinstance(classes, list) else []:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    supported = ", ".join(sorted(BUILDERS))
    key, value = ("model_type", model_type) if model_type is not None or classes is None else ("architectures",
                                                                                               classes)
    raise ScenarioError(cfg.path, key, f"unsupported architecture {value!r} (architectures {classes!r}"
                        f"{f', text model {text_type!r}' if text_type else ''}): expected one of {supported}; to "
                        f"count another the reader needs its tensors from {', '.join(NEEDED)}")


def _quant(path: str, top: dict[str, Any], cfg: Config, quant: str | None) -> Quant:
    """The quantization asked for, else the checkpoint's own (see the module docstring)."""
    if quant is not None:
        try:
            return gguf_quant(quant)
        except ValueError as exc:
            raise ScenarioError("--quant", quant, str(exc)) from None
    dtype_key = "torch_dtype" if cfg.has("torch_dtype") else "dtype"
    try:
        return checkpoint_quant(cfg.raw.get(dtype_key), cfg.raw.get("quantization_config"))
    except ValueError as exc:
        key = cfg.key(dtype_key) if str(exc).startswith("unknown torch_dtype") else "quantization_config.quant_method"
        raise ScenarioError(path, key, str(exc)) from None
