"""A model's geometry as the simulator needs it: every weight tensor as llama.cpp stores it (GGUF name, shape, type,
bytes), the layers and what kind each is, the experts, and the caches a token of context or a sequence costs.
The readers (config.json, GGUF) list the tensors; :func:`assemble` derives everything else from them.

What counts as what:

* Roles of the tensors (:data:`ROLES`): ``embedding`` (``token_embd``), ``output`` (the output head and its bias),
  ``output_norm``, and per block ``attention`` (its mixer: attention, MLA or linear attention, with all the block's
  norms), ``ffn`` (a dense FFN, the shared experts and the router) and ``experts`` (the routed experts, with their
  biases).
* ``expert_params``: ONE routed expert of one layer (gate, up and down projections: 3 x hidden x moe_intermediate,
  2 x for a non-gated FFN; gpt-oss adds the experts' biases): the expert tensors' elements / (experts x MoE layers).
* ``dense_params``: every parameter outside the routed experts, embeddings and the output head included (counted
  once when tied).
* ``active_params_per_token``: ``dense_params + top_k x expert_params x moe_layers``: the input embedding table is
  counted whole, as most model cards do (Qwen, Mistral); OpenAI's and DeepSeek's published active counts leave it
  out (``embedding_params`` says how much that is).
* Multi-token-prediction blocks (DeepSeek-V3's ``num_nextn_predict_layers``, GLM-4.5's, Qwen3.5's ``mtp.*``) are a
  draft head, not part of the model a token goes through: they are listed apart (``mtp_tensors``), outside every
  count and ``weights_bytes``; a GGUF that carries them is ``weights_bytes + mtp_bytes`` of tensors.
* ``kv_bytes_per_token``: KV cache per token of context over all layers that keep one: (K + V head widths) x
  kv_heads x bytes per value per full-attention layer; for MLA (DeepSeek-V2/V3) the compressed latent,
  (kv_lora_rank + qk_rope_head_dim) x bytes per layer. Linear-attention layers (Gated DeltaNet) keep a fixed state
  per sequence instead (``recurrent_state_bytes`` each); sliding-window layers add nothing per token either when the
  model also has full ones: they hold at most ``sliding_window`` tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sim.core.errors import ScenarioError
from sim.formats.quantities import PARAMETERS, SIZE_BYTES

MAX_LAYERS = 10_000  # blocks of a model (the deepest published ones: about 130); a larger count is a broken file
ROLES = ("embedding", "output", "output_norm", "attention", "ffn", "experts")
BLOCK = re.compile(r"^blk\.(\d+)\.")
EXPERTS = re.compile(r"^blk\.\d+\.ffn_\w+_exps\.")  # ffn_gate_exps.weight, ffn_gate_up_exps, ffn_down_exps.bias
FFN = re.compile(r"^blk\.\d+\.(ffn_(?!norm)|exp_probs_b)")  # dense FFN, shared experts, router and its bias


@dataclass(frozen=True)
class TensorSpec:
    """One weight tensor as llama.cpp stores it."""

    name: str  # GGUF name: token_embd.weight, blk.3.attn_q.weight, blk.3.ffn_down_exps.weight, output.weight, ...
    block: int  # the block it belongs to (-1: outside the blocks)
    role: str  # one of ROLES
    shape: tuple[int, ...]  # GGUF order: ne[0] (a row, the weights one dot product reads) first (elements)
    elements: int  # weights (parameters)
    qtype: str  # GGUF type name (Q4_K, F32, MXFP4, IQ4_KS, ...), or a checkpoint format (FP8_E4M3, GPTQ-4bit)
    bytes: float  # storage (bytes)


def role_of(name: str) -> str:
    """The role of a tensor by its GGUF name (see the module docstring)."""
    if name.startswith(("token_embd.", "per_layer_token_embd.")):
        return "embedding"
    if name.startswith("output_norm."):
        return "output_norm"
    if not BLOCK.match(name):
        return "output" if name.startswith("output.") else "attention"
    if EXPERTS.match(name):
        return "experts"
    if re.search(r"_norm(_\w+)?\.(weight|bias)$", name):
        return "attention"  # the block's norms, the FFN's included
    return "ffn" if FFN.match(name) else "attention"


def block_of(name: str) -> int:
    m = BLOCK.match(name)
    return int(m.group(1)) if m else -1


@dataclass(frozen=True)
class ModelGeometry:
    """What a model file says about the model, in the simulator's units (parameters, bytes, layers, tokens)."""

    architecture: str  # model_type of config.json (its text model's) or general.architecture of a GGUF
    layers: int  # transformer blocks (MTP blocks excluded)
    moe_layers: int  # blocks with routed experts
    hidden: int  # model width (elements)
    heads: int  # attention (query) heads of a full-attention layer
    kv_heads: int  # key/value heads of a full-attention layer (MLA: the query heads)
    head_dim: int  # width of one key head (MLA: qk_nope_head_dim + qk_rope_head_dim) (elements)
    vocab: int  # tokens in the vocabulary
    experts_per_layer: int  # routed experts per MoE block (0: dense model)
    top_k: int  # routed experts per token per MoE block (0: dense model)
    shared_experts: int  # experts every token goes through, per MoE block (count)
    expert_params: int  # parameters of ONE routed expert
    dense_params: int  # parameters outside the routed experts
    total_params: int  # all parameters (MTP blocks excluded)
    active_params_per_token: int  # dense_params + top_k x expert_params x moe_layers
    kv_bytes_per_token: float  # KV cache per token of context, all layers keeping one, at kv_type (bytes)
    bits_per_weight_experts: float  # of the routed experts: 8 x their bytes / their parameters (bits)
    bits_per_weight_dense: float  # of everything else: 8 x dense_bytes / dense_params (bits)
    expert_bytes: float  # ONE routed expert: the expert tensors' bytes / (experts x MoE layers) (bytes)
    dense_bytes: float  # every tensor outside the routed experts (bytes)
    weights_bytes: float  # every tensor: dense_bytes + expert_bytes x experts_per_layer x moe_layers (bytes)
    source: str  # the file read
    quant: str  # the quantization's name (Q4_K_M, BF16, MXFP4, ...)
    embedding_params: int = 0  # the input token embedding table (vocab x hidden), inside dense_params
    attention_layers: int = 0  # layers keeping a per-token KV cache (counted in kv_bytes_per_token)
    notes: tuple[str, ...] = field(default=())  # approximations made, one sentence each
    # bytes by role, from the tensors (their sum with the expert tensors is weights_bytes)
    embedding_bytes: float = 0.0  # the input token embedding table (bytes)
    output_bytes: float = 0.0  # the output head (when tied to the embeddings, llama.cpp's copy of them) and the final
    # norm (bytes)
    attention_bytes: float = 0.0  # attention mixers and block norms, all layers (bytes)
    ffn_bytes: float = 0.0  # dense FFNs, shared experts and routers, all layers (bytes)
    output_norm_bytes: float = 0.0  # the final norm, inside output_bytes (bytes)
    tensors: tuple[TensorSpec, ...] = ()  # every weight tensor, in llama.cpp's order (MTP blocks apart)
    mtp_tensors: tuple[TensorSpec, ...] = ()  # the multi-token-prediction blocks a file may carry (not counted)
    layer_kinds: tuple[str, ...] = ()  # per block: "full", "sliding", "linear" (Gated DeltaNet) or "mla"
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0: none)
    value_head_dim: int = 0  # width of one value head (MLA: v_head_dim) (elements)
    kv_bytes_per_layer_f16: float = 0.0  # K and V of one token in one full or MLA layer at f16 (bytes)
    linear_key_heads: int = 0  # Gated DeltaNet key heads of a linear-attention layer
    linear_value_heads: int = 0  # Gated DeltaNet value heads
    linear_key_head_dim: int = 0  # (elements)
    linear_value_head_dim: int = 0  # (elements)
    train_context: int = 0  # tokens of context the model was trained for (GGUF {arch}.context_length, config.json
    # max_position_embeddings): what llama.cpp's -c 0 allocates; 0: the file does not say
    linear_conv_kernel: int = 0  # causal convolution width (tokens)
    recurrent_state_bytes: float = 0.0  # one linear-attention layer's state per sequence at llama.cpp's f32 (bytes)
    kv_lora_rank: int = 0  # MLA: width of the compressed KV latent (elements)
    q_lora_rank: int = 0  # MLA: width of the compressed query (0: queries not compressed) (elements)
    qk_rope_head_dim: int = 0  # MLA: rotary part of a key head, shared by the heads (elements)
    qk_nope_head_dim: int = 0  # MLA: non-rotary part of a key head (elements)
    v_head_dim: int = 0  # MLA: width of a value head (elements)
    bytes_from: str = ""  # how the bytes were found: "gguf", "llama.cpp rules", "checkpoint", "scaled to file size"

    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.experts_per_layer > 0 and self.moe_layers > 0

    @property
    def mtp_bytes(self) -> float:
        """Bytes of the multi-token-prediction blocks (0 when the file or config has none)."""
        return float(sum(t.bytes for t in self.mtp_tensors))


def spec(name: str, shape: tuple[int, ...], qtype: str, nbytes: float) -> TensorSpec:
    """A TensorSpec with its block, role and element count from its name and shape."""
    elements = 1
    for n in shape:
        elements *= n
    return TensorSpec(name, block_of(name), role_of(name), tuple(shape), elements, qtype, float(nbytes))


def _sum(ts: Iterable[TensorSpec], attr: str) -> float:
    return sum(getattr(t, attr) for t in ts)


def assemble(*, tensors: list[TensorSpec], architecture: str, source: str, quant: str, layers: int, hidden: int,
             heads: int, kv_heads: int, head_dim: int, vocab: int, experts: int, top_k: int, shared_experts: int,
             kv_bytes_per_token: float, attention_layers: int, notes: list[str] | tuple[str, ...] = (),
             mtp_tensors: list[TensorSpec] | tuple[TensorSpec, ...] = (), **extra) -> ModelGeometry:
    """A geometry whose parameters and bytes follow from ``tensors``; ``extra``: the other ModelGeometry fields
    (layer_kinds, sliding_window, MLA and linear-attention dims, ...)."""
    _plausible(source, tensors)
    routed = [t for t in tensors if t.role == "experts"]
    dense = [t for t in tensors if t.role != "experts"]
    moe_blocks = sorted({t.block for t in routed})
    moe_layers = len(moe_blocks) if experts else 0
    if not moe_layers:
        experts, top_k, shared_experts = 0, 0, 0
    expert_elems, expert_bytes = int(_sum(routed, "elements")), _sum(routed, "bytes")
    dense_elems, dense_bytes = int(_sum(dense, "elements")), _sum(dense, "bytes")
    per_expert = expert_elems / (moe_layers * experts) if moe_layers else 0.0
    by_role = {r: _sum((t for t in tensors if t.role == r), "bytes") for r in ROLES}
    embedding = [t for t in tensors if t.name == "token_embd.weight"]
    # tied: llama.cpp copies the embedding for the output head
    output = (by_role["output"] or by_role["embedding"]) + by_role["output_norm"]
    all_notes = list(notes)
    if moe_layers and expert_elems % (moe_layers * experts):
        all_notes.append(f"expert tensors hold {expert_elems} parameters: not a whole number per expert of "
                         f"{moe_layers} layers x {experts} experts (averaged)")
    return ModelGeometry(
        architecture=architecture, layers=layers, moe_layers=moe_layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, vocab=vocab, experts_per_layer=experts, top_k=top_k,
        shared_experts=shared_experts, expert_params=round(per_expert), dense_params=dense_elems,
        total_params=dense_elems + expert_elems,
        active_params_per_token=dense_elems + round(top_k * per_expert * moe_layers),
        kv_bytes_per_token=kv_bytes_per_token,
        bits_per_weight_experts=8 * expert_bytes / expert_elems if expert_elems else 0.0,
        bits_per_weight_dense=8 * dense_bytes / dense_elems if dense_elems else 0.0,
        expert_bytes=expert_bytes / (moe_layers * experts) if moe_layers else 0.0, dense_bytes=dense_bytes,
        weights_bytes=dense_bytes + expert_bytes, source=source, quant=quant,
        embedding_params=embedding[0].elements if embedding else vocab * hidden, attention_layers=attention_layers,
        notes=tuple(all_notes), embedding_bytes=by_role["embedding"], output_bytes=output,
        attention_bytes=by_role["attention"], ffn_bytes=by_role["ffn"], output_norm_bytes=by_role["output_norm"],
        tensors=tuple(tensors), mtp_tensors=tuple(mtp_tensors), **extra)


def _plausible(source: str, tensors: list[TensorSpec]) -> None:
    """A one-line error naming ``source`` when the tensors add up to an impossible model: a parameter count or a size
    outside :data:`PARAMETERS` or :data:`SIZE_BYTES` (a width of 2**31 in a config.json, a GGUF header's garbage)."""
    for quantity, total in ((PARAMETERS, sum(t.elements for t in tensors)), (SIZE_BYTES, _sum(tensors, "bytes"))):
        problem = quantity.problem(total)
        if problem:
            raise ScenarioError(source, "", f"the tensors add up to {problem} (a key of the file out of its range?)")


def scaled(g: ModelGeometry, file_bytes: float, why: str) -> ModelGeometry:
    """``g`` with every tensor's bytes scaled so that they add up to ``file_bytes`` (a real file's size)."""
    from dataclasses import replace

    factor = file_bytes / g.weights_bytes if g.weights_bytes else 1.0
    ts = [replace(t, bytes=t.bytes * factor) for t in g.tensors]
    mtp = [replace(t, bytes=t.bytes * factor) for t in g.mtp_tensors]
    keep = {k: getattr(g, k) for k in ("layer_kinds", "sliding_window", "value_head_dim", "kv_bytes_per_layer_f16",
                                       "linear_key_heads", "linear_value_heads", "linear_key_head_dim",
                                       "linear_value_head_dim", "linear_conv_kernel", "recurrent_state_bytes",
                                       "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                       "v_head_dim", "train_context")}
    return assemble(tensors=ts, mtp_tensors=mtp, architecture=g.architecture, source=g.source, quant=g.quant,
                    layers=g.layers, hidden=g.hidden, heads=g.heads, kv_heads=g.kv_heads, head_dim=g.head_dim,
                    vocab=g.vocab, experts=g.experts_per_layer, top_k=g.top_k, shared_experts=g.shared_experts,
                    kv_bytes_per_token=g.kv_bytes_per_token, attention_layers=g.attention_layers,
                    notes=[*g.notes, why], bytes_from="scaled to file size", **keep)


def gqa_kv_bytes(layers: int, kv_heads: int, key_dim: int, value_dim: int, value_bytes: float) -> float:
    """KV cache per token of ``layers`` attention layers: (key + value width) x kv_heads x bytes (bytes)."""
    return layers * kv_heads * (key_dim + value_dim) * value_bytes


def mla_kv_bytes(layers: int, kv_lora_rank: int, rope_dim: int, value_bytes: float) -> float:
    """KV cache per token of ``layers`` MLA layers: the compressed latent plus the shared rope key (bytes)."""
    return layers * (kv_lora_rank + rope_dim) * value_bytes


def delta_net_state_bytes(key_heads: int, value_heads: int, key_dim: int, value_dim: int, conv_kernel: int) -> float:
    """One Gated DeltaNet layer's state per sequence as llama.cpp keeps it in f32 (4 bytes): the causal
    convolution's last ``conv_kernel - 1`` inputs of its q, k and v channels, ``(conv_kernel - 1) x (2 x key_heads x
    key_dim + value_heads x value_dim)``, and the delta rule's matrix per value head, ``value_heads x key_dim x
    value_dim`` (llama.cpp's ``n_embd_r``/``n_embd_s`` for qwen3next/qwen35) (bytes)."""
    conv = (conv_kernel - 1) * (2 * key_heads * key_dim + value_heads * value_dim)
    return 4.0 * (conv + value_heads * key_dim * value_dim)
