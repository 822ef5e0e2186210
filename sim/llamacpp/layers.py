"""What each kind of block's mixer costs under llama.cpp: its cache, the bytes it reads and the arithmetic it does at
a context depth, with flash attention on or off.

Kinds (``ModelGeometry.layer_kinds``, from the model's own config):

- ``full``: grouped-query attention. A token's cache is ``kv_heads x (head_dim_k x bytes_K + head_dim_v x bytes_V)``
  per layer. A decode step reads the whole cache once per KV head with flash attention; without it, llama.cpp's
  matrix-vector products broadcast each KV head to its query heads, so K and V are read once per *query* head
  (``heads / kv_heads`` times as much), and the scores (``heads x context`` floats) are written, soft-maxed and read.
  Arithmetic: ``2 x heads x (head_dim_k + head_dim_v)`` FLOPs per query and context token.
- ``sliding``: the same over at most ``sliding_window`` cached tokens (gpt-oss, Gemma, Mistral's windowed layers);
  llama.cpp keeps ``window x sequences + ubatch`` cells for them.
- ``mla``: DeepSeek's multi-head latent attention as llama.cpp runs it: the cache holds the compressed latent and the
  shared rope key (``kv_lora_rank + qk_rope_head_dim`` values per token, V a view of it); queries are absorbed into
  the latent space, so each of ``heads`` query heads attends over ``kv_lora_rank + rope`` dimensions and gathers
  ``kv_lora_rank``: one "KV head" shared by every query head (without flash attention, read once per query head).
- ``linear``: Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6): no per-token cache; a per-sequence state (the delta rule's
  ``value_heads x key_dim x value_dim`` matrix and the causal convolution's last ``kernel - 1`` inputs, f32) read and
  written each step, ``~6 x value_heads x key_dim x value_dim`` FLOPs per token, whatever the depth.

Prompts attend causally: a ubatch of ``u`` tokens after ``c`` cached ones computes scores against ``c + u`` cells
(llama.cpp masks, it does not skip, the future ones), so the arithmetic is ``u x (c + u)`` per head pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.modelfiles.geometry import ModelGeometry

F32 = 4.0  # bytes of a float32 score or state value
SCORE_PASSES = 4.0  # without flash attention: the scores are written, read and written by the soft-max, read again
STATE_FLOPS_PER_ELEMENT = 6.0  # Gated DeltaNet: decay, the delta (a matrix-vector product), the rank-1 update, output
KV_PAD = 256  # llama.cpp pads the KV cells it allocates to a multiple of 256


@dataclass(frozen=True)
class Mixer:
    """One block's mixer in the quantities its costs need."""

    kind: str  # full | sliding | mla | linear
    heads: int  # query heads
    kv_heads: int  # heads the cache holds (MLA: 1, the shared latent)
    key_dim: int  # width a query head's scores are taken over (MLA: kv_lora_rank + rope)
    value_dim: int  # width a head gathers (MLA: kv_lora_rank)
    cache_k: int  # values of K cached per token (all KV heads)
    cache_v: int  # values of V cached per token (0: V is a view of K, MLA)
    window: int = 0  # sliding window (tokens; 0: none)
    state_bytes: float = 0.0  # linear attention: per-sequence state (bytes)
    state_elements: float = 0.0  # linear attention: elements of the delta-rule state (for its arithmetic)

    def cell_bytes(self, k_bytes: float, v_bytes: float) -> float:
        """One cached token of this layer at the cache types' bytes per value (bytes)."""
        return self.cache_k * k_bytes + self.cache_v * v_bytes

    def attended(self, context: float) -> float:
        """Cached tokens a query attends to at ``context`` (the window caps it)."""
        return min(context, self.window) if self.window else context

    def cells(self, ctx_size: int, ubatch: int, sequences: int = 1) -> int:
        """KV cells llama.cpp allocates for this layer (0 for linear attention)."""
        if self.kind == "linear":
            return 0
        cells = ctx_size
        if self.window:
            cells = min(ctx_size, self.window * sequences + ubatch)
        return -(-cells // KV_PAD) * KV_PAD

    def decode(self, context: float, batch: int, flash: bool, k_bytes: float, v_bytes: float
               ) -> tuple[float, float, float]:
        """One decode step of ``batch`` sequences at ``context`` cached tokens each: (cache bytes read, FLOPs, score
        bytes moved)."""
        if self.kind == "linear":
            return 2.0 * self.state_bytes * batch, STATE_FLOPS_PER_ELEMENT * self.state_elements * batch, 0.0
        n = self.attended(context)
        reads = n * self.cell_bytes(k_bytes, v_bytes) * batch
        if not flash:
            reads *= self.heads / max(self.kv_heads, 1)
        flops = 2.0 * self.heads * (self.key_dim + self.value_dim) * n * batch
        scores = 0.0 if flash else SCORE_PASSES * F32 * self.heads * n * batch
        return reads, flops, scores

    def prompt(self, tokens: int, context: float, flash: bool, k_bytes: float, v_bytes: float
               ) -> tuple[float, float, float]:
        """One ubatch of ``tokens`` after ``context`` cached tokens: (cache bytes read, FLOPs, score bytes moved)."""
        if self.kind == "linear":
            return (2.0 * self.state_bytes, STATE_FLOPS_PER_ELEMENT * self.state_elements * tokens, 0.0)
        n = self.attended(context) + tokens
        reads = n * self.cell_bytes(k_bytes, v_bytes)
        flops = 2.0 * self.heads * (self.key_dim + self.value_dim) * tokens * n
        scores = 0.0 if flash else SCORE_PASSES * F32 * self.heads * tokens * n
        return reads, flops, scores


def mixers(g: ModelGeometry) -> tuple[Mixer, ...]:
    """Every block's mixer, from the geometry's layer kinds (a geometry without them: every block full attention,
    its KV per token spread over the blocks)."""
    kinds = tuple(g.layer_kinds or ()) or ("full",) * g.layers
    window = int(g.sliding_window or 0)
    hd_k = int(g.head_dim)
    hd_v = int(g.value_head_dim or g.head_dim)
    out = []
    for kind in kinds:
        if kind == "mla":
            lora, rope = int(g.kv_lora_rank), int(g.qk_rope_head_dim)
            out.append(Mixer("mla", g.heads, 1, lora + rope, lora, lora + rope, 0))
        elif kind == "linear":
            elements = g.linear_value_heads * g.linear_key_head_dim * g.linear_value_head_dim
            out.append(Mixer("linear", g.heads, 0, 0, 0, 0, 0, state_bytes=float(g.recurrent_state_bytes),
                             state_elements=float(elements)))
        else:
            out.append(Mixer(kind, g.heads, g.kv_heads, hd_k, hd_v, g.kv_heads * hd_k, g.kv_heads * hd_v,
                             window if kind == "sliding" else 0))
    return tuple(out)
