"""The GGUF type of every tensor of a model quantized to a file type (ftype), decided as llama.cpp decides it.

A file type (``Q4_K_M``, ``IQ4_XS``, ``MXFP4_MOE``...) is a recipe, not one type. ``llama-quantize`` walks the
model's tensors in its loader's order (the tensors outside the blocks first, then block by block, by name within a
block) and gives each the ftype's *default type*, except where ``llama_tensor_get_type`` says otherwise. This module
implements the same decisions, read from ggml-org/llama.cpp ``src/llama-quant.cpp`` (``tensor_allows_quantization``,
``tensor_get_category``, ``llama_tensor_get_type_impl``, ``tensor_type_fallback``, ``llama_ftype_get_default_type``;
https://github.com/ggml-org/llama.cpp/blob/007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp, the same
rules in the copy vendored at 0c1e57098bba43ac29e6e3b677cdceebdd22334f). Among them:

* tensors of one dimension, norms, the expert router (``ffn_gate_inp``), convolution kernels (``ssm_conv1d``) and
  biases are not quantized: they stay as the converter wrote them (F32);
* ``output.weight`` (and the token embedding when the output is tied to it) gets Q6_K (Q5_K for the 1-2 bit IQ
  mixes, Q8_0 under MXFP4_MOE or when its rows do not hold whole blocks);
* the ``_M``/``_L`` mixes raise ``attn_v`` (and ``attn_qkv``, ``attn_kv_b``: the value-like tensors) and
  ``ffn_down`` in chosen layers (``use_more_bits``: the first and last eighth, and every third layer between);
* models with 8 experts (Mixtral) get ``attn_v``/``attn_k`` at Q8_0, ``attn_output`` at Q5_K in the low mixes;
  Llama-type 70B models get ``attn_v`` at Q5_K where it would be Q3_K/Q4_K;
* MXFP4_MOE: every three-dimensional tensor (the routed experts) MXFP4, every other quantized tensor Q8_0;
* a tensor whose rows do not hold a whole number of the type's blocks falls back (Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0, the 256-weight IQ types -> IQ4_NL, Q2_K/Q3_K -> Q4_0; F16 when even that does not fit).

``imatrix``: whether an importance matrix was given (``i1-`` files, bartowski's and unsloth's quants): it changes
the IQ3_XXS, IQ4_NL/IQ4_XS and Q4_0/Q5_0 choices for ``ffn_down`` and ``attn_v``.

ik_llama.cpp's own file types (IQ2_K ... IQ6_K, IQ4_KS, IQ2_KS, the ``_R4``/``_R8`` repacks, ...) follow its own,
longer rule set (https://github.com/ikawrakow/ik_llama.cpp/blob/8337e4cd3861406fc04e0854b1409cd1b027fbc9/src/
llama-quantize.cpp). Implemented from it: the default type of each ik ftype, the output head's and token
embedding's types, and the fallbacks; its per-layer raises of ``attn_v``/``ffn_down`` are not, and a note says so.

Float file types (F32, F16, BF16) are what ``convert_hf_to_gguf.py --outtype`` writes: every weight matrix at that
type, the tensors above in F32, and a checkpoint's already quantized tensors (gpt-oss's MXFP4 experts) as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sim.modelfiles.ggml_types import TYPES, fits

# llama.cpp's file types and their default type (llama_ftype_get_default_type)
FTYPES: dict[str, str] = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1",
    "Q8_0": "Q8_0", "Q1_0": "Q1_0", "MXFP4_MOE": "MXFP4", "NVFP4": "NVFP4", "Q2_K_S": "Q2_K", "Q2_K": "Q2_K",
    "IQ3_XS": "IQ3_S", "Q3_K_S": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K", "Q4_K_S": "Q4_K", "Q4_K_M": "Q4_K",
    "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K", "TQ1_0": "TQ1_0", "TQ2_0": "TQ2_0", "IQ2_XXS": "IQ2_XXS",
    "IQ2_XS": "IQ2_XS", "IQ2_S": "IQ2_XS", "IQ2_M": "IQ2_S", "IQ3_XXS": "IQ3_XXS", "IQ1_S": "IQ1_S",
    "IQ1_M": "IQ1_M", "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS", "IQ3_S": "IQ3_S", "IQ3_M": "IQ3_S",
}
# ik_llama.cpp's own file types and their default type (its llama_model_quantize_internal switch)
IK_FTYPES: dict[str, str] = {
    "Q6_0": "Q6_0", "Q8_KV": "Q8_KV", "IQ2_KS": "IQ2_KS", "IQ2_KL": "IQ2_KL", "IQ2_K": "IQ2_K", "IQ3_KS": "IQ3_KS",
    "IQ3_K": "IQ3_K", "IQ3_KL": "IQ3_K", "IQ4_KSS": "IQ4_KSS", "IQ4_KS": "IQ4_KS", "IQ4_K": "IQ4_K",
    "IQ5_KS": "IQ5_KS", "IQ5_K": "IQ5_K", "IQ6_K": "IQ6_K", "IQ1_KT": "IQ1_KT", "IQ2_KT": "IQ2_KT",
    "IQ3_KT": "IQ3_KT", "IQ4_KT": "IQ4_KT", "IQ1_BN": "IQ1_BN", "IQ2_BN": "IQ2_BN", "IQ2_BN_R4": "IQ2_BN_R4",
    "Q2_K_R4": "Q2_K_R4", "Q3_K_R4": "Q3_K_R4", "Q4_K_R4": "Q4_K_R4", "Q5_K_R4": "Q5_K_R4", "Q6_K_R4": "Q6_K_R4",
    "Q8_K_R8": "Q8_K_R8", "Q8_KV_R8": "Q8_KV_R8", "IQ2_XXS_R4": "IQ2_XXS_R4", "IQ2_XS_R4": "IQ2_XS_R4",
    "IQ2_M_R4": "IQ2_S_R4", "IQ3_XXS_R4": "IQ3_XXS_R4", "IQ1_S_R4": "IQ1_S_R4", "IQ1_M_R4": "IQ1_M_R4",
    "IQ4_NL_R4": "IQ4_NL_R4", "IQ4_XS_R8": "IQ4_XS_R8", "Q4_0_R8": "Q4_0_R8", "Q5_0_R4": "Q5_0_R4",
    "Q6_0_R4": "Q6_0_R4", "Q8_0_R8": "Q8_0_R8", "MXFP4": "MXFP4", "MXFP4_R8": "MXFP4_R8", "IQ4_KS_R4": "IQ4_KS_R4",
    "IQ5_KS_R4": "IQ5_KS_R4", "IQ2_K_R4": "IQ2_K_R4", "IQ3_K_R4": "IQ3_K_R4", "IQ4_K_R4": "IQ4_K_R4",
    "IQ5_K_R4": "IQ5_K_R4", "IQ3_S_R4": "IQ3_S_R4", "BF16_R16": "BF16_R16",
}
FLOAT_FTYPES = ("F32", "F16", "BF16")
# types llama.cpp refuses to make without an importance matrix (tensor_requires_imatrix)
NEEDS_IMATRIX = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ1_S", "IQ1_M")


@dataclass(frozen=True)
class Recipe:
    """A quantization as ``llama-quantize`` is asked for it."""

    ftype: str  # the file type's name (Q4_K_M, IQ4_XS, MXFP4_MOE, BF16, an ik_llama.cpp type, ...)
    default: str  # its default tensor type
    imatrix: bool = False  # an importance matrix was given
    pure: bool = False  # every quantized tensor at the default type (a type name given, or --pure)
    ik: bool = False  # an ik_llama.cpp file type
    token_embedding_type: str | None = None  # --token-embedding-type
    output_tensor_type: str | None = None  # --output-tensor-type


@dataclass(frozen=True)
class Target:
    """What llama_tensor_get_type reads of the model besides the tensors."""

    arch: str  # GGUF general.architecture (llama, qwen3moe, deepseek2, falcon, ...)
    n_expert: int  # routed experts per layer (0: dense)
    n_gqa: int  # query heads per KV head of layer 0 (n_head / n_head_kv, integer; 0 when layer 0 has no KV heads)
    n_layer_all: int  # blocks in the file, MTP blocks included
    type_70b: bool = False  # llama.cpp's LLM_TYPE_70B (Llama with 80 blocks and grouped KV heads, Qwen2 with 80)


@dataclass(frozen=True)
class Slot:
    """A tensor as the converter writes it: GGUF name and shape (``ne[0]`` first), and its checkpoint's own format
    when that is already quantized (``MXFP4`` for gpt-oss's experts; empty: floats)."""

    name: str
    shape: tuple[int, ...]
    native: str = ""


def recipe(name: str) -> Recipe:
    """The recipe a quantization name stands for. ``i1-`` in front: with an importance matrix. A plain type name
    that is no file type (``Q4_K``, ``Q5_K``) is every quantized tensor at that type. Raises ValueError naming what
    is known."""
    raw = name.strip()
    key = raw.upper().replace("-", "_")
    imatrix = key.startswith("I1_")
    key = key[3:] if imatrix else key
    key = {"FP16": "F16", "FP32": "F32", "FLOAT16": "F16", "BFLOAT16": "BF16", "FLOAT32": "F32"}.get(key, key)
    if key in FTYPES:
        return Recipe(key, FTYPES[key], imatrix=imatrix)
    if key in IK_FTYPES:
        return Recipe(key, IK_FTYPES[key], imatrix=imatrix, ik=True)
    t = TYPES.get(key)
    if t is not None and t.quantized and t.name not in ("Q8_1", "Q8_K"):
        return Recipe(key, key, imatrix=imatrix, pure=True, ik=t.ik)
    raise ValueError(f"unknown quantization '{raw}': expected a llama.cpp file type ({', '.join(FTYPES)}), an "
                     f"ik_llama.cpp one ({', '.join(IK_FTYPES)}) or a GGUF type name; an i1- prefix means an "
                     "importance matrix")


# --- what llama.cpp does per tensor --------------------------------------------------------------------------------

_NOT_QUANTIZED = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
                  "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
                  "indexer.q_proj.weight", "attn_rel_b.weight", ".position_embd", ".rel_pos", ".patch_embd",
                  "time_mix_")


def allows_quantization(s: Slot) -> bool:
    """llama.cpp's ``tensor_allows_quantization`` (its defaults: the output head is quantized)."""
    dims = len(s.shape) - next((i for i, n in enumerate(reversed(s.shape)) if n > 1), len(s.shape))
    if dims < 2 or not s.name.endswith("weight"):
        return False
    if s.name in ("position_embd.weight", "token_types.weight"):
        return False
    return not any(part in s.name for part in _NOT_QUANTIZED)


def converter_keeps_f32(s: Slot) -> bool:
    """convert_hf_to_gguf.py writes these in F32 whatever ``--outtype`` says: one-dimensional tensors, norms, the
    router, positional and type embeddings, convolution kernels, anything not named ``.weight`` (biases)."""
    if len(s.shape) <= 1 or s.name.endswith("_norm.weight") or not s.name.endswith(".weight"):
        return True
    return any(part in s.name for part in ("ffn_gate_inp", "ssm_conv1d", "shortconv", "position_embd",
                                           "token_types"))


def converted_type(s: Slot, outtype: str) -> str:
    """The type convert_hf_to_gguf.py gives ``s`` with ``--outtype outtype``: F32 (see above), the checkpoint's
    own quantized format, else ``outtype``."""
    if converter_keeps_f32(s):
        return "F32"
    return s.native or outtype


def _category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"), ("attn_v.weight", "attn_v"),
                     ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"),
                     ("attn_output.weight", "attn_output"), ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"),
                     ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


_VALUE_LIKE = ("attn_v", "attn_qkv", "attn_kv_b")
_FALLBACK = {**dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"),
             **dict.fromkeys(("Q2_0", "Q2_K", "Q3_K", "TQ1_0", "TQ2_0"), "Q4_0"),
             "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
_IK_FALLBACK = {
    **dict.fromkeys(("IQ2_XXS", "IQ2_XXS_R4", "IQ2_XS", "IQ2_XS_R4", "IQ2_KS", "IQ2_S", "IQ2_S_R4", "IQ3_XXS",
                     "IQ3_XXS_R4", "IQ3_S", "IQ3_S_R4", "IQ1_S", "IQ1_M", "Q2_K", "Q2_K_R4", "Q3_K", "Q3_K_R4",
                     "IQ2_K", "IQ2_K_R4", "IQ2_KL", "IQ3_KS", "IQ3_K", "IQ3_K_R4", "IQ4_KSS", "IQ4_KS", "IQ4_KS_R4",
                     "IQ4_XS_R8", "IQ1_KT", "IQ2_KT", "IQ3_KT", "IQ4_KT", "IQ4_XS"), "IQ4_NL"),
    **dict.fromkeys(("IQ4_K", "IQ4_K_R4", "Q4_K_R4", "IQ5_KS", "IQ5_KS_R4", "Q4_K"), "Q5_0"),
    **dict.fromkeys(("IQ5_K", "IQ5_K_R4", "Q5_K_R4", "Q5_K"), "Q6_0"),
    **dict.fromkeys(("IQ6_K", "Q6_K_R4", "Q8_K_R8", "Q6_K"), "Q8_0"),
}
# ik_llama.cpp: the token embedding cannot be row-interleaved; it takes the base type (same bytes)
_IK_BASE = {"Q4_0_R8": "Q4_0", "Q5_0_R4": "Q5_0", "Q6_0_R4": "Q6_0", "Q8_0_R8": "Q8_0", "Q2_K_R4": "Q2_K",
            "Q3_K_R4": "Q3_K", "Q4_K_R4": "Q4_K", "Q5_K_R4": "Q5_K", "Q6_K_R4": "Q6_K", "IQ2_XXS_R4": "IQ2_XXS",
            "IQ2_XS_R4": "IQ2_XS", "IQ3_XXS_R4": "IQ3_XXS", "IQ1_S_R4": "IQ1_S", "IQ1_M_R4": "IQ1_M",
            "IQ4_NL_R4": "IQ4_NL", "IQ3_S_R4": "IQ3_S", "IQ2_S_R4": "IQ2_S", "IQ4_XS_R8": "IQ4_XS",
            "IQ2_K_R4": "IQ2_K", "IQ3_K_R4": "IQ3_K", "IQ4_K_R4": "IQ4_K", "IQ5_K_R4": "IQ5_K",
            "IQ4_KS_R4": "IQ4_KS", "IQ5_KS_R4": "IQ5_KS", "MXFP4_R8": "MXFP4", "Q8_KV_R8": "Q8_KV",
            "Q8_K_R8": "Q8_0", "IQ2_BN_R4": "IQ2_BN"}
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def _layer(name: str) -> int:
    m = _BLOCK.match(name)
    return int(m.group(1)) if m else -1


def loader_order(slots: Sequence[Slot]) -> list[int]:
    """Indices of ``slots`` in llama.cpp's loader order (``weight_name_comparer``: block, then name; tensors outside
    the blocks first)."""
    return sorted(range(len(slots)), key=lambda i: (_layer(slots[i].name), slots[i].name))


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


class _State:
    def __init__(self, slots: Sequence[Slot], target: Target, rec: Recipe):
        self.t, self.r = target, rec
        cats = [_category(s.name) for s in slots]
        self.n_attention_wv = sum(c in _VALUE_LIKE for c in cats)
        self.tied = "output" not in cats
        self.n_layer = target.n_layer_all
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0

    def layer_of(self, counter: int, name: str) -> int:
        """llama.cpp's layer_info: the block from the name for MoE models, else the running count."""
        return _layer(name) if self.t.n_expert > 1 else counter


def _impl(st: _State, new: str, s: Slot, cat: str) -> str:  # noqa: C901 - llama_tensor_get_type_impl, branch by branch
    """llama.cpp's ``llama_tensor_get_type_impl`` for a mainline file type."""
    f, t, arch = st.r.ftype, st.t, st.t.arch
    iq12 = ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")
    if cat == "output" or (st.tied and cat == "token_embd"):
        if st.r.output_tensor_type:
            return st.r.output_tensor_type
        if f == "MXFP4_MOE" or arch == "falcon" or not fits(new, s.shape[0]):
            return "Q8_0"
        if f in (*iq12, "IQ3_XXS"):
            return "Q5_K"
        return new if new == "Q8_0" else "Q6_K"
    if f == "MXFP4_MOE":
        return "MXFP4" if len(s.shape) > 2 and s.shape[2] > 1 else "Q8_0"
    if cat == "token_embd":
        if st.r.token_embedding_type:
            return st.r.token_embedding_type
        if f in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            return "Q2_K"
        if f in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            return "IQ3_S"
        if f in ("TQ1_0", "TQ2_0", "Q2_0"):
            return "Q4_K"
        return new
    if f in iq12:
        if cat in _VALUE_LIKE:
            new = "Q4_K" if t.n_gqa >= 4 or t.n_expert >= 4 else ("IQ3_S" if f in ("IQ2_S", "IQ2_M") else "Q2_K")
            st.i_attention_wv += 1
        elif t.n_expert == 8 and cat == "attn_k":
            new = "Q4_K"
        elif cat == "ffn_down":
            if st.i_ffn_down < st.n_layer // 8:
                new = "IQ3_S" if f in ("IQ2_S", "IQ2_M") else "Q2_K"
            st.i_ffn_down += 1
        elif cat == "attn_output":
            if t.n_expert == 8:
                new = "Q5_K"
            elif f in ("IQ1_S", "IQ1_M"):
                new = "IQ2_XXS"
            elif f in ("IQ2_S", "IQ2_M"):
                new = "IQ3_S"
        return new
    if cat in _VALUE_LIKE:
        i, n = st.i_attention_wv, st.n_attention_wv
        if f == "Q2_K":
            new = "Q4_K" if t.n_gqa >= 4 else "Q3_K"
        elif f == "Q2_K_S" and t.n_gqa >= 4:
            new = "Q4_K"
        elif f == "IQ3_XXS":
            new = "Q4_K" if t.n_gqa >= 4 else ("IQ3_XXS" if st.r.imatrix else "IQ3_S")
        elif f in ("IQ3_XS", "IQ3_S") and t.n_gqa >= 4:
            new = "Q4_K"
        elif f == "IQ3_M":
            new = "Q4_K"
        elif f == "Q3_K_M":
            new = "Q5_K" if i < 2 else "Q4_K"
        elif f == "Q3_K_L":
            new = "Q5_K"
        elif f in ("IQ4_NL", "IQ4_XS") and t.n_gqa >= 4:
            new = "Q5_K"
        elif f in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, n):
            new = "Q6_K"
        elif f == "Q4_K_S" and i < 4:
            new = "Q5_K"
        if t.type_70b and new in ("Q3_K", "Q4_K"):
            new = "Q5_K"
        if t.n_expert == 8:
            new = "Q8_0"
        st.i_attention_wv += 1
        return new
    if cat == "attn_k":
        if t.n_expert == 8:
            return "Q8_0"
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(f, new)
    if cat == "attn_q":
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(f, new)
    if cat == "ffn_down":
        i, n = st.layer_of(st.i_ffn_down, s.name), st.n_layer
        if f == "Q2_K":
            new = "Q3_K"
        elif f == "Q2_K_S":
            new = "Q4_K" if i < n // 8 else new
        elif f == "IQ3_XXS" and not st.r.imatrix:
            new = "Q4_K" if i < n // 8 else "Q3_K"
        elif f == "Q3_K_M":
            new = "Q5_K" if i < n // 16 else ("Q4_K" if arch != "falcon" or _use_more_bits(i, n) else "Q3_K")
        elif f == "IQ3_M" and (i < n // 8 or (t.n_expert == 8 and _use_more_bits(i, n))):
            new = "Q4_K"
        elif f == "Q3_K_L":
            new = "Q4_K" if arch == "falcon" else "Q5_K"
        elif f == "Q4_K_M":
            if arch == "falcon":
                new = "Q6_K" if i < n // 16 else ("Q5_K" if _use_more_bits(i, n) else "Q4_K")
            elif _use_more_bits(i, n):
                new = "Q6_K"
        elif i < n // 8 and f in ("IQ4_NL", "IQ4_XS") and not st.r.imatrix:
            new = "Q5_K"
        elif f == "Q5_K_M" and _use_more_bits(i, n):
            new = "Q6_K"
        elif f == "Q4_K_S" and arch != "falcon" and i < n // 8:
            new = "Q5_K"
        elif f in ("Q4_0", "Q5_0") and st.r.imatrix and i < n // 8:
            new = "Q4_1" if f == "Q4_0" else "Q5_1"
        st.i_ffn_down += 1
        return new
    if cat == "attn_output":
        if arch != "falcon":
            if t.n_expert == 8:
                if f in ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S",
                         "IQ3_M", "IQ4_XS"):
                    new = "Q5_K"
            else:
                new = {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K",
                       "IQ3_M": "Q4_K"}.get(f, new)
        elif f == "Q3_K_L":
            new = "Q4_K"
        return new
    if cat in ("ffn_gate", "ffn_up"):
        counter = st.i_ffn_gate if cat == "ffn_gate" else st.i_ffn_up
        i, n = st.layer_of(counter, s.name), st.n_layer
        if f == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
            new = "IQ3_XXS"
        if cat == "ffn_gate":
            st.i_ffn_gate += 1
        else:
            st.i_ffn_up += 1
    return new


def _ik_impl(st: _State, new: str, s: Slot, cat: str) -> str:
    """ik_llama.cpp's choice for the output head and the token embedding of an ik file type (the first branches of
    its llama_tensor_get_type); other tensors keep the default type."""
    f = st.r.ftype
    low = ("IQ2_K", "IQ3_K", "IQ2_KS", "IQ3_K_R4", "IQ3_KS", "IQ2_K_R4", "IQ2_KL", "IQ2_M_R4", "IQ1_S_R4",
           "IQ1_M_R4", "IQ2_KT", "IQ3_KT", "IQ1_KT", "IQ3_XXS_R4")
    if cat == "output" or (st.tied and cat == "token_embd"):
        if st.r.output_tensor_type:
            return st.r.output_tensor_type
        if not fits("Q4_K", s.shape[0]):
            return "Q8_0"
        if f in low:
            return "IQ4_K" if st.tied else "Q5_K"
        if f in ("IQ2_XXS_R4", "IQ2_XS_R4"):
            return "IQ4_K_R4" if st.tied else "Q5_K_R4"
        if f in ("IQ3_KL", "IQ4_KS", "IQ4_KSS", "IQ4_KS_R4", "IQ3_S_R4") and st.tied:
            return "IQ5_K"
        if new not in ("Q8_0", "Q8_0_R8", "IQ6_K", "Q6_K_R4", "Q8_K_R8", "Q8_KV", "Q8_KV_R8"):
            return "Q6_K"
        return new
    if cat == "token_embd":
        if st.r.token_embedding_type:
            return st.r.token_embedding_type
        if f in ("IQ2_XXS_R4", "IQ2_XS_R4", "IQ1_S_R4", "IQ1_M_R4"):
            return "Q2_K"
        if f == "IQ2_M_R4":
            return "IQ3_S"
        if f == "IQ3_XXS_R4":
            return "IQ3_K"
        if f in ("IQ1_BN", "IQ2_BN", "IQ2_BN_R4"):
            return "IQ4_NL"
        return _IK_BASE.get(new, new)
    return new


def _fallback(new: str, row: int, ik: bool) -> str:
    """``tensor_type_fallback``: a type whose blocks fit rows of ``row`` weights."""
    if fits(new, row):
        return new
    table = _IK_FALLBACK if ik else _FALLBACK
    alt = table.get(new)
    if alt is None:
        raise ValueError(f"no fallback for {new} rows of {row} weights")
    return alt if fits(alt, row) else "F16"


def quantized_types(slots: Sequence[Slot], rec: Recipe, target: Target, outtype: str = "BF16") -> list[str]:
    """The GGUF type of each of ``slots`` (in their order) in a file of recipe ``rec``, quantized by llama-quantize
    from the converter's ``outtype`` file (float file types: the converter's own output)."""
    if rec.ftype in FLOAT_FTYPES and not rec.pure:
        return [converted_type(s, rec.default) for s in slots]
    st = _State(slots, target, rec)
    out = [""] * len(slots)
    for i in loader_order(slots):
        s = slots[i]
        if not allows_quantization(s):
            out[i] = converted_type(s, outtype)
            continue
        cat = _category(s.name)
        if rec.token_embedding_type and cat == "token_embd":
            out[i] = rec.token_embedding_type
            continue
        if rec.output_tensor_type and cat == "output":
            out[i] = rec.output_tensor_type
            continue
        new = rec.default
        if not TYPES[new].quantized:
            out[i] = new
            continue
        if not rec.pure:
            new = _ik_impl(st, new, s, cat) if rec.ik else _impl(st, new, s, cat)
        out[i] = _fallback(new, s.shape[0], rec.ik)
    return out


def ik_note(rec: Recipe) -> str:
    """The approximation an ik_llama.cpp file type is read with (empty for llama.cpp's)."""
    if not rec.ik or rec.pure:
        return ""
    return (f"{rec.ftype} is an ik_llama.cpp file type: every tensor at {rec.default} but the output head and token "
            "embedding (its rules); the per-layer raises of its rule set (attn_v, ffn_down) are not counted")
