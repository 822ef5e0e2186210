"""A Hugging Face ``config.json`` -> :class:`ModelGeometry`: parameters counted tensor by tensor as the architecture's
transformers modelling code creates them, bytes at a quantization, KV cache per token.

Supported (dispatch on ``model_type``, else on ``architectures``): Llama, Mistral, Qwen2, Qwen3 (dense), Qwen2-MoE,
Qwen3-MoE, Qwen3-Next, Mixtral, DeepSeek-V2/V3, gpt-oss, GLM-4.5/4.6 (Glm4MoeForCausalLM). Keys starting with ``_``
are ignored (``_source`` says where a shipped example comes from).

The quantization: ``quant`` names a GGUF type or scheme (see :mod:`sim.modelfiles.quant`); without it, the
checkpoint's own: its ``quantization_config`` (mxfp4 for gpt-oss, fp8 for DeepSeek-V3, gptq/awq by their bits and
group size) else ``torch_dtype`` (or ``dtype``), bf16 when neither is given.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from sim.core.errors import ScenarioError
from sim.modelfiles.geometry import Counts, ModelGeometry, assemble, gqa_kv_bytes, mla_kv_bytes
from sim.modelfiles.quant import Scheme, kv_bytes, scheme, torch_dtype_scheme

MAX_CONFIG_BYTES = 16 * 2**20  # a config.json larger than this is not one (bytes)
MAX_DIM = 2**31  # a width, count or vocabulary above this is a mistake

ARCHITECTURES = {  # model_type -> the transformers class that config.json names
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM", "mixtral": "MixtralForCausalLM", "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM", "gpt_oss": "GptOssForCausalLM", "glm4_moe": "Glm4MoeForCausalLM",
}
_BY_CLASS = {cls: mt for mt, cls in ARCHITECTURES.items()}


class _Config:
    """config.json's values, each read with an error naming the file and the key when it is missing or wrong."""

    def __init__(self, path: str, raw: dict[str, Any]):
        self.path = path
        self.raw = {k: v for k, v in raw.items() if not (isinstance(k, str) and k.startswith("_"))}

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """A whole number >= ``minimum``; ``default`` when absent or null (required when ``default`` is None)."""
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise ScenarioError(self.path, key, f"missing: expected a whole number >= {minimum}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_DIM:
            raise ScenarioError(self.path, key, f"expected a whole number from {minimum} to {MAX_DIM}, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ScenarioError(self.path, key, f"expected true or false, got {value!r}")
        return value

    def ints(self, key: str) -> list[int]:
        value = self.raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ScenarioError(self.path, key, f"expected a list of layer numbers, got {value!r}")
        return value

    def layer_types(self, key: str, layers: int, allowed: tuple[str, ...]) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != layers or not all(v in allowed for v in value):
            raise ScenarioError(self.path, key, f"expected a list of {layers} layer types, each one of "
                                f"{', '.join(allowed)}")
        return value


@dataclass
class _Plan:
    """One architecture's layers: each block's mixer and FFN, and the parameters of each kind."""

    kinds: list[str]  # per block: "full", "sliding", "linear" (no per-token cache) or "mla"
    moe: list[bool]  # per block: routed experts (True) or a dense FFN
    mixer: dict[str, int]  # parameters of one block's mixer, by kind
    dense_ffn: int = 0  # parameters of one dense block's FFN
    expert: int = 0  # of ONE routed expert
    experts: int = 0  # routed experts per MoE block
    top_k: int = 0
    shared_count: int = 0  # shared experts per MoE block
    shared: int = 0  # parameters of one MoE block's shared experts
    router: int = 0  # of one MoE block's router (and shared-expert gate)
    kv_per_layer: float = 0.0  # KV cache per token of one full or MLA layer (bytes)
    notes: list[str] = field(default_factory=list)


def read_hf_config(path: str, quant: str | None = None, kv_type: str = "f16") -> ModelGeometry:
    """Read ``path`` (a config.json, or a folder holding one) as a model at quantization ``quant`` (a GGUF type or
    scheme; None: the checkpoint's own) with a KV cache of ``kv_type`` values (f16 default: 2 bytes each).
    Raises ScenarioError (file, key, what was expected) for a missing or malformed file, a missing or wrong key or
    an unsupported architecture."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    cfg = _Config(path, _load_json(path))
    model_type = _model_type(cfg)
    try:
        value_bytes = kv_bytes(kv_type)
    except ValueError as exc:
        raise ScenarioError("--kv-type", kv_type, str(exc)) from None
    hidden, layers = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.int("num_key_value_heads", heads)
    head_dim = cfg.int("head_dim", hidden // heads)
    vocab = cfg.int("vocab_size")
    plan = _PLANS[model_type](cfg, hidden, layers, heads, kv_heads, head_dim, value_bytes)
    if plan.top_k > plan.experts:
        raise ScenarioError(path, "num_experts_per_tok", f"{plan.top_k} experts per token of {plan.experts}: "
                            "expected at most the experts per layer")
    if model_type in ("deepseek_v2", "deepseek_v3"):
        kv_heads, head_dim = heads, cfg.int("qk_nope_head_dim") + cfg.int("qk_rope_head_dim")
    counts = Counts(embedding=vocab * hidden, output_head=0 if cfg.flag("tie_word_embeddings", False) else
                    vocab * hidden, norms=hidden * (2 * layers + 1), expert=plan.expert)
    for kind, is_moe in zip(plan.kinds, plan.moe, strict=True):
        counts.attention += plan.mixer[kind]
        if is_moe:
            counts.shared += plan.shared
            counts.routers += plan.router
        else:
            counts.dense_ffn += plan.dense_ffn
    cached = [k for k in plan.kinds if k in ("full", "mla")] or [k for k in plan.kinds if k == "sliding"]
    if "sliding" in plan.kinds and "full" in plan.kinds:
        plan.notes.append(f"{plan.kinds.count('sliding')} sliding-window layers not counted per token: they hold at "
                          f"most {cfg.int('sliding_window')} tokens each, "
                          f"{plan.kinds.count('sliding') * cfg.int('sliding_window') * plan.kv_per_layer / 2**20:.3g}"
                          " MiB in all")
    elif cached and cached[0] == "sliding":
        plan.notes.append(f"every layer has a sliding window of {cfg.int('sliding_window')} tokens: the KV cache "
                          "stops growing there")
    if "linear" in plan.kinds:
        plan.notes.append(f"{plan.kinds.count('linear')} linear-attention layers keep a fixed-size state, not a "
                          "per-token KV cache")
    if cfg.int("num_nextn_predict_layers", 0, minimum=0):
        plan.notes.append(f"{cfg.int('num_nextn_predict_layers', 0, minimum=0)} multi-token-prediction layer(s) "
                          "not counted")
    return assemble(architecture=model_type, source=path, counts=counts, layers=layers, moe_layers=sum(plan.moe),
                    hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab,
                    experts=plan.experts, top_k=plan.top_k, shared_experts=plan.shared_count,
                    kv_bytes_per_token=len(cached) * plan.kv_per_layer, attention_layers=len(cached),
                    quant=_scheme(cfg, quant), notes=plan.notes)


def _load_json(path: str) -> dict[str, Any]:
    try:
        size = os.path.getsize(path)
        if size > MAX_CONFIG_BYTES:
            raise ScenarioError(path, "", f"{size} bytes: a config.json is at most {MAX_CONFIG_BYTES} bytes")
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise ScenarioError(path, "", "no such file: expected a model's config.json or a .gguf file") from None
    except OSError as exc:
        raise ScenarioError(path, "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(path, "", "not text: expected a config.json (UTF-8 JSON) or a .gguf file") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(path, "", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ScenarioError(path, "", "not valid JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise ScenarioError(path, "", f"expected a JSON object of configuration keys, got a {type(raw).__name__}")
    return raw


def _model_type(cfg: _Config) -> str:
    model_type = cfg.raw.get("model_type")
    classes = cfg.raw.get("architectures")
    if model_type in ARCHITECTURES:
        return str(model_type)
    for cls in classes if isinstance(classes, list) else []:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    supported = ", ".join(f"{mt} ({cls})" for mt, cls in ARCHITECTURES.items())
    key, value = ("model_type", model_type) if model_type is not None or classes is None else ("architectures",
                                                                                               classes)
    raise ScenarioError(cfg.path, key, f"unsupported architecture {value!r} (architectures {classes!r}): expected "
                        f"one of {supported}")


def _scheme(cfg: _Config, quant: str | None) -> Scheme:
    """The quantization asked for, else the checkpoint's own (see the module docstring)."""
    if quant is not None:
        try:
            return scheme(quant)
        except ValueError as exc:
            raise ScenarioError("--quant", quant, str(exc)) from None
    dtype_key = "torch_dtype" if cfg.has("torch_dtype") else "dtype"
    try:
        floats = torch_dtype_scheme(cfg.raw[dtype_key]) if cfg.has(dtype_key) else Scheme(
            "BF16", 16.0, 16.0, 16.0, "no torch_dtype: the weights taken as bf16")
    except ValueError as exc:
        raise ScenarioError(cfg.path, dtype_key, str(exc)) from None
    qc = cfg.raw.get("quantization_config")
    if not isinstance(qc, dict) or qc.get("quant_method") is None:
        return floats
    method = str(qc["quant_method"]).lower()
    if method in ("mxfp4", "fp8"):
        return scheme(method)
    bits, group = qc.get("bits"), qc.get("group_size", 128)
    if method in ("gptq", "awq") and bits in (2, 3, 4, 8) and isinstance(group, int):
        per = bits + ((16 + bits) / group if group > 0 else 0)
        return Scheme(f"{method.upper()}-{bits}bit", per, per, floats.embedding_bits,
                      f"{method}: {bits}-bit weights with an fp16 scale and a {bits}-bit zero point per {group} "
                      f"weights ({per:.3g} bits), embeddings and output head {floats.name}")
    raise ScenarioError(cfg.path, "quantization_config.quant_method", f"'{method}' with bits {bits!r}: not a "
                        "quantization read here (mxfp4, fp8, gptq or awq with bits 2, 3, 4 or 8); name one with "
                        "--quant")


def _gqa(hidden: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool = False, o_bias: bool = False,
         qk_norm: bool = False, gated_q: bool = False) -> int:
    """Parameters of one grouped-query attention block: q, k, v, o projections (+ biases, q/k norms, a gated q)."""
    q_out, kv_out = heads * head_dim * (2 if gated_q else 1), kv_heads * head_dim
    params = hidden * (q_out + 2 * kv_out) + heads * head_dim * hidden
    return (params + (q_out + 2 * kv_out if qkv_bias else 0) + (hidden if o_bias else 0)
            + (2 * head_dim if qk_norm else 0))


def _gated_ffn(hidden: int, inner: int, bias: bool = False) -> int:
    """Parameters of a SwiGLU FFN: gate, up (hidden x inner) and down (inner x hidden)."""
    return 3 * hidden * inner + (2 * inner + hidden if bias else 0)


def _full_layers(layers: int, kv: float, mixer: int) -> dict[str, Any]:
    """Every block full attention with ``mixer`` parameters and ``kv`` bytes of cache per token."""
    return {"kinds": ["full"] * layers, "mixer": {"full": mixer}, "kv_per_layer": kv}


def _dense(cfg: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vb: float) -> _Plan:
    """Llama, Mistral, Qwen2, Qwen3: every block attention + SwiGLU FFN."""
    kind = _model_type(cfg)
    bias = cfg.flag("attention_bias", False)
    qkv_bias = True if kind == "qwen2" else bias
    mixer = _gqa(hidden, heads, kv_heads, head_dim, qkv_bias, bias and kind != "qwen2", kind == "qwen3")
    plan = _Plan(moe=[False] * layers, **_full_layers(layers, gqa_kv_bytes(1, kv_heads, head_dim, head_dim, vb),
                                                      mixer),
                 dense_ffn=_gated_ffn(hidden, cfg.int("intermediate_size"), cfg.flag("mlp_bias", False)))
    if kind == "mistral" and cfg.has("sliding_window"):
        plan.kinds = ["sliding"] * layers
        plan.mixer["sliding"] = mixer
    elif cfg.flag("use_sliding_window", False):
        plan.notes.append("use_sliding_window: the KV cache counted per token for every layer (the window and "
                          "max_window_layers not modelled)")
    return plan


def _qwen_moe(cfg: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vb: float) -> _Plan:
    """Qwen2-MoE, Qwen3-MoE, Qwen3-Next: MoE blocks by decoder_sparse_step and mlp_only_layers; shared experts by
    shared_expert_intermediate_size; Qwen3-Next's Gated DeltaNet layers between its full-attention ones."""
    kind = _model_type(cfg)
    step, dense_only = cfg.int("decoder_sparse_step", 1), set(cfg.ints("mlp_only_layers"))
    experts = cfg.int("num_experts")
    moe = [i not in dense_only and (i + 1) % step == 0 for i in range(layers)]
    shared_inner = cfg.int("shared_expert_intermediate_size", 0, minimum=0) if kind != "qwen3_moe" else 0
    bias = cfg.flag("attention_bias", False)
    plan = _Plan(moe=moe, expert=_gated_ffn(hidden, cfg.int("moe_intermediate_size")), experts=experts,
                 top_k=cfg.int("num_experts_per_tok"), shared_count=1 if shared_inner else 0,
                 shared=_gated_ffn(hidden, shared_inner) if shared_inner else 0,
                 router=hidden * experts + (hidden if shared_inner else 0),
                 dense_ffn=_gated_ffn(hidden, cfg.int("intermediate_size")) if not all(moe) else 0,
                 **_full_layers(layers, gqa_kv_bytes(1, kv_heads, head_dim, head_dim, vb), 0))
    if kind == "qwen2_moe":
        plan.mixer["full"] = _gqa(hidden, heads, kv_heads, head_dim, cfg.flag("qkv_bias", True))
    elif kind == "qwen3_moe":
        plan.mixer["full"] = _gqa(hidden, heads, kv_heads, head_dim, bias, bias, qk_norm=True)
    else:
        plan.mixer["full"] = _gqa(hidden, heads, kv_heads, head_dim, bias, bias, qk_norm=True, gated_q=True)
        interval = cfg.int("full_attention_interval", 4)
        types = cfg.layer_types("layer_types", layers, ("linear_attention", "full_attention"))
        types = types or ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
        plan.kinds = ["full" if t == "full_attention" else "linear" for t in types]
        plan.mixer["linear"] = _gated_deltanet(cfg, hidden)
    return plan


def _gated_deltanet(cfg: _Config, hidden: int) -> int:
    """Parameters of one Qwen3-Next linear-attention (Gated DeltaNet) block: in_proj_qkvz, in_proj_ba, the causal
    conv, dt_bias and A_log, the gated norm, out_proj."""
    k_heads, v_heads = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
    k_dim, v_dim = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
    key, value = k_heads * k_dim, v_heads * v_dim
    conv = (2 * key + value) * cfg.int("linear_conv_kernel_dim")
    return hidden * (2 * key + 2 * value) + hidden * 2 * v_heads + conv + 2 * v_heads + v_dim + value * hidden


def _mixtral(cfg: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vb: float) -> _Plan:
    experts = cfg.int("num_local_experts")
    plan = _Plan(moe=[True] * layers, expert=_gated_ffn(hidden, cfg.int("intermediate_size")), experts=experts,
                 top_k=cfg.int("num_experts_per_tok"), router=hidden * experts,
                 **_full_layers(layers, gqa_kv_bytes(1, kv_heads, head_dim, head_dim, vb),
                                _gqa(hidden, heads, kv_heads, head_dim)))
    if cfg.has("sliding_window"):
        plan.kinds = ["sliding"] * layers
        plan.mixer["sliding"] = plan.mixer["full"]
    return plan


def _gpt_oss(cfg: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vb: float) -> _Plan:
    """gpt-oss: biased attention with per-head sinks, alternating sliding and full attention, biased experts."""
    experts = cfg.int("num_local_experts")
    mixer = _gqa(hidden, heads, kv_heads, head_dim, qkv_bias=True, o_bias=True) + heads  # + the sinks
    types = cfg.layer_types("layer_types", layers, ("sliding_attention", "full_attention"))
    types = types or ["full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(layers)]
    return _Plan(kinds=["full" if t == "full_attention" else "sliding" for t in types], moe=[True] * layers,
                 mixer={"full": mixer, "sliding": mixer},
                 expert=_gated_ffn(hidden, cfg.int("intermediate_size"), bias=True), experts=experts,
                 top_k=cfg.int("experts_per_token", cfg.int("num_experts_per_tok", 0, minimum=0) or None),
                 router=hidden * experts + experts, kv_per_layer=gqa_kv_bytes(1, kv_heads, head_dim, head_dim, vb))


def _routed_after_dense(cfg: _Config, hidden: int, layers: int) -> dict[str, Any]:
    """DeepSeek and GLM-4.5 MoE: the first first_k_dense_replace blocks dense, then routed experts (every
    moe_layer_freq-th block), n_shared_experts shared ones, a router with a correction bias under noaux_tc."""
    experts, first = cfg.int("n_routed_experts"), cfg.int("first_k_dense_replace", 0, minimum=0)
    freq = cfg.int("moe_layer_freq", 1)
    inner = cfg.int("moe_intermediate_size")
    shared = cfg.int("n_shared_experts", 0, minimum=0)
    bias = _model_type(cfg) == "glm4_moe" or cfg.raw.get("topk_method") == "noaux_tc"
    moe = [i >= first and i % freq == 0 for i in range(layers)]
    return {"moe": moe, "expert": _gated_ffn(hidden, inner), "experts": experts,
            "top_k": cfg.int("num_experts_per_tok"), "shared_count": shared,
            "shared": shared * _gated_ffn(hidden, inner), "router": experts * hidden + (experts if bias else 0),
            "dense_ffn": _gated_ffn(hidden, cfg.int("intermediate_size")) if not all(moe) else 0}


def _deepseek(cfg: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vb: float) -> _Plan:
    """DeepSeek-V2/V3: multi-head latent attention (MLA), its KV cache the compressed latent."""
    q_lora = cfg.int("q_lora_rank", 0, minimum=0)
    kv_lora, nope, rope, v_dim = (cfg.int("kv_lora_rank"), cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim"),
                                  cfg.int("v_head_dim"))
    bias = cfg.flag("attention_bias", False)
    q_head = nope + rope
    if q_lora:  # q_a_proj, its norm, q_b_proj
        q = hidden * q_lora + (q_lora if bias else 0) + q_lora + q_lora * heads * q_head
    else:
        q = hidden * heads * q_head
    kv = hidden * (kv_lora + rope) + (kv_lora + rope if bias else 0) + kv_lora + kv_lora * heads * (nope + v_dim)
    mixer = q + kv + heads * v_dim * hidden + (hidden if bias else 0)
    return _Plan(kinds=["mla"] * layers, mixer={"mla": mixer}, kv_per_layer=mla_kv_bytes(1, kv_lora, rope, vb),
                 **_routed_after_dense(cfg, hidden, layers))


def _glm4_moe(cfg: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vb: float) -> _Plan:
    """GLM-4.5/4.6: biased q/k/v, optional q/k norms, DeepSeek-style routed and shared experts."""
    mixer = _gqa(hidden, heads, kv_heads, head_dim, cfg.flag("attention_bias", False),
                 qk_norm=cfg.flag("use_qk_norm", False))
    return _Plan(**_full_layers(layers, gqa_kv_bytes(1, kv_heads, head_dim, head_dim, vb), mixer),
                 **_routed_after_dense(cfg, hidden, layers))


_PLANS = {"llama": _dense, "mistral": _dense, "qwen2": _dense, "qwen3": _dense, "qwen2_moe": _qwen_moe,
          "qwen3_moe": _qwen_moe, "qwen3_next": _qwen_moe, "mixtral": _mixtral, "deepseek_v2": _deepseek,
          "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss, "glm4_moe": _glm4_moe}
