"""The storage of every GGUF tensor type: weights per block, bytes per block, bytes of per-row metadata.

A tensor of type T and shape ``ne`` (GGUF order: ``ne[0]`` is the row, the weights one matrix-vector product reads
together) takes ``rows x (row_meta + ne[0] / block x type_size)`` bytes, ``rows`` being the product of the other
dimensions (ggml's ``ggml_row_size``). A row must hold a whole number of blocks.

Sources:

* llama.cpp's types (F32 ... MXFP4, NVFP4, Q1_0): the ``gguf`` package's ``GGML_QUANT_SIZES``, the same table as
  ggml's ``type_traits`` (ggml-org/llama.cpp ggml/src/ggml.c).
* ik_llama.cpp's own types (IQ2_K ... IQ6_K, IQ2_KS ... IQ5_KS, the trellis IQ*_KT, the row-interleaved ``_R4`` /
  ``_R8`` repacks, Q6_0, Q8_KV, ...), which ``gguf`` does not know: block and per-row metadata sizes from the
  ``type_traits`` table of https://github.com/ikawrakow/ik_llama.cpp/blob/8337e4cd3861406fc04e0854b1409cd1b027fbc9/
  ggml/src/ggml.c, block sizes from the ``static_assert(sizeof(block_...))`` lines of ggml/src/ggml-common.h at the
  same commit (QK_K = 256 weights, ggml_half = 2 bytes). A row-interleaved repack (``IQ4_XS_R8``) stores the same
  bytes per weight as its base type (``IQ4_XS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class GgmlType:
    """One tensor type's storage."""

    name: str  # as GGUF and llama.cpp print it, upper case (Q4_K, IQ4_XS, BF16, IQ4_KS, ...)
    block: int  # weights per block
    type_size: int  # bytes per block
    row_meta: int = 0  # bytes of metadata per row (ik_llama.cpp's row scales), beside the blocks
    quantized: bool = True  # False: a float or integer type stored weight by weight
    ik: bool = False  # only ik_llama.cpp knows it

    @property
    def bits(self) -> float:
        """Bits per weight, without the per-row metadata."""
        return 8.0 * self.type_size / self.block


def _mainline() -> dict[str, GgmlType]:
    from gguf.constants import GGML_QUANT_SIZES

    floats = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}
    return {t.name: GgmlType(t.name, block, size, quantized=t.name not in floats)
            for t, (block, size) in GGML_QUANT_SIZES.items()}


# ik_llama.cpp's types: (block, bytes per block, bytes per row) -- see the module docstring for the source.
_IK = {
    "Q6_0": (32, 26, 0), "Q8_KV": (32, 32, 8), "Q8_KV_R8": (32, 32, 4), "Q1_0_G128": (128, 18, 0),
    "IQ1_BN": (64, 13, 2), "IQ2_BN": (64, 16, 4), "IQ2_BN_R4": (64, 16, 4),
    "IQ2_K": (256, 76, 0), "IQ2_KS": (256, 70, 2), "IQ2_KL": (256, 86, 2), "IQ3_K": (256, 110, 0),
    "IQ3_KS": (256, 102, 2), "IQ4_K": (256, 144, 0), "IQ4_KS": (256, 136, 4), "IQ4_KSS": (256, 128, 4),
    "IQ5_K": (256, 176, 0), "IQ5_KS": (256, 168, 4), "IQ6_K": (256, 212, 0),
    "IQ1_KT": (256, 56, 4), "IQ2_KT": (256, 68, 4), "IQ3_KT": (256, 100, 4), "IQ4_KT": (256, 128, 4),
    "IQ1_S_R4": (32, 6, 2), "IQ1_M_R4": (32, 7, 2),
    "Q8_K_R8": (256, 258, 0), "Q8_K_R16": (256, 258, 0),
    # row-interleaved repacks: the base type's bytes
    "Q4_0_R8": (32, 18, 0), "Q5_0_R4": (32, 22, 0), "Q6_0_R4": (32, 26, 0), "Q8_0_R8": (32, 34, 0),
    "Q2_K_R4": (256, 84, 0), "Q3_K_R4": (256, 110, 0), "Q4_K_R4": (256, 144, 0), "Q5_K_R4": (256, 176, 0),
    "Q6_K_R4": (256, 210, 0), "IQ2_XXS_R4": (256, 66, 0), "IQ2_XS_R4": (256, 74, 0), "IQ3_XXS_R4": (256, 98, 0),
    "IQ4_NL_R4": (32, 18, 0), "IQ3_S_R4": (256, 110, 0), "IQ2_S_R4": (256, 82, 0), "IQ4_XS_R8": (256, 136, 0),
    "IQ2_K_R4": (256, 76, 0), "IQ3_K_R4": (256, 110, 0), "IQ4_K_R4": (256, 144, 0), "IQ5_K_R4": (256, 176, 0),
    "IQ4_KS_R4": (256, 136, 4), "IQ5_KS_R4": (256, 168, 4), "MXFP4_R8": (32, 17, 0),
}
_IK_FLOATS = {"BF16_R16": (1, 2, 0)}

TYPES: dict[str, GgmlType] = {
    **_mainline(),
    **{n: GgmlType(n, b, s, m, ik=True) for n, (b, s, m) in _IK.items()},
    **{n: GgmlType(n, b, s, m, quantized=False, ik=True) for n, (b, s, m) in _IK_FLOATS.items()},
}


def ggml_type(name: str) -> GgmlType | None:
    """The type of that name (any case: ``q8_0``, ``IQ4_KS``), or None."""
    return TYPES.get(name.strip().upper())


def type_bits(name: str) -> float:
    """Bits per weight of a type (per-row metadata left out); KeyError for an unknown name."""
    return TYPES[name.upper()].bits


def fits(name: str, row: int) -> bool:
    """True when a row of ``row`` weights holds a whole number of the type's blocks."""
    return row % TYPES[name].block == 0


def tensor_bytes(name: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of type ``name`` and GGUF shape ``shape`` (``ne[0]`` first); ValueError when its rows do
    not hold whole blocks."""
    t = TYPES[name]
    row = shape[0]
    if row % t.block:
        raise ValueError(f"a row of {row} weights is not a whole number of {t.name} blocks of {t.block}")
    return prod(shape[1:]) * (t.row_meta + row // t.block * t.type_size)
