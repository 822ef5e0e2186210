"""The pieces the architectures of :mod:`sim.modelfiles.hf_layouts` are built of: config.json's values read with
one-line errors (:class:`Config`), a model's tensor list (:class:`Layout`), and the tensors of an attention block, an
FFN, a router with its experts. The tensors are those llama.cpp's converter
(``convert_hf_to_gguf.py``) writes and its loader (``src/models/<arch>.cpp``, ``create_tensor``) reads, by GGUF name
and shape (``ne[0]`` first: a 2-D weight is ``[inputs, outputs]``, a 3-D expert tensor ``[inputs, outputs,
experts]``). Read from ggml-org/llama.cpp at 0c1e57098bba43ac29e6e3b677cdceebdd22334f (the copy vendored in
llama-cpp-python 0.3.36).

Not listed: rotary frequency tables (``rope_freqs``, a few hundred bytes) and vision towers (a multimodal model's
text model only: its ``mmproj`` is a separate file). Each builder documents its architecture's departures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.core.errors import ScenarioError
from sim.modelfiles.geometry import MAX_LAYERS, gqa_kv_bytes
from sim.modelfiles.llama_quant import Slot

MAX_DIM = 2**31  # a width, count or vocabulary above this is a mistake
# counts of layers, each a block of tensors: at most MAX_LAYERS (a model of 2**31 blocks would be listed without end)
LAYER_COUNTS = ("num_hidden_layers", "mtp_num_hidden_layers", "num_nextn_predict_layers")


class Config:
    """config.json's values (a multimodal model's ``text_config`` merged over the top level), each read with an
    error naming the file and the key when it is missing or wrong."""

    def __init__(self, path: str, raw: dict[str, Any], prefix: str = "", defaults: dict[str, Any] | None = None):
        self.path, self.prefix = path, prefix
        given = {k: v for k, v in raw.items() if not (isinstance(k, str) and k.startswith("_"))}
        # a config.json leaves out what its transformers class defaults: those defaults under the given values
        defaults = defaults or {}
        self.raw = {**defaults, **{k: v for k, v in given.items() if v is not None or k not in defaults}}

    def key(self, key: str) -> str:
        return self.prefix + key

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """A whole number >= ``minimum``; ``default`` when absent or null (required when ``default`` is None)."""
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise ScenarioError(self.path, self.key(key), f"missing: expected a whole number >= {minimum}")
            return default
        top = MAX_LAYERS if key in LAYER_COUNTS else MAX_DIM
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= top:
            raise ScenarioError(self.path, self.key(key), f"expected a whole number from {minimum} to {top}, "
                                f"got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.raw.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(self.path, self.key(key), f"expected a number, got {value!r}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ScenarioError(self.path, self.key(key), f"expected true or false, got {value!r}")
        return value

    def ints(self, key: str) -> list[int]:
        value = self.raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ScenarioError(self.path, self.key(key), f"expected a list of layer numbers, got {value!r}")
        return value

    def layer_types(self, key: str, layers: int, allowed: tuple[str, ...]) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != layers or not all(v in allowed for v in value):
            raise ScenarioError(self.path, self.key(key), f"expected a list of {layers} layer types, each one of "
                                f"{', '.join(allowed)}")
        return value


@dataclass
class Layout:
    """One model's GGUF tensors and what the geometry needs beside them."""

    gguf_arch: str  # llama.cpp's architecture name (general.architecture)
    slots: list[Slot] = field(default_factory=list)
    mtp: list[Slot] = field(default_factory=list)  # multi-token-prediction blocks the converter writes
    kinds: list[str] = field(default_factory=list)  # per block: full, sliding, linear, mla
    experts: int = 0
    top_k: int = 0
    shared: int = 0  # shared experts per MoE block
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0  # key head width
    value_dim: int = 0  # value head width
    kv_per_layer: float = 0.0  # K and V of one token in one full or MLA layer (bytes, at the KV type)
    kv_per_layer_f16: float = 0.0
    sliding_window: int = 0
    n_gqa: int = 0  # llama.cpp's n_gqa() of layer 0
    type_70b: bool = False
    dims: dict[str, Any] = field(default_factory=dict)  # MLA and linear-attention fields of ModelGeometry
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, *shape: int, native: str = "", mtp: bool = False) -> None:
        (self.mtp if mtp else self.slots).append(Slot(name, tuple(shape), native))


# --- building blocks -----------------------------------------------------------------------------------------------

def head(lay: Layout, vocab: int, h: int, tied: bool, *, bias: bool = False, norm_bias: bool = False) -> None:
    """token_embd, output_norm and output (absent when tied to token_embd)."""
    lay.add("token_embd.weight", h, vocab)
    lay.add("output_norm.weight", h)
    if norm_bias:
        lay.add("output_norm.bias", h)
    if not tied:
        lay.add("output.weight", h, vocab)
        if bias:
            lay.add("output.bias", vocab)


def norm(lay: Layout, b: int, name: str, n: int, *, bias: bool = False, mtp: bool = False) -> None:
    lay.add(f"blk.{b}.{name}.weight", n, mtp=mtp)
    if bias:
        lay.add(f"blk.{b}.{name}.bias", n, mtp=mtp)


def gqa(lay: Layout, b: int, h: int, heads: int, kv: int, hd: int, vd: int | None = None, *, q_gate: bool = False,
         qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False, mtp: bool = False) -> None:
    """attn_q/k/v/output (a gated query doubles attn_q), their biases, per-head q/k norms."""
    vd = vd or hd
    q = heads * hd * (2 if q_gate else 1)
    for name, out in (("attn_q", q), ("attn_k", kv * hd), ("attn_v", kv * vd)):
        lay.add(f"blk.{b}.{name}.weight", h, out, mtp=mtp)
        if qkv_bias:
            lay.add(f"blk.{b}.{name}.bias", out, mtp=mtp)
    lay.add(f"blk.{b}.attn_output.weight", heads * vd, h, mtp=mtp)
    if o_bias:
        lay.add(f"blk.{b}.attn_output.bias", h, mtp=mtp)
    if qk_norm:
        lay.add(f"blk.{b}.attn_q_norm.weight", hd, mtp=mtp)
        lay.add(f"blk.{b}.attn_k_norm.weight", hd, mtp=mtp)


def ffn(lay: Layout, b: int, h: int, inner: int, *, gated: bool = True, bias: bool = False, fused_up: bool = False,
         mtp: bool = False) -> None:
    """A dense FFN: ffn_gate, ffn_up ([hidden, 2 x inner] when gate and up are fused), ffn_down."""
    parts = [("ffn_up", h, 2 * inner)] if fused_up else ([("ffn_gate", h, inner)] if gated else []) + [
        ("ffn_up", h, inner)]
    for name, i, o in [*parts, ("ffn_down", inner, h)]:
        lay.add(f"blk.{b}.{name}.weight", i, o, mtp=mtp)
        if bias:
            lay.add(f"blk.{b}.{name}.bias", o, mtp=mtp)


def moe(lay: Layout, b: int, h: int, inner: int, experts: int, *, shared_inner: int = 0, shared_gate: bool = False,
         probs_bias: bool = False, router_bias: bool = False, expert_bias: bool = False, native: str = "",
         mtp: bool = False) -> None:
    """Router (ffn_gate_inp, its bias, the selection bias exp_probs_b), the routed experts (gate, up, down, their
    biases) and the shared experts (ffn_*_shexp, with a gate ffn_gate_inp_shexp)."""
    lay.add(f"blk.{b}.ffn_gate_inp.weight", h, experts, mtp=mtp)
    if router_bias:
        lay.add(f"blk.{b}.ffn_gate_inp.bias", experts, mtp=mtp)
    if probs_bias:
        lay.add(f"blk.{b}.exp_probs_b.bias", experts, mtp=mtp)
    for name, i, o in (("ffn_gate_exps", h, inner), ("ffn_up_exps", h, inner), ("ffn_down_exps", inner, h)):
        lay.add(f"blk.{b}.{name}.weight", i, o, experts, native=native, mtp=mtp)
        if expert_bias:
            lay.add(f"blk.{b}.{name}.bias", o, experts, mtp=mtp)
    if shared_inner:
        for name, i, o in (("ffn_gate_shexp", h, shared_inner), ("ffn_up_shexp", h, shared_inner),
                           ("ffn_down_shexp", shared_inner, h)):
            lay.add(f"blk.{b}.{name}.weight", i, o, mtp=mtp)
        if shared_gate:
            lay.add(f"blk.{b}.ffn_gate_inp_shexp.weight", h, mtp=mtp)


def nextn(lay: Layout, b: int, h: int) -> None:
    """The MTP block's own tensors beside its decoder layer: eh_proj and its norms."""
    lay.add(f"blk.{b}.nextn.eh_proj.weight", 2 * h, h, mtp=True)
    for n in ("enorm", "hnorm", "shared_head_norm"):
        lay.add(f"blk.{b}.nextn.{n}.weight", h, mtp=True)


def gqa_dims(lay: Layout, heads: int, kv: int, hd: int, vd: int, vb: float) -> None:
    lay.heads, lay.kv_heads, lay.head_dim, lay.value_dim = heads, kv, hd, vd
    lay.kv_per_layer = gqa_kv_bytes(1, kv, hd, vd, vb)
    lay.kv_per_layer_f16 = gqa_kv_bytes(1, kv, hd, vd, 2.0)
    lay.n_gqa = heads // kv if kv else 0


def basics(cfg: Config) -> tuple[int, int, int, int, int, int]:
    h, layers = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv = cfg.int("num_key_value_heads", heads)
    if not cfg.has("head_dim") and h // heads < 1:  # the derived width of a head: hidden_size split by the heads
        raise ScenarioError(cfg.path, cfg.key("num_attention_heads"), f"{heads:,} heads of a hidden size of {h:,}: "
                            "expected at most one head per hidden unit (or a head_dim)")
    hd = cfg.int("head_dim", h // heads)
    return h, layers, heads, kv, hd, cfg.int("vocab_size")
