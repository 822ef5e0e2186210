"""A model's geometry as the simulator needs it: layers, experts, parameters by role, bytes at a quantization, KV
cache per token. The readers (config.json, GGUF) count; :func:`assemble` turns the counts into a
:class:`ModelGeometry`.

What counts as what:

* ``expert_params``: ONE routed expert of one layer (gate, up and down projections: 3 x hidden x moe_intermediate,
  2 x for a non-gated FFN; gpt-oss adds the experts' biases).
* ``dense_params``: every parameter outside the routed experts: attention (MLA projections for DeepSeek, the linear
  attention of Qwen3-Next's Gated DeltaNet layers), norms, routers, shared experts, the dense FFN blocks, the token
  embeddings and the output head (counted once when tied).
* ``active_params_per_token``: ``dense_params + top_k x expert_params x moe_layers``: the input embedding table is
  counted whole, as most model cards do (Qwen, Mistral); OpenAI's and DeepSeek's published active counts leave it
  out (``embedding_params`` says how much that is).
* Multi-token-prediction layers (DeepSeek-V3's ``num_nextn_predict_layers``, GLM-4.5's, Qwen3-Next's ``mtp.*``) are
  not counted: they are a draft head, not part of the model a token goes through.
* ``kv_bytes_per_token``: KV cache per token of context over all layers that keep one: 2 (K and V) x kv_heads x
  head_dim x bytes per value per full-attention layer; for MLA (DeepSeek-V2/V3) the compressed latent,
  (kv_lora_rank + qk_rope_head_dim) x bytes per layer. Layers without a per-token cache (Qwen3-Next's linear
  attention, whose state has a fixed size) add nothing; sliding-window layers (gpt-oss: every other layer, a window
  of 128 tokens) add nothing per token either: they hold at most a window's worth, given in ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.modelfiles.quant import Scheme


@dataclass(frozen=True)
class ModelGeometry:
    """What a model file says about the model, in the simulator's units (parameters, bytes, layers)."""

    architecture: str  # model_type of config.json or general.architecture of a GGUF, e.g. "qwen3_moe"
    layers: int  # transformer blocks (MTP layers excluded)
    moe_layers: int  # blocks with routed experts
    hidden: int  # model width
    heads: int  # attention (query) heads
    kv_heads: int  # key/value heads of a full-attention layer (MLA: the query heads)
    head_dim: int  # width of one attention head (MLA: qk_nope + qk_rope)
    vocab: int  # tokens in the vocabulary
    experts_per_layer: int  # routed experts per MoE block (0: dense model)
    top_k: int  # routed experts per token per MoE block (0: dense model)
    shared_experts: int  # experts every token goes through, per MoE block (count)
    expert_params: int  # parameters of ONE routed expert
    dense_params: int  # parameters outside the routed experts
    total_params: int  # all parameters (MTP layers excluded)
    active_params_per_token: int  # dense_params + top_k x expert_params x moe_layers
    kv_bytes_per_token: float  # KV cache per token of context, all layers (bytes)
    bits_per_weight_experts: float  # of the routed experts (bits)
    bits_per_weight_dense: float  # of the dense parameters, averaged (bits)
    expert_bytes: float  # ONE routed expert at that quantization (bytes)
    dense_bytes: float  # the dense parameters at that quantization (bytes)
    weights_bytes: float  # everything: dense_bytes + expert_bytes x experts_per_layer x moe_layers (bytes)
    source: str  # the file read
    quant: str  # the quantization's name (Q4_K_M, BF16, MXFP4, ...)
    embedding_params: int = 0  # the input token embedding table (vocab x hidden), inside dense_params
    attention_layers: int = 0  # layers keeping a per-token KV cache (counted in kv_bytes_per_token)
    notes: tuple[str, ...] = field(default=())  # approximations made, one sentence each
    # bytes by role, inside dense_bytes (0: not known, the engine spreads dense_bytes over the blocks)
    embedding_bytes: float = 0.0  # the input token embedding table (bytes)
    output_bytes: float = 0.0  # the output head; when tied to the embeddings, a copy of them (bytes)
    attention_bytes: float = 0.0  # attention mixers and block norms, all layers (bytes)
    ffn_bytes: float = 0.0  # dense FFNs, shared experts and routers, all layers (bytes)

    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.experts_per_layer > 0 and self.moe_layers > 0


@dataclass
class Counts:
    """Parameters by role as a config.json reader counts them (all layers summed, except ``expert``)."""

    embedding: int = 0  # input token embeddings (vocab x hidden)
    output_head: int = 0  # output projection (0 when tied to the embeddings)
    attention: int = 0  # attention or linear-attention mixers, with their own norms and biases
    norms: int = 0  # block norms and the final norm
    dense_ffn: int = 0  # FFN of the dense blocks
    routers: int = 0  # router weights, biases and shared-expert gates
    shared: int = 0  # shared experts
    expert: int = 0  # ONE routed expert

    def dense(self) -> int:
        """Every parameter outside the routed experts."""
        return (self.embedding + self.output_head + self.attention + self.norms + self.dense_ffn + self.routers
                + self.shared)


def assemble(*, architecture: str, source: str, counts: Counts, layers: int, moe_layers: int, hidden: int, heads: int,
             kv_heads: int, head_dim: int, vocab: int, experts: int, top_k: int, shared_experts: int,
             kv_bytes_per_token: float, attention_layers: int, quant: Scheme,
             notes: list[str] | tuple[str, ...] = ()) -> ModelGeometry:
    """A geometry from a config.json reader's counts and a quantization scheme (bits per weight by role)."""
    if experts == 0:
        moe_layers, top_k = 0, 0
    dense = counts.dense()
    embed = counts.embedding + counts.output_head
    dense_bytes = (dense - embed) * quant.dense_bits / 8 + embed * quant.embedding_bits / 8
    embedding_bytes = counts.embedding * quant.embedding_bits / 8
    output_bytes = (counts.output_head or counts.embedding) * quant.embedding_bits / 8
    expert_bytes = counts.expert * quant.experts_bits / 8
    routed = counts.expert * experts * moe_layers
    all_notes = [n for n in (*notes, quant.note) if n]
    return ModelGeometry(
        architecture=architecture, layers=layers, moe_layers=moe_layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, vocab=vocab, experts_per_layer=experts, top_k=top_k,
        shared_experts=shared_experts, expert_params=counts.expert if experts else 0, dense_params=dense,
        total_params=dense + routed, active_params_per_token=dense + top_k * counts.expert * moe_layers,
        kv_bytes_per_token=kv_bytes_per_token,
        bits_per_weight_experts=quant.experts_bits if experts else 0.0,
        bits_per_weight_dense=8 * dense_bytes / dense if dense else 0.0,
        expert_bytes=expert_bytes if experts else 0.0, dense_bytes=dense_bytes,
        weights_bytes=dense_bytes + expert_bytes * experts * moe_layers, source=source, quant=quant.name,
        embedding_params=counts.embedding, attention_layers=attention_layers, notes=tuple(all_notes),
        embedding_bytes=embedding_bytes, output_bytes=output_bytes,
        attention_bytes=(counts.attention + counts.norms) * quant.dense_bits / 8,
        ffn_bytes=(counts.dense_ffn + counts.shared + counts.routers) * quant.dense_bits / 8)


def gqa_kv_bytes(layers: int, kv_heads: int, key_dim: int, value_dim: int, value_bytes: float) -> float:
    """KV cache per token of ``layers`` attention layers: (key + value width) x kv_heads x bytes (bytes)."""
    return layers * kv_heads * (key_dim + value_dim) * value_bytes


def mla_kv_bytes(layers: int, kv_lora_rank: int, rope_dim: int, value_bytes: float) -> float:
    """KV cache per token of ``layers`` MLA layers: the compressed latent plus the shared rope key (bytes)."""
    return layers * (kv_lora_rank + rope_dim) * value_bytes
