"""What a quantization name means for each tensor, and the bytes it gives.

Three kinds:

* a llama.cpp (or ik_llama.cpp) file type, ``--quant Q4_K_M``: the GGUF llama-quantize writes; each tensor's type by
  llama.cpp's rules (:mod:`sim.modelfiles.llama_quant`), its bytes by ggml's block sizes
  (:mod:`sim.modelfiles.ggml_types`);
* the checkpoint's own format (no ``--quant``): the ``quantization_config`` of config.json (OpenAI's MXFP4 for
  gpt-oss: experts MXFP4, 4.25 bits, the rest BF16, which gives the published gpt-oss-20b checkpoint's 13.76 GB to
  0.1%; DeepSeek's block-scaled FP8: e4m3 weights with one float32 scale per 128 x 128 block, the embeddings,
  output head, router and norms BF16; GPTQ/AWQ: b-bit weights with an fp16 scale and a b-bit zero point per group,
  the embeddings and output head as the checkpoint's floats), else ``torch_dtype`` (``dtype``), every tensor at it;
* an Unsloth dynamic mix (``UD-Q4_K_XL``, ``UD-IQ2_XXS``): Unsloth chooses its per-tensor types by its own
  measurements, so they cannot be derived. The tensors are listed at the llama.cpp file type the name ends in
  (``_XL`` read as ``_M``, ``Q8_K_XL`` as ``Q8_0``) and must be scaled to the real file's size: a GGUF file
  gives its own types, a scenario's ``weights_gib`` (``sim model --weights-gib``) the size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil

from sim.modelfiles.ggml_types import TYPES, tensor_bytes
from sim.modelfiles.llama_quant import Recipe, Slot, Target, allows_quantization, quantized_types, recipe

FP8_BLOCK = 128  # DeepSeek's FP8: one float32 scale per 128 x 128 weights
_FLOATS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32"}


def type_bits(qtype) -> float:
    """Bits per weight of a GGUF tensor type (a name or a ``gguf.GGMLQuantizationType``)."""
    return TYPES[getattr(qtype, "name", str(qtype)).upper()].bits


@dataclass(frozen=True)
class Quant:
    """A quantization of a whole model (see the module docstring)."""

    name: str  # canonical spelling: Q4_K_M, i1-IQ4_XS, BF16, MXFP4, FP8, GPTQ-4bit, UD-Q4_K_XL
    kind: str  # "gguf", "checkpoint" or "unsloth"
    recipe: Recipe | None = None  # the llama.cpp recipe (unsloth: the one its name ends in)
    dtype: str = "BF16"  # checkpoint: its floats
    method: str = ""  # checkpoint: mxfp4, fp8, gptq, awq (empty: floats only)
    bits: int = 0  # gptq/awq: bits per weight
    group: int = 0  # gptq/awq: weights per scale

    @property
    def derivable(self) -> bool:
        """False for a mix whose per-tensor types cannot be derived (Unsloth's)."""
        return self.kind != "unsloth"


def unsloth_base(name: str) -> str:
    """The llama.cpp file type an Unsloth dynamic mix's name ends in: UD-Q4_K_XL -> Q4_K_M, UD-Q8_K_XL -> Q8_0."""
    key = name.strip().upper().replace("-", "_").removeprefix("UD_")
    if key.endswith("_XL"):
        key = key[:-3] + "_M"
    return {"Q8_K_M": "Q8_0", "Q6_K_M": "Q6_K", "Q2_K_M": "Q2_K"}.get(key, key)


def gguf_quant(name: str) -> Quant:
    """The quantization a name given by the user stands for (``--quant``, a scenario's ``quant``); ValueError for
    an unknown one."""
    raw = name.strip()
    if raw.upper().replace("-", "_").startswith("UD_"):
        return Quant(raw, "unsloth", recipe(unsloth_base(raw)))
    if raw.upper() in ("MXFP4", "FP8", "F8_E4M3", "FP8_E4M3"):
        method = "mxfp4" if raw.upper() == "MXFP4" else "fp8"
        return Quant(method.upper(), "checkpoint", method=method)
    r = recipe(raw)
    return Quant(("i1-" if r.imatrix else "") + r.ftype, "gguf", r)


def checkpoint_quant(dtype: str | None, qc: dict | None) -> Quant:
    """A checkpoint's own format from its ``torch_dtype`` and ``quantization_config``; ValueError when neither is
    one read here."""
    floats = "BF16" if dtype is None else _FLOATS.get(str(dtype).strip().lower().removeprefix("torch."))
    if floats is None:
        raise ValueError(f"unknown torch_dtype '{dtype}': expected one of {', '.join(sorted(_FLOATS))}")
    if not isinstance(qc, dict) or qc.get("quant_method") is None:
        return Quant(floats, "checkpoint", dtype=floats)
    method = str(qc["quant_method"]).lower()
    if method in ("mxfp4", "fp8"):
        return Quant(method.upper(), "checkpoint", dtype=floats, method=method)
    bits, group = qc.get("bits"), qc.get("group_size", 128)
    if method in ("gptq", "awq") and bits in (2, 3, 4, 8) and isinstance(group, int):
        return Quant(f"{method.upper()}-{bits}bit", "checkpoint", dtype=floats, method=method, bits=bits,
                     group=group)
    raise ValueError(f"'{method}' with bits {bits!r}: not a quantization read here (mxfp4, fp8, gptq or awq with "
                     "bits 2, 3, 4 or 8); name one with --quant")


def _checkpoint_type(s: Slot, q: Quant) -> tuple[str, float]:
    """A checkpoint tensor's format and bytes."""
    n = 1
    for d in s.shape:
        n *= d
    head = s.name in ("token_embd.weight", "output.weight")
    if q.method == "mxfp4" and s.native == "MXFP4":
        return "MXFP4", tensor_bytes("MXFP4", s.shape)
    if q.method == "fp8" and allows_quantization(s) and not head:
        mats = n // (s.shape[0] * s.shape[1])
        scales = mats * ceil(s.shape[0] / FP8_BLOCK) * ceil(s.shape[1] / FP8_BLOCK) * 4
        return "FP8_E4M3", n + scales
    if q.method in ("gptq", "awq") and allows_quantization(s) and not head:
        per = q.bits + ((16 + q.bits) / q.group if q.group > 0 else 0)
        return q.name, n * per / 8
    return q.dtype, tensor_bytes(q.dtype, s.shape)


def slot_types(slots: Sequence[Slot], q: Quant, target: Target) -> list[tuple[str, float]]:
    """(type, bytes) of each of ``slots`` under ``q``."""
    if q.kind == "checkpoint":
        return [_checkpoint_type(s, q) for s in slots]
    assert q.recipe is not None
    types = quantized_types(slots, q.recipe, target)
    return [(t, tensor_bytes(t, s.shape)) for t, s in zip(types, slots, strict=True)]


def kv_bytes(kv_type: str) -> float:
    """Bytes per cached K or V value of a KV cache type (llama.cpp's ``--cache-type-k`` names: f16, bf16, f32, q8_0,
    q4_0, q4_1, q5_0, q5_1, iq4_nl; and fp8). Raises ValueError for another name."""
    key = kv_type.strip().upper()
    if key in ("FP8", "FP8_E4M3", "FP8_E5M2"):
        return 1.0
    key = {"FP16": "F16", "FP32": "F32", "FLOAT16": "F16", "BFLOAT16": "BF16", "FLOAT32": "F32"}.get(key, key)
    allowed = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL")
    if key not in allowed:
        raise ValueError(f"unknown KV cache type '{kv_type}': expected one of "
                         f"{', '.join(a.lower() for a in allowed)}, fp8")
    return TYPES[key].bits / 8.0
