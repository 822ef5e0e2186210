"""The GGUF tensors of a model from its config.json, one builder per architecture: the tensors llama.cpp's
converter (``convert_hf_to_gguf.py``) writes and its loader (``src/models/<arch>.cpp``, ``create_tensor``) reads, by
GGUF name and shape (``ne[0]`` first), read from ggml-org/llama.cpp at 0c1e57098bba43ac29e6e3b677cdceebdd22334f (the
copy vendored in llama-cpp-python 0.3.36). Each builder documents its architecture's departures.
"""

from __future__ import annotations

from typing import Any

from sim.core.errors import ScenarioError
from sim.modelfiles.geometry import delta_net_state_bytes, mla_kv_bytes
from sim.modelfiles.hf_blocks import Config, Layout, basics, ffn, gqa, gqa_dims, head, moe, nextn, norm

# --- architectures -------------------------------------------------------------------------------------------------

def llama(cfg: Config, kind: str, vb: float) -> Layout:
    """Llama, Mistral (and the text model of Mistral3), Mixtral, Granite-MoE, Llama-type derivatives: attention,
    then a SwiGLU FFN or (``num_local_experts``) routed experts. Mistral's ``sliding_window``: every layer slides."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    arch = {"mixtral": "llama", "mistral": "llama", "granitemoe": "granitemoe"}.get(kind, "llama")
    lay = Layout(arch)
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    bias = cfg.flag("attention_bias", False)
    experts = cfg.int("num_local_experts", 0, minimum=0)
    inner = cfg.int("intermediate_size")
    shared = cfg.int("shared_intermediate_size", 0, minimum=0)
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qkv_bias=bias, o_bias=bias)
        norm(lay, b, "ffn_norm", h)
        if experts:
            moe(lay, b, h, inner, experts, shared_inner=shared)
        else:
            ffn(lay, b, h, inner, bias=cfg.flag("mlp_bias", False))
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.experts, lay.top_k = experts, cfg.int("num_experts_per_tok", 0, minimum=0) if experts else 0
    lay.kinds = ["full"] * layers
    if kind in ("mistral", "mixtral") and cfg.has("sliding_window"):
        lay.kinds, lay.sliding_window = ["sliding"] * layers, cfg.int("sliding_window")
    lay.type_70b = layers == 80 and heads != kv
    return lay


def qwen2(cfg: Config, kind: str, vb: float) -> Layout:
    """Qwen2 (biased q/k/v) and Qwen3 (per-head q/k norms) dense models."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout(kind)
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    bias = cfg.flag("attention_bias", False)
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qkv_bias=kind == "qwen2" or bias, o_bias=bias and kind != "qwen2",
             qk_norm=kind == "qwen3")
        norm(lay, b, "ffn_norm", h)
        ffn(lay, b, h, cfg.int("intermediate_size"))
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    lay.type_70b = kind == "qwen2" and layers == 80
    if cfg.flag("use_sliding_window", False):
        lay.notes.append("use_sliding_window: the KV cache counted per token for every layer (the window and "
                         "max_window_layers not modelled)")
    return lay


def qwen_moe(cfg: Config, kind: str, vb: float) -> Layout:
    """Qwen2-MoE, Qwen3-MoE: MoE blocks by decoder_sparse_step and mlp_only_layers, Qwen2-MoE's gated shared
    expert."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout({"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}[kind])
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    step, dense_only = cfg.int("decoder_sparse_step", 1), set(cfg.ints("mlp_only_layers"))
    experts, inner = cfg.int("num_experts"), cfg.int("moe_intermediate_size")
    shared = cfg.int("shared_expert_intermediate_size", 0, minimum=0) if kind == "qwen2_moe" else 0
    bias = cfg.flag("attention_bias", False)
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        if kind == "qwen2_moe":
            gqa(lay, b, h, heads, kv, hd, qkv_bias=cfg.flag("qkv_bias", True))
        else:
            gqa(lay, b, h, heads, kv, hd, qkv_bias=bias, o_bias=bias, qk_norm=True)
        norm(lay, b, "ffn_norm", h)
        if b not in dense_only and (b + 1) % step == 0:
            moe(lay, b, h, inner, experts, shared_inner=shared, shared_gate=bool(shared))
        else:
            ffn(lay, b, h, cfg.int("intermediate_size"))
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.experts, lay.top_k, lay.shared = experts, cfg.int("num_experts_per_tok"), 1 if shared else 0
    lay.kinds = ["full"] * layers
    return lay


def qwen_hybrid(cfg: Config, kind: str, vb: float) -> Layout:
    """Qwen3-Next, Qwen3.5 and Qwen3.6 (dense ``qwen3_5`` and MoE ``qwen3_5_moe``): Gated DeltaNet layers between
    gated full-attention ones (``layer_types``, else every ``full_attention_interval``-th full). A linear layer:
    attn_qkv (q, k, v projections), attn_gate (z), ssm_conv1d, ssm_dt, ssm_a, ssm_beta/ssm_alpha (Qwen3-Next:
    one ssm_ba), ssm_norm, ssm_out. Qwen3.5's ``mtp_num_hidden_layers`` MTP blocks: a full-attention layer and its
    FFN, plus eh_proj."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    arch = {"qwen3_next": "qwen3next", "qwen3_5": "qwen35", "qwen3_5_moe": "qwen35moe"}[kind]
    lay = Layout(arch)
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    interval = cfg.int("full_attention_interval", 4)
    types = cfg.layer_types("layer_types", layers, ("linear_attention", "full_attention"))
    types = types or ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    kh, vh = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
    kd, vd = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
    kernel = cfg.int("linear_conv_kernel_dim")
    key, value = kh * kd, vh * vd
    routed = kind != "qwen3_5"
    experts = cfg.int("num_experts") if routed else 0
    inner = cfg.int("moe_intermediate_size") if routed else cfg.int("intermediate_size")
    shared = cfg.int("shared_expert_intermediate_size", 0, minimum=0) if routed else 0
    bias = cfg.flag("attention_bias", False)

    def block(b: int, linear: bool, mtp: bool = False) -> None:
        norm(lay, b, "attn_norm", h, mtp=mtp)
        if linear:
            lay.add(f"blk.{b}.attn_qkv.weight", h, 2 * key + value)
            lay.add(f"blk.{b}.attn_gate.weight", h, value)
            lay.add(f"blk.{b}.ssm_conv1d.weight", kernel, 2 * key + value)
            lay.add(f"blk.{b}.ssm_dt.bias", vh)
            lay.add(f"blk.{b}.ssm_a", vh)
            if arch == "qwen3next":
                lay.add(f"blk.{b}.ssm_ba.weight", h, 2 * vh)
            else:
                lay.add(f"blk.{b}.ssm_beta.weight", h, vh)
                lay.add(f"blk.{b}.ssm_alpha.weight", h, vh)
            lay.add(f"blk.{b}.ssm_norm.weight", vd)
            lay.add(f"blk.{b}.ssm_out.weight", value, h)
        else:
            gqa(lay, b, h, heads, kv, hd, q_gate=True, qkv_bias=bias, o_bias=bias, qk_norm=True, mtp=mtp)
        norm(lay, b, "post_attention_norm", h, mtp=mtp)
        if routed:
            moe(lay, b, h, inner, experts, shared_inner=shared, shared_gate=bool(shared), mtp=mtp)
        else:
            ffn(lay, b, h, inner, mtp=mtp)

    for b, t in enumerate(types):
        block(b, t == "linear_attention")
    for b in range(layers, layers + (cfg.int("mtp_num_hidden_layers", 0, minimum=0) if kind != "qwen3_next" else 0)):
        block(b, False, mtp=True)
        nextn(lay, b, h)
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["linear" if t == "linear_attention" else "full" for t in types]
    lay.experts, lay.top_k, lay.shared = experts, cfg.int("num_experts_per_tok") if routed else 0, 1 if shared else 0
    lay.dims = {"linear_key_heads": kh, "linear_value_heads": vh, "linear_key_head_dim": kd,
                "linear_value_head_dim": vd, "linear_conv_kernel": kernel,
                "recurrent_state_bytes": delta_net_state_bytes(kh, vh, kd, vd, kernel)}
    return lay


def mixtral(cfg: Config, kind: str, vb: float) -> Layout:
    return llama(cfg, "mixtral", vb)


def deepseek(cfg: Config, kind: str, vb: float) -> Layout:
    """DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash (glm4_moe_lite): multi-head latent attention (attn_q or
    attn_q_a/attn_q_b, attn_kv_a_mqa, attn_k_b and attn_v_b: llama.cpp's split of kv_b, 3-D per head), the first
    ``first_k_dense_replace`` blocks dense, then routed experts every ``moe_layer_freq``-th block with
    ``n_shared_experts`` shared ones and (noaux_tc) a selection bias. The converter leaves DeepSeek's MTP layers
    out (GLM-4.7-Flash's it writes: not listed here)."""
    h, layers, heads, _, _, vocab = basics(cfg)
    lay = Layout("deepseek2")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    q_lora = cfg.int("q_lora_rank", 0, minimum=0)
    kv_lora, nope, rope, v_dim = (cfg.int("kv_lora_rank"), cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim"),
                                  cfg.int("v_head_dim"))
    experts, first = cfg.int("n_routed_experts"), cfg.int("first_k_dense_replace", 0, minimum=0)
    freq, inner = cfg.int("moe_layer_freq", 1), cfg.int("moe_intermediate_size")
    shared = cfg.int("n_shared_experts", 0, minimum=0)
    probs = cfg.raw.get("topk_method") == "noaux_tc" or kind == "glm4_moe_lite"
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        if q_lora:
            norm(lay, b, "attn_q_a_norm", q_lora)
            lay.add(f"blk.{b}.attn_q_a.weight", h, q_lora)
            lay.add(f"blk.{b}.attn_q_b.weight", q_lora, heads * (nope + rope))
        else:
            lay.add(f"blk.{b}.attn_q.weight", h, heads * (nope + rope))
        norm(lay, b, "attn_kv_a_norm", kv_lora)
        lay.add(f"blk.{b}.attn_kv_a_mqa.weight", h, kv_lora + rope)
        lay.add(f"blk.{b}.attn_k_b.weight", nope, kv_lora, heads)
        lay.add(f"blk.{b}.attn_v_b.weight", kv_lora, v_dim, heads)
        lay.add(f"blk.{b}.attn_output.weight", heads * v_dim, h)
        norm(lay, b, "ffn_norm", h)
        if b >= first and b % freq == 0:
            moe(lay, b, h, inner, experts, shared_inner=inner * shared, probs_bias=probs)
        else:
            ffn(lay, b, h, cfg.int("intermediate_size"))
    lay.heads, lay.kv_heads, lay.head_dim, lay.value_dim = heads, heads, nope + rope, v_dim
    lay.kv_per_layer = mla_kv_bytes(1, kv_lora, rope, vb)
    lay.kv_per_layer_f16 = mla_kv_bytes(1, kv_lora, rope, 2.0)
    lay.n_gqa = heads  # llama.cpp converts MLA to MQA: one KV head
    lay.kinds = ["mla"] * layers
    lay.experts, lay.top_k, lay.shared = experts, cfg.int("num_experts_per_tok"), shared
    lay.dims = {"kv_lora_rank": kv_lora, "q_lora_rank": q_lora, "qk_rope_head_dim": rope, "qk_nope_head_dim": nope,
                "v_head_dim": v_dim}
    if cfg.int("num_nextn_predict_layers", 0, minimum=0):
        lay.notes.append(f"{cfg.int('num_nextn_predict_layers', 0, minimum=0)} multi-token-prediction layer(s) not "
                         "counted (llama.cpp's converter leaves them out)")
    return lay


def glm4_moe(cfg: Config, kind: str, vb: float) -> Layout:
    """GLM-4.5/4.6 (Glm4MoeForCausalLM): biased q/k/v, optional q/k norms, post-attention norm, DeepSeek-style
    routed and shared experts after ``first_k_dense_replace`` dense blocks; its ``num_nextn_predict_layers`` MTP
    blocks are written to the GGUF."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("glm4moe")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    experts, first = cfg.int("n_routed_experts"), cfg.int("first_k_dense_replace", 0, minimum=0)
    inner, shared = cfg.int("moe_intermediate_size"), cfg.int("n_shared_experts", 0, minimum=0)
    n_mtp = cfg.int("num_nextn_predict_layers", 0, minimum=0)
    for b in range(layers + n_mtp):
        mtp = b >= layers
        norm(lay, b, "attn_norm", h, mtp=mtp)
        gqa(lay, b, h, heads, kv, hd, qkv_bias=cfg.flag("attention_bias", False),
             qk_norm=cfg.flag("use_qk_norm", False), mtp=mtp)
        norm(lay, b, "post_attention_norm", h, mtp=mtp)
        if b >= first:
            moe(lay, b, h, inner, experts, shared_inner=inner * shared, probs_bias=True, mtp=mtp)
        else:
            ffn(lay, b, h, cfg.int("intermediate_size"), mtp=mtp)
        if mtp:
            nextn(lay, b, h)
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    lay.experts, lay.top_k, lay.shared = experts, cfg.int("num_experts_per_tok"), shared
    return lay


def gpt_oss(cfg: Config, kind: str, vb: float) -> Layout:
    """gpt-oss: biased attention with per-head sinks, alternating sliding and full attention, biased experts stored
    by the checkpoint in MXFP4 (the converter keeps them), a biased router."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("gpt-oss")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    experts, inner = cfg.int("num_local_experts"), cfg.int("intermediate_size")
    types = cfg.layer_types("layer_types", layers, ("sliding_attention", "full_attention"))
    types = types or ["full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(layers)]
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qkv_bias=True, o_bias=True)
        lay.add(f"blk.{b}.attn_sinks.weight", heads)
        norm(lay, b, "post_attention_norm", h)
        moe(lay, b, h, inner, experts, router_bias=True, expert_bias=True, native="MXFP4")
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full" if t == "full_attention" else "sliding" for t in types]
    lay.sliding_window = cfg.int("sliding_window", 0, minimum=0)
    lay.experts = experts
    lay.top_k = cfg.int("experts_per_token", cfg.int("num_experts_per_tok", 0, minimum=0) or None)
    return lay


def gemma3(cfg: Config, kind: str, vb: float) -> Layout:
    """Gemma 3 (its text model): q/k norms, norms before and after attention and FFN, GELU-gated FFN, the output
    head tied to the embeddings; five sliding-window layers to one global (``sliding_window_pattern``, or
    ``layer_types``)."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("gemma3")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", True))
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qk_norm=True)
        norm(lay, b, "post_attention_norm", h)
        norm(lay, b, "ffn_norm", h)
        ffn(lay, b, h, cfg.int("intermediate_size"))
        norm(lay, b, "post_ffw_norm", h)
    gqa_dims(lay, heads, kv, hd, hd, vb)
    types = cfg.layer_types("layer_types", layers, ("sliding_attention", "full_attention"))
    pattern = cfg.int("sliding_window_pattern", 6)
    types = types or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    lay.kinds = ["full" if t == "full_attention" else "sliding" for t in types]
    lay.sliding_window = cfg.int("sliding_window", 0, minimum=0)
    return lay


def glm4(cfg: Config, kind: str, vb: float) -> Layout:
    """GLM-4-0414 / GLM-Z1 (Glm4ForCausalLM): biased q/k/v, norms after attention and after the FFN, gate and up
    fused in one ffn_up of twice the width."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("glm4")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qkv_bias=cfg.flag("attention_bias", True))
        norm(lay, b, "post_attention_norm", h)
        norm(lay, b, "ffn_norm", h)
        ffn(lay, b, h, cfg.int("intermediate_size"), fused_up=True)
        norm(lay, b, "post_ffw_norm", h)
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    return lay


_PHI_MSFT = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
             "n_head_kv": "num_key_value_heads", "n_inner": "intermediate_size"}


def phi2(cfg: Config, kind: str, vb: float) -> Layout:
    """Phi-2 (PhiForCausalLM): LayerNorms with biases, attention and a GELU FFN in parallel from one norm, biases
    everywhere, a biased output head. Also read in the 2023 ``phi-msft`` format of its config (n_embd, n_layer,
    n_head, n_inner: 4 x n_embd when null)."""
    if cfg.raw.get("model_type") == "phi-msft":
        for old, new in _PHI_MSFT.items():
            cfg.raw.setdefault(new, cfg.raw.get(old))
        if cfg.raw.get("intermediate_size") is None:
            cfg.raw["intermediate_size"] = 4 * cfg.int("n_embd")
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("phi2")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False), bias=True, norm_bias=True)
    for b in range(layers):
        norm(lay, b, "attn_norm", h, bias=True)
        gqa(lay, b, h, heads, kv, hd, qkv_bias=True, o_bias=True)
        ffn(lay, b, h, cfg.int("intermediate_size"), gated=False, bias=True)
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    return lay


def granitemoe(cfg: Config, kind: str, vb: float) -> Layout:
    return llama(cfg, "granitemoe", vb)


def hunyuan_moe(cfg: Config, kind: str, vb: float) -> Layout:
    """Hunyuan-A13B (hunyuan_v1_moe): q/k norms, routed experts and a shared expert of ``intermediate_size``
    (``moe_intermediate_size``, ``moe_topk``, ``num_shared_expert`` may be lists per layer of one value)."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("hunyuan-moe")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", True))
    experts = _first_int(cfg, "num_experts")
    inner = _first_int(cfg, "moe_intermediate_size")
    shared = _first_int(cfg, "num_shared_expert", 1)
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qk_norm=cfg.flag("use_qk_norm", True))
        norm(lay, b, "ffn_norm", h)
        moe(lay, b, h, inner, experts, shared_inner=cfg.int("intermediate_size"))  # the converter's n_ff_shexp
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    lay.experts, lay.top_k, lay.shared = experts, _first_int(cfg, "moe_topk"), shared
    return lay


def _first_int(cfg: Config, key: str, default: int | None = None) -> int:
    value = cfg.raw.get(key)
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if len(set(value)) > 1:
            raise ScenarioError(cfg.path, cfg.key(key), f"different values per layer {value!r}: not read here")
        return value[0]
    return cfg.int(key, default)


def llama4(cfg: Config, kind: str, vb: float) -> Layout:
    """Llama 4 (its text model): routed experts with one shared expert every ``interleave_moe_layer_step``-th block,
    dense FFNs of ``intermediate_size_mlp`` between; chunked local attention layers hold at most
    ``attention_chunk_size`` tokens (counted as sliding)."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("llama4")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    experts, step = cfg.int("num_local_experts"), cfg.int("interleave_moe_layer_step", 1)
    inner = cfg.int("intermediate_size")
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd)
        norm(lay, b, "ffn_norm", h)
        if (b + 1) % step == 0:
            moe(lay, b, h, inner, experts, shared_inner=inner)
        else:
            ffn(lay, b, h, cfg.int("intermediate_size_mlp"))
    gqa_dims(lay, heads, kv, hd, hd, vb)
    no_rope = cfg.ints("no_rope_layers")
    chunk = cfg.int("attention_chunk_size", 0, minimum=0)
    if no_rope and len(no_rope) == layers and chunk:  # 1: a RoPE layer with chunked (local) attention
        lay.kinds = ["sliding" if r else "full" for r in no_rope]
        lay.sliding_window = chunk
    else:
        lay.kinds = ["full"] * layers
    lay.experts, lay.top_k, lay.shared = experts, cfg.int("num_experts_per_tok"), 1
    return lay


def dots1(cfg: Config, kind: str, vb: float) -> Layout:
    """dots.llm1: q/k norms, ``first_k_dense_replace`` dense blocks, then routed experts with shared ones and a
    selection bias."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("dots1")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    experts, first = cfg.int("n_routed_experts"), cfg.int("first_k_dense_replace", 0, minimum=0)
    inner, shared = cfg.int("moe_intermediate_size"), cfg.int("n_shared_experts", 0, minimum=0)
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        gqa(lay, b, h, heads, kv, hd, qk_norm=True)
        norm(lay, b, "ffn_norm", h)
        if b >= first:
            moe(lay, b, h, inner, experts, shared_inner=inner * shared, probs_bias=True)
        else:
            ffn(lay, b, h, cfg.int("intermediate_size"))
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    lay.experts, lay.top_k, lay.shared = experts, cfg.int("num_experts_per_tok"), shared
    return lay


def phi3(cfg: Config, kind: str, vb: float) -> Layout:
    """Phi-3 / Phi-4 (Phi3ForCausalLM): q, k and v fused in attn_qkv, gate and up fused in ffn_up."""
    h, layers, heads, kv, hd, vocab = basics(cfg)
    lay = Layout("phi3")
    head(lay, vocab, h, cfg.flag("tie_word_embeddings", False))
    for b in range(layers):
        norm(lay, b, "attn_norm", h)
        lay.add(f"blk.{b}.attn_qkv.weight", h, heads * hd + 2 * kv * hd)
        lay.add(f"blk.{b}.attn_output.weight", heads * hd, h)
        norm(lay, b, "ffn_norm", h)
        ffn(lay, b, h, cfg.int("intermediate_size"), fused_up=True)
    gqa_dims(lay, heads, kv, hd, hd, vb)
    lay.kinds = ["full"] * layers
    if cfg.has("sliding_window"):
        lay.notes.append("sliding_window not modelled: the KV cache counted per token for every layer")
    return lay


# The defaults of the transformers configuration classes for the keys their published config.json files leave out
# (transformers 5.25.0, src/transformers/models/<model>/configuration_<model>.py, https://pypi.org/project/transformers/
# 5.25.0/), by the builder key.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
               "sliding_window": 4096, "sliding_window_pattern": 6},
}

# model_type -> (builder, transformers class, what the builder reads)
BUILDERS: dict[str, tuple[Any, str]] = {
    "llama": (llama, "LlamaForCausalLM"), "mistral": (llama, "MistralForCausalLM"),
    "mixtral": (mixtral, "MixtralForCausalLM"), "granitemoe": (granitemoe, "GraniteMoeForCausalLM"),
    "qwen2": (qwen2, "Qwen2ForCausalLM"), "qwen3": (qwen2, "Qwen3ForCausalLM"),
    "qwen2_moe": (qwen_moe, "Qwen2MoeForCausalLM"), "qwen3_moe": (qwen_moe, "Qwen3MoeForCausalLM"),
    "qwen3_next": (qwen_hybrid, "Qwen3NextForCausalLM"),
    "qwen3_5": (qwen_hybrid, "Qwen3_5ForConditionalGeneration"),
    "qwen3_5_moe": (qwen_hybrid, "Qwen3_5MoeForConditionalGeneration"),
    "deepseek_v2": (deepseek, "DeepseekV2ForCausalLM"), "deepseek_v3": (deepseek, "DeepseekV3ForCausalLM"),
    "kimi_k2": (deepseek, "DeepseekV3ForCausalLM"), "glm4_moe_lite": (deepseek, "Glm4MoeLiteForCausalLM"),
    "glm4_moe": (glm4_moe, "Glm4MoeForCausalLM"), "glm4": (glm4, "Glm4ForCausalLM"),
    "gpt_oss": (gpt_oss, "GptOssForCausalLM"), "gemma3": (gemma3, "Gemma3ForConditionalGeneration"),
    "gemma3_text": (gemma3, "Gemma3ForCausalLM"), "phi": (phi2, "PhiForCausalLM"),
    "phi3": (phi3, "Phi3ForCausalLM"), "hunyuan_v1_moe": (hunyuan_moe, "HunYuanMoEV1ForCausalLM"),
    "llama4": (llama4, "Llama4ForConditionalGeneration"), "dots1": (dots1, "Dots1ForCausalLM"),
}
# a text model's own model_type -> the builder's key
TEXT_TYPES = {"qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe", "gemma3_text": "gemma3",
              "llama4_text": "llama4", "mistral": "mistral", "mistral3": "mistral"}
# keys the reader needs to count an architecture it does not know (for the error message)
NEEDED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
          "intermediate_size", "vocab_size", "tie_word_embeddings", "and, for experts, num_experts / "
          "num_experts_per_tok / moe_intermediate_size")
