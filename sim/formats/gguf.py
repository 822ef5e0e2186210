"""A GGUF file's header as it is written: the fixed start (magic, version, counts), the metadata (each value read
with an error naming the file and the key) and the tensor table (names, shapes, types, bytes), of the file and of its
other shards when split (``name-00001-of-00003.gguf``). ``gguf.GGUFReader`` memory-maps the file and no tensor data
is read (string arrays, the tokenizer's vocabulary, are skipped rather than decoded: see :func:`header_reader`).
What the header means (a model's geometry) is :mod:`sim.modelfiles.gguf_file`'s.
"""

from __future__ import annotations

import functools
import math
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.inputs import read_head
from sim.formats.quantities import PARAMETERS

SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
WHAT = "a .gguf model file"
MAGIC = b"GGUF"
HEADER_BYTES = 24  # magic, version (u32), tensor count and metadata key count (u64 each)
VERSIONS = (2, 3)  # what gguf's reader reads
MAX_TENSORS = 1_000_000  # tensors of a model (the largest: a few thousand); a larger count is a broken header
MAX_METADATA = 100_000  # metadata keys (a few dozen in a real file)
MIN_KEY_BYTES = 13  # a metadata key at least: its name's length (u64), its type (u32), a one-byte value
MIN_TENSOR_BYTES = 24  # a tensor's entry at least: name length (u64), dimensions (u32), type (u32), offset (u64)
MAX_DIM = 2**31  # a tensor's dimension, at most (as a config.json's widths: sim.modelfiles.hf_blocks.MAX_DIM)


def gguf_module():
    """gguf's reader and constants (imported when a GGUF is read: numpy and the tables take a moment)."""
    import gguf
    from gguf.constants import Keys, LlamaFileType

    return gguf, Keys, LlamaFileType


@functools.cache
def header_reader() -> type:
    """``gguf.GGUFReader`` with array values read in one piece: numbers as one array, strings skipped (their
    contents are an empty list). The plain reader parses every element of the tokenizer's arrays on its own (about
    20 s for a 150,000-token vocabulary); this one takes a fraction of a second. Only the arrays change."""
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    class HeaderReader(GGUFReader):
        def _get_field_parts(self, orig_offs: int, raw_type: int):
            if GGUFValueType(raw_type) != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            count = self._get(orig_offs + 4, np.uint64)
            start, n = orig_offs + 12, int(count[0])
            itype = GGUFValueType(raw_itype[0])
            types = [GGUFValueType.ARRAY, itype]
            scalar = self.gguf_scalar_to_np.get(itype)
            if scalar is not None:
                values = self._get(start, scalar, n)
                return 12 + int(values.nbytes), [raw_itype, count, values], [2], types
            if itype != GGUFValueType.STRING:
                return super()._get_field_parts(orig_offs, raw_type)  # arrays of arrays
            order = "<" if (self.byte_order == "I") == (sys.byteorder == "little") else ">"
            length, end = struct.Struct(order + "Q"), start
            for _ in range(n):  # each string: a u64 length, then its bytes
                end += 8 + length.unpack_from(self.data, end)[0]
            if end > len(self.data):
                raise ValueError(f"a string array runs past the end of the file ({end} > {len(self.data)} bytes)")
            return end - orig_offs, [raw_itype, count, self._get(start, np.uint8, end - start)], [], types

    return HeaderReader


class GgufMetadata:
    """A GGUF's metadata, each value read with an error naming the file and the key."""

    def __init__(self, path: str, reader: Any, arch: str):
        self.path, self.fields, self.arch = path, reader.fields, arch

    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def value(self, template: str) -> Any:
        field = self.fields.get(self.key(template))
        try:
            return None if field is None else field.contents()
        except Exception as exc:  # a value of a type or size gguf cannot decode
            raise ScenarioError(self.path, self.key(template), f"unreadable value ({type(exc).__name__}: {exc})") \
                from None

    def int(self, template: str, default: int | None = None, minimum: int = 1, maximum: int = MAX_DIM) -> int:
        """A whole number from ``minimum`` to ``maximum`` (the largest, when the file gives one per layer)."""
        value = self.value(template)
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            value = max(value)
        if value is None:
            if default is None:
                raise ScenarioError(self.path, self.key(template), f"missing: expected a whole number >= {minimum}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise ScenarioError(self.path, self.key(template), f"expected a whole number from {minimum} to "
                                f"{maximum:,}, got {value!r}")
        return value

    def per_layer(self, template: str, layers: int, default: int) -> list[int]:
        """A per-layer value: the file's list, or its one number repeated."""
        value = self.value(template)
        if isinstance(value, list):
            if len(value) < layers or not all(isinstance(v, int) and 0 <= v <= MAX_DIM for v in value):
                raise ScenarioError(self.path, self.key(template), f"expected {layers} whole numbers, one per layer")
            return list(value[:layers])
        return [self.int(template, default, minimum=0)] * layers


@dataclass(frozen=True)
class GgufTensor:
    """A tensor of the table: its name, shape (every dimension from 1 to :data:`MAX_DIM`, elements in
    :data:`~sim.formats.quantities.PARAMETERS`), ggml type name and bytes."""

    name: str
    shape: tuple[int, ...]
    qtype: str
    n_bytes: int


def _check_header(path: str) -> int:
    """The fixed start of a GGUF file, read before gguf memory-maps it (:func:`sim.formats.inputs.read_head`: a regular
    file, never a FIFO or a device): the magic, a version gguf reads, and tensor and metadata counts that the
    file's size can hold and that are not beyond any model's; else one line naming the file."""
    head, size = read_head(path, "", WHAT, max_bytes=HEADER_BYTES)
    if head[:len(MAGIC)] != MAGIC[:len(head)] or size < len(MAGIC):
        raise ScenarioError(path, "", f"not a GGUF file (it does not begin with the magic 'GGUF'): expected {WHAT}")
    if size < HEADER_BYTES:
        raise ScenarioError(path, "", f"not a GGUF file ({size:,} bytes, shorter than the {HEADER_BYTES} bytes of a "
                            f"GGUF header: cut short?): expected {WHAT}")
    order = "little" if int.from_bytes(head[4:8], "little") & 0xFFFF else "big"  # as gguf tells the byte order
    version = int.from_bytes(head[4:8], order)
    if version not in VERSIONS:
        raise ScenarioError(path, "GGUF.version", f"not a GGUF file gguf reads (version {version:,}): expected "
                            f"version {' or '.join(map(str, VERSIONS))}")
    tensors, keys = int.from_bytes(head[8:16], order), int.from_bytes(head[16:24], order)
    for key, count, top, what in (("GGUF.tensor_count", tensors, MAX_TENSORS, "tensors"),
                                  ("GGUF.kv_count", keys, MAX_METADATA, "metadata keys")):
        if count > top:
            raise ScenarioError(path, key, f"{count:,} {what}: expected at most {top:,} (a damaged GGUF header?)")
    least = HEADER_BYTES + keys * MIN_KEY_BYTES + tensors * MIN_TENSOR_BYTES
    if least > size:
        raise ScenarioError(path, "", f"not a GGUF file ({size:,} bytes cannot hold the header's {keys:,} metadata "
                            f"keys and {tensors:,} tensors, at least {least:,} bytes: cut short?)")
    return size


def open_gguf(path: str) -> Any:
    import numpy as np

    size = _check_header(path)
    try:
        with np.errstate(over="ignore"):  # a damaged offset wraps in gguf's sum: told below, not warned raw
            reader = header_reader()(path)
    except PermissionError as exc:
        raise ScenarioError(path, "", f"cannot read: {exc.strerror or exc}") from None
    except Exception as exc:  # a wrong magic, a truncated header, an empty file: numpy and gguf raise many kinds
        raise ScenarioError(path, "", f"not a GGUF file ({type(exc).__name__}: {exc}): expected a .gguf model "
                            "file (magic 'GGUF', a header gguf can read)") from None
    _check_offsets(path, reader, size)
    return reader


def _check_offsets(path: str, reader: Any, size: int) -> None:
    """Every tensor's data where the format puts it: at an offset from the data section that is a multiple of the
    file's alignment (``general.alignment``, 32 by default) and ends within the file's ``size`` bytes; a damaged or
    cut file is one line naming the tensor."""
    alignment = int(getattr(reader, "alignment", 32) or 32)
    for t in reader.tensors:
        relative = int(t.field.parts[-1][0])  # the offset as written, before gguf adds the data section's start
        end = int(t.data_offset) + int(t.n_bytes) if relative < size else size + 1
        if relative % alignment:
            raise ScenarioError(path, t.name, f"data offset {relative:,} is not a multiple of the file's alignment "
                                f"({alignment}): a damaged GGUF file?")
        if end > size:
            raise ScenarioError(path, t.name, f"data at offset {relative:,} of {int(t.n_bytes):,} bytes runs past the "
                                f"end of the file ({size:,} bytes): cut short?")


def checked_tensor(path: str, t: Any) -> GgufTensor:
    """A tensor of the file's table, checked: every dimension at least 1 and at most ``MAX_DIM`` (a zero would make
    an empty tensor of a model, a huge one wraps gguf's element count), elements in :data:`PARAMETERS`."""
    shape = tuple(int(n) for n in t.shape)
    if not shape:
        raise ScenarioError(path, t.name, "no dimensions: expected a tensor's shape")
    if not all(1 <= n <= MAX_DIM for n in shape):
        raise ScenarioError(path, t.name, f"a dimension of {next(n for n in shape if not 1 <= n <= MAX_DIM):,} (shape "
                            f"{list(shape)}): expected every dimension of a tensor from 1 to {MAX_DIM:,}")
    elements = math.prod(shape)
    problem = PARAMETERS.problem(elements) or ("" if elements == int(t.n_elements) else "more elements than a "
                                               "64-bit count holds")
    if problem:
        raise ScenarioError(path, t.name, f"shape {list(shape)}: {problem}")
    return GgufTensor(t.name, shape, t.tensor_type.name, int(t.n_bytes))


def other_shards(path: str, head: GgufMetadata, keys: Any) -> list[Any]:
    """The tensors of a split file's other shards (``-0000K-of-0000N.gguf`` beside ``path``)."""
    count = head.int(keys.Split.LLM_KV_SPLIT_COUNT, 1, minimum=1)
    if count == 1:
        return []
    match = SHARD.search(path)
    if match is None or int(match.group(2)) != count:
        raise ScenarioError(path, keys.Split.LLM_KV_SPLIT_COUNT, f"a file split in {count}: expected its name to end "
                            f"in -00001-of-{count:05d}.gguf so the other shards can be found")
    if int(match.group(1)) != 1:
        raise ScenarioError(path, keys.Split.LLM_KV_SPLIT_NO, f"shard {int(match.group(1))} of {count}: give the "
                            f"first, {SHARD.sub(f'-00001-of-{count:05d}.gguf', path)}")
    found = []
    for no in range(2, count + 1):
        shard = SHARD.sub(f"-{no:05d}-of-{count:05d}.gguf", path)
        found += list(open_gguf(shard).tensors)
    return found
