"""Bits per weight: of one GGUF tensor type (exact, from gguf's own block table), and of a quantization scheme, the
name people give a whole file (Q4_K_M, UD-Q4_K_XL, MXFP4, BF16, ...), as a documented approximation.

A GGUF type stores ``block`` weights in ``type_size`` bytes (``gguf.GGML_QUANT_SIZES``), so its bits per weight are
``8 x type_size / block``: Q4_K 4.5, Q5_K 5.5, Q6_K 6.5625, Q8_0 8.5, MXFP4 4.25, F16/BF16 16.

A scheme is a mix. llama.cpp's quantizer gives most tensors the scheme's *default type* (Q4_K for Q4_K_M and Q4_K_S,
Q3_K for Q3_K_S/M/L, IQ3_S for IQ3_XS and IQ3_M, IQ2_XS for IQ2_S, IQ2_S for IQ2_M, ...) and raises a few to more bits
(the _M mixes give ``attn_v``, half the layers' ``ffn_down`` and ``output`` Q6_K or Q5_K). Here a scheme is its
default type for the experts and for the dense weights alike; the raised tensors are not modelled, so the bytes of a
real file of a ``_M``/``_L``/``_XL`` mix are a few percent (up to about 10% for dense models) above these. Unsloth's
dynamic ``UD-`` mixes are read as the scheme after the prefix (``_XL`` as ``_M``): they raise more tensors still.
A GGUF file needs none of this: :func:`sim.modelfiles.gguf_file.read_gguf` sums its tensors' real bytes.

Checkpoint formats of config.json files: MXFP4 (OpenAI's gpt-oss checkpoint: experts in MXFP4, 4.25 bits, everything
else BF16; that gives the published gpt-oss-20b checkpoint's 13.76 GB to 0.1%), MXFP4_MOE (llama.cpp's ftype: experts
MXFP4, every other tensor Q8_0), FP8 (DeepSeek's block-scaled e4m3: 8 bits plus one float32 scale per 128 x 128
weights, embeddings and output head BF16).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

FP8_BLOCK_SCALE_BITS = 32 / (128 * 128)  # one float32 scale per 128 x 128 block (bits per weight)


def type_bits(qtype: GGMLQuantizationType) -> float:
    """Bits per weight of a GGUF tensor type: 8 x bytes per block / weights per block."""
    block, size = GGML_QUANT_SIZES[qtype]
    return 8.0 * size / block


def gguf_type(name: str) -> GGMLQuantizationType | None:
    """The GGUF tensor type of that name (any case: ``q8_0``, ``Q4_K``, ``bf16``), or None."""
    return GGMLQuantizationType.__members__.get(name.strip().upper())


@dataclass(frozen=True)
class Scheme:
    """A quantization of a whole model. ``name`` is the canonical spelling; the bits are per weight."""

    name: str
    experts_bits: float  # routed experts
    dense_bits: float  # every other weight matrix
    embedding_bits: float  # token embeddings and output head
    note: str = ""


# scheme -> GGUF type of its experts and most tensors (llama.cpp's default_type for that ftype)
_GGUF_MIXES = {
    "Q2_K_S": "Q2_K", "Q3_K_S": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K", "Q4_K_S": "Q4_K", "Q4_K_M": "Q4_K",
    "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K", "IQ2_S": "IQ2_XS", "IQ2_M": "IQ2_S", "IQ3_XS": "IQ3_S", "IQ3_M": "IQ3_S",
}
_CHECKPOINT_FLOATS = {"FP16": "F16", "FP32": "F32", "FLOAT16": "F16", "BFLOAT16": "BF16", "FLOAT32": "F32"}
_TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32"}


def _known_names() -> list[str]:
    plain = [t.name for t in GGML_QUANT_SIZES if t.name not in ("I8", "I16", "I32", "I64", "F64")]
    return sorted(set(plain) | set(_GGUF_MIXES) | {"MXFP4_MOE", "FP8"})


def scheme(name: str) -> Scheme:
    """The scheme a name stands for (case-insensitive; ``UD-`` prefix and ``_XL`` suffix read as above). Raises
    ValueError naming the known schemes when the name is none of them."""
    raw = name.strip()
    key = raw.upper().replace("-", "_")
    notes = []
    if key.startswith("UD_"):
        key = key[3:]
        notes.append("Unsloth's dynamic mix raises more tensors than that, not counted")
    if key.endswith("_XL"):
        key = key[:-3] + "_M"
    key = _CHECKPOINT_FLOATS.get(key, key)
    if key in ("FP8", "F8_E4M3", "FP8_E4M3"):
        return Scheme("FP8", 8 + FP8_BLOCK_SCALE_BITS, 8 + FP8_BLOCK_SCALE_BITS, 16.0,
                      "FP8: e4m3 weights with one float32 scale per 128 x 128 block; embeddings and output head BF16")
    if key == "MXFP4":
        return Scheme("MXFP4", type_bits(GGMLQuantizationType.MXFP4), 16.0, 16.0,
                      "MXFP4: routed experts MXFP4 (4.25 bits), every other weight BF16, as OpenAI's gpt-oss "
                      "checkpoint")
    if key == "MXFP4_MOE":
        return Scheme("MXFP4_MOE", type_bits(GGMLQuantizationType.MXFP4), type_bits(GGMLQuantizationType.Q8_0),
                      type_bits(GGMLQuantizationType.Q8_0), "MXFP4_MOE: experts MXFP4, every other tensor Q8_0 "
                      "(llama.cpp's rule)")
    base = _GGUF_MIXES.get(key, key)
    qtype = gguf_type(base)
    if qtype is None or qtype.name in ("I8", "I16", "I32", "I64", "F64"):
        raise ValueError(f"unknown quantization '{raw}': expected one of {', '.join(_known_names())} "
                         "(a UD- prefix and an _XL suffix are understood)")
    bits = type_bits(qtype)
    if base != key or notes:
        notes.insert(0, f"{raw} read as {key}: every tensor counted as {base} ({bits:g} bits), the scheme's default "
                     "type; the few tensors the mix raises to more bits are not counted")
    return Scheme(key, bits, bits, bits, "; ".join(notes))


def torch_dtype_scheme(dtype: str) -> Scheme:
    """The scheme of unquantized weights stored as ``torch_dtype`` (``bfloat16``, ``float16``, ``float32``)."""
    base = _TORCH_DTYPES.get(str(dtype).strip().lower().removeprefix("torch."))
    if base is None:
        raise ValueError(f"unknown torch_dtype '{dtype}': expected one of {', '.join(sorted(_TORCH_DTYPES))}")
    return scheme(base)


def kv_bytes(kv_type: str) -> float:
    """Bytes per cached K or V value of a KV cache type (llama.cpp's ``--cache-type-k`` names: f16, bf16, f32, q8_0,
    q4_0, q4_1, q5_0, q5_1, iq4_nl; and fp8). Raises ValueError for another name."""
    key = kv_type.strip().upper()
    if key in ("FP8", "FP8_E4M3", "FP8_E5M2"):
        return 1.0
    qtype = gguf_type(_CHECKPOINT_FLOATS.get(key, key))
    allowed = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL")
    if qtype is None or qtype.name not in allowed:
        raise ValueError(f"unknown KV cache type '{kv_type}': expected one of "
                         f"{', '.join(a.lower() for a in allowed)}, fp8")
    return type_bits(qtype) / 8.0
