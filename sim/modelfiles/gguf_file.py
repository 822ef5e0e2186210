"""A GGUF file -> :class:`ModelGeometry`, from its header only: the metadata (``general.architecture``,
``{arch}.block_count``, ``{arch}.expert_count``, ...; key names from ``gguf.constants.Keys``) and the tensor table
(names, shapes, types). ``gguf.GGUFReader`` memory-maps the file and no tensor data is read (string arrays, the
tokenizer's vocabulary, are skipped rather than decoded: see :func:`_header_reader`).

Parameters and bytes are the tensors' own: ``n_elements`` and ``n_bytes`` of each. The routed experts are the
tensors named ``blk.N.ffn_*_exps.*`` (gate, up, down, fused gate_up, their biases); everything else is dense (router
``ffn_gate_inp``, shared experts ``ffn_*_shexp``, attention, norms, embeddings, output). ``expert_bytes`` is the
expert tensors' bytes / (moe_layers x experts): the mean over layers when a mix gives some layers more bits.
Multi-token-prediction blocks (the last ``{arch}.nextn_predict_layers`` blocks) are left out, as for config.json.
A split file (``name-00001-of-00003.gguf``) is read whole: the other shards are found beside it.
"""

from __future__ import annotations

import functools
import math
import re
import struct
import sys
from collections import Counter
from typing import Any

from sim.core.errors import ScenarioError
from sim.core.inputs import PARAMETERS, read_head
from sim.modelfiles.geometry import (
    MAX_LAYERS,
    ModelGeometry,
    TensorSpec,
    assemble,
    delta_net_state_bytes,
    gqa_kv_bytes,
    mla_kv_bytes,
    spec,
)
from sim.modelfiles.quant import kv_bytes

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


def _gguf():
    """gguf's reader and constants (imported when a GGUF is read: numpy and the tables take a moment)."""
    import gguf
    from gguf.constants import Keys, LlamaFileType

    return gguf, Keys, LlamaFileType


@functools.cache
def _header_reader() -> type:
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


class _Header:
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


def read_gguf(path: str, kv_type: str = "f16") -> ModelGeometry:
    """Read the GGUF file ``path`` (with its other shards, when split) as a geometry, with a KV cache of
    ``kv_type`` values (f16 default: 2 bytes each). Raises ScenarioError (file, key, what was expected) for a
    missing file, a file that is not a GGUF, or a missing metadata key."""
    gguf, keys, file_types = _gguf()
    try:
        value_bytes = kv_bytes(kv_type)
    except ValueError as exc:
        raise ScenarioError("--kv-type", kv_type, str(exc)) from None
    reader = _open(path, gguf)
    others = _other_shards(path, _Header(path, reader, ""), gguf, keys)
    arch_field = reader.fields.get(keys.General.ARCHITECTURE)
    arch = arch_field.contents() if arch_field is not None else None
    if not isinstance(arch, str) or not arch:
        raise ScenarioError(path, keys.General.ARCHITECTURE, "missing: expected the model's architecture name")
    head = _Header(path, reader, arch)
    tensors = list(reader.tensors) + others
    llm, att = keys.LLM, keys.Attention
    blocks = head.int(llm.BLOCK_COUNT, maximum=MAX_LAYERS)
    nextn = head.int(llm.NEXTN_PREDICT_LAYERS, 0, minimum=0, maximum=MAX_LAYERS)
    layers = blocks - nextn
    if layers < 1:
        raise ScenarioError(path, head.key(llm.NEXTN_PREDICT_LAYERS), f"{nextn} prediction layers of {blocks} blocks:"
                            " expected fewer than block_count")
    hidden, heads = head.int(llm.EMBEDDING_LENGTH), head.int(att.HEAD_COUNT)
    kv_heads = head.per_layer(att.HEAD_COUNT_KV, layers, heads)
    key_len = head.int(att.KEY_LENGTH, hidden // heads)
    value_len = head.int(att.VALUE_LENGTH, key_len)

    specs, mtp = [], []
    types: dict[str, Counter[str]] = {"expert": Counter(), "dense": Counter()}
    for t in tensors:
        ts = _tensor(path, t)
        if ts.block >= layers:
            mtp.append(ts)
            continue
        specs.append(ts)
        types["expert" if ts.role == "experts" else "dense"][ts.qtype] += int(ts.bytes)
    embd = next((ts for ts in specs if ts.name == "token_embd.weight"), None)
    vocab = embd.shape[-1] if embd is not None and len(embd.shape) > 1 else head.int(llm.VOCAB_SIZE)
    moe_blocks = {ts.block for ts in specs if ts.role == "experts"}
    experts = head.int(llm.EXPERT_COUNT, 0, minimum=0) if moe_blocks else 0
    if moe_blocks and experts == 0:
        raise ScenarioError(path, head.key(llm.EXPERT_COUNT), "missing: the file has expert tensors (ffn_*_exps), "
                            "expected the number of experts per layer")
    top_k = head.int(llm.EXPERT_USED_COUNT) if experts else 0
    shared = any("_shexp." in ts.name for ts in specs)
    notes = []
    if mtp:
        notes.append(f"{nextn} multi-token-prediction block(s) not counted ({sum(t.bytes for t in mtp) / 2**20:.4g} "
                     "MiB)")
    kinds, attention = _layer_kinds(head, layers, kv_heads, keys, notes)
    window = head.value(att.SLIDING_WINDOW)
    window = window if isinstance(window, int) else 0
    dims: dict[str, Any] = {}
    rope = head.int(keys.Rope.DIMENSION_COUNT, 0, minimum=0)
    if head.value(att.KV_LORA_RANK) is not None:  # MLA: the compressed latent and the shared rope key per layer
        kv_lora = head.int(att.KV_LORA_RANK)
        k_mla = head.int(att.KEY_LENGTH_MLA, 0, minimum=0)
        v_mla = head.int(att.VALUE_LENGTH_MLA, 0, minimum=0)
        dims = {"kv_lora_rank": kv_lora, "q_lora_rank": head.int(att.Q_LORA_RANK, 0, minimum=0),
                "qk_rope_head_dim": rope, "qk_nope_head_dim": max(k_mla - rope, 0), "v_head_dim": v_mla}
        per_layer_f16 = mla_kv_bytes(1, kv_lora, rope, 2.0)
        kv_per_token = mla_kv_bytes(len(attention), kv_lora, rope, value_bytes)
        key_len, value_len, kv_max = k_mla or key_len, v_mla or value_len, heads
    else:
        kv_per_token = sum(gqa_kv_bytes(1, kv_heads[i], key_len, value_len, value_bytes) for i in attention)
        kv_max = max(kv_heads) if kv_heads else 0
        per_layer_f16 = gqa_kv_bytes(1, kv_max, key_len, value_len, 2.0)
    if "linear" in kinds and head.value(keys.SSM.STATE_SIZE) is not None:
        ssm = keys.SSM
        kh, vh, kd = head.int(ssm.GROUP_COUNT), head.int(ssm.TIME_STEP_RANK), head.int(ssm.STATE_SIZE)
        vd = head.int(ssm.INNER_SIZE) // vh
        kernel = head.int(ssm.CONV_KERNEL)
        dims = {"linear_key_heads": kh, "linear_value_heads": vh, "linear_key_head_dim": kd,
                "linear_value_head_dim": vd, "linear_conv_kernel": kernel,
                "recurrent_state_bytes": delta_net_state_bytes(kh, vh, kd, vd, kernel)}
    notes += [f"{role} tensor types by bytes: {_shares(c)}" for role, c in types.items() if c]
    file_type = head.value(keys.General.FILE_TYPE)
    dominant = (types["expert"] or types["dense"]).most_common(1)
    quant = _file_type_name(file_type, file_types) or (dominant[0][0] if dominant else "unknown")
    return assemble(tensors=specs, mtp_tensors=mtp, architecture=arch, source=path, quant=quant, layers=layers,
                    hidden=hidden, heads=heads, kv_heads=kv_max, head_dim=key_len, vocab=vocab, experts=experts,
                    top_k=top_k,
                    shared_experts=head.int(llm.EXPERT_SHARED_COUNT, 1 if shared else 0, minimum=0) if experts else 0,
                    kv_bytes_per_token=kv_per_token, attention_layers=len(attention), notes=notes,
                    layer_kinds=tuple(kinds), sliding_window=window, value_head_dim=value_len,
                    kv_bytes_per_layer_f16=per_layer_f16, bytes_from="gguf", **dims)


def _check_header(path: str) -> int:
    """The fixed start of a GGUF file, read before gguf memory-maps it (:func:`sim.core.inputs.read_head`: a regular
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


def _open(path: str, gguf: Any) -> Any:
    import numpy as np

    size = _check_header(path)
    try:
        with np.errstate(over="ignore"):  # a damaged offset wraps in gguf's sum: told below, not warned raw
            reader = _header_reader()(path)
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


def _tensor(path: str, t: Any) -> TensorSpec:
    """A tensor of the file as a TensorSpec: every dimension at least 1 and at most ``MAX_DIM`` (a zero would make
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
    return spec(t.name, shape, t.tensor_type.name, int(t.n_bytes))


def _other_shards(path: str, head: _Header, gguf: Any, keys: Any) -> list[Any]:
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
        found += list(_open(shard, gguf).tensors)
    return found


def _layer_kinds(head: _Header, layers: int, kv_heads: list[int], keys: Any,
                 notes: list[str]) -> tuple[list[str], list[int]]:
    """Each block's kind (full, sliding, linear, mla) and the blocks that keep a per-token KV cache: not those
    without KV heads (recurrent layers of a hybrid), not Qwen3-Next's linear-attention layers, not the
    sliding-window layers of a model that also has full ones."""
    kinds = ["mla" if head.value(keys.Attention.KV_LORA_RANK) is not None else "full"] * layers
    candidates = [i for i in range(layers) if kv_heads[i] > 0]
    if len(candidates) < layers:
        notes.append(f"{layers - len(candidates)} layers without KV heads (recurrent) keep no per-token cache")
    interval = head.value(keys.LLM.FULL_ATTENTION_INTERVAL)
    if isinstance(interval, int) and interval > 1:
        linear = [i for i in candidates if (i + 1) % interval != 0]
        notes.append(f"{len(linear)} linear-attention layers keep a fixed-size state, not a per-token KV cache")
        candidates = [i for i in candidates if (i + 1) % interval == 0]
    for i in set(range(layers)) - set(candidates):
        kinds[i] = "linear"
    window = head.value(keys.Attention.SLIDING_WINDOW)
    pattern = head.value(keys.Attention.SLIDING_WINDOW_PATTERN)
    if isinstance(pattern, int) and pattern > 1:  # llama.cpp: layer i slides unless i % pattern == pattern - 1
        sliding = {i for i in candidates if i % pattern < pattern - 1}
    elif isinstance(pattern, list) and len(pattern) >= layers:
        sliding = {i for i in candidates if pattern[i]}
    elif head.arch == "gpt-oss" and window:  # llama.cpp hard-codes gpt-oss: every other layer, from the first
        sliding = {i for i in candidates if i % 2 == 0}
    else:
        sliding = set()
    for i in sliding:
        kinds[i] = "sliding"
    if sliding and len(sliding) < len(candidates):
        notes.append(f"{len(sliding)} sliding-window layers not counted per token: they hold at most "
                     f"{window} tokens each")
        candidates = [i for i in candidates if i not in sliding]
    return kinds, candidates


def _shares(types: Counter[str]) -> str:
    total = sum(types.values())
    return ", ".join(f"{name} {n / total:.0%}" for name, n in types.most_common())


def _file_type_name(value: Any, file_types: Any) -> str | None:
    """``general.file_type`` as the scheme's usual name (MOSTLY_Q4_K_M -> Q4_K_M), or None."""
    if not isinstance(value, int):
        return None
    try:
        name = file_types(value).name
    except ValueError:
        return None
    return None if name == "GUESSED" else name.removeprefix("MOSTLY_").removeprefix("ALL_")
