"""How many tensors a checkpoint holds: what a loader's per-tensor work is multiplied by.

A Hugging Face safetensors checkpoint stores every projection, norm and bias as its own tensor, and every routed
expert's projections separately (Qwen3-30B-A3B: 48 layers x (4 attention projections + 2 q/k norms + 2 block norms
+ 1 router + 128 experts x 3) + embeddings, final norm and head = 18,867, the count vLLM PR #52462 reports); an FP8
checkpoint with block scales (DeepSeek-V3/R1) adds one ``weight_scale_inv`` per quantized linear weight. A GGUF file
stores a layer's routed experts as three merged tensors (``ffn_gate_exps``, ``ffn_up_exps``, ``ffn_down_exps``), so
the same Qwen3-30B-A3B holds 48 x 12 + 3 = 579 tensors: the GGUF count is the length of the tensor list
:mod:`sim.modelfiles` builds as llama.cpp's converter writes it.

:func:`checkpoint_tensors` counts a safetensors checkpoint from a model's geometry: layers, routed and shared
experts, the architecture's tensors per block. Counts are exact for the layouts named in :data:`ATTENTION`; MTP
(draft) layers a checkpoint may carry are left out unless ``extra_layers`` adds them.
"""

from __future__ import annotations

from sim.modelfiles import ModelGeometry

LAYOUTS = ("safetensors", "gguf")
# tensors of one block's attention mixer in a safetensors checkpoint, with its own norms and biases; the block's two
# norms (input and post-attention; gemma3: four) are counted by NORMS
ATTENTION = {
    "llama": 4,  # q, k, v, o
    "mistral": 4,
    "mixtral": 4,
    "qwen2": 7,  # q, k, v, o and the q, k, v biases
    "qwen2_moe": 7,
    "qwen3": 6,  # q, k, v, o, q_norm, k_norm
    "qwen3_moe": 6,
    "gemma3": 6,  # q, k, v, o, q_norm, k_norm
    "deepseek_v3": 7,  # q_a, q_a_layernorm, q_b, kv_a_proj_with_mqa, kv_a_layernorm, kv_b, o
    "deepseek_v2": 7,
}
NORMS = {"gemma3": 4}  # blocks with pre/post feed-forward norms as well; 2 otherwise
ROUTER = {"deepseek_v3": 2, "deepseek_v2": 1}  # the gate (and DeepSeek-V3's e_score_correction_bias); 1 otherwise
SCALED = {"deepseek_v3": {"attention": 5}}  # FP8 block scales: one per linear weight (5 of the 7 attention tensors)


def checkpoint_tensors(g: ModelGeometry, layout: str = "safetensors", scales: bool = False, tied: bool = False,
                       extra_layers: int = 0) -> int:
    """Tensors in ``g``'s checkpoint in ``layout``. gguf: the model's GGUF tensor list (``g.tensors``, a layer's
    experts merged into three); safetensors: one per expert projection, where ``scales`` adds one block-scale tensor
    per quantized linear weight (FP8), ``tied`` leaves out the output head (the embedding table serves) and
    ``extra_layers`` adds MoE blocks the file holds beyond ``g.layers`` (an MTP layer). Raises ValueError for an
    architecture it does not know."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout == "gguf":
        return len(g.tensors)
    if g.architecture not in ATTENTION:
        raise ValueError(f"{g.source}: architecture {g.architecture!r}: tensors per block known for "
                         f"{', '.join(sorted(ATTENTION))}")
    arch = g.architecture
    attention = ATTENTION[arch]
    if scales:
        attention += SCALED.get(arch, {}).get("attention", 4)  # q, k, v, o scales otherwise
    per_scaled = 2 if scales else 1  # a quantized linear weight and its scale
    norms = NORMS.get(arch, 2)
    routed = 3 * g.experts_per_layer * per_scaled
    shared = 3 * g.shared_experts * per_scaled
    moe_block = attention + norms + ROUTER.get(arch, 1) + routed + shared
    dense_block = attention + norms + 3 * per_scaled
    moe_layers = g.moe_layers if g.is_moe else 0
    extras = 2 if tied else 3  # embeddings, final norm (and the output head)
    return moe_layers * moe_block + (g.layers - moe_layers) * dense_block + extra_layers * moe_block + extras
