"""A GGUF file -> :class:`ModelGeometry`, from its header only (read by :mod:`sim.formats.gguf`): the metadata
(``general.architecture``, ``{arch}.block_count``, ``{arch}.expert_count``, ...; key names from
``gguf.constants.Keys``) and the tensor table (names, shapes, types). ``gguf.GGUFReader`` memory-maps the file
and no tensor data is read (string arrays, the tokenizer's vocabulary, are skipped rather than decoded: see
:func:`sim.formats.gguf.header_reader`).

Parameters and bytes are the tensors' own: ``n_elements`` and ``n_bytes`` of each. The routed experts are the
tensors named ``blk.N.ffn_*_exps.*`` (gate, up, down, fused gate_up, their biases); everything else is dense (router
``ffn_gate_inp``, shared experts ``ffn_*_shexp``, attention, norms, embeddings, output). ``expert_bytes`` is the
expert tensors' bytes / (moe_layers x experts): the mean over layers when a mix gives some layers more bits.
Multi-token-prediction blocks (the last ``{arch}.nextn_predict_layers`` blocks) are left out, as for config.json.
A split file (``name-00001-of-00003.gguf``) is read whole: the other shards are found beside it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.gguf import GgufMetadata, checked_tensor, gguf_module, open_gguf, other_shards
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


def read_gguf(path: str, kv_type: str = "f16") -> ModelGeometry:
    """Read the GGUF file ``path`` (with its other shards, when split) as a geometry, with a KV cache of
    ``kv_type`` values (f16 default: 2 bytes each). Raises ScenarioError (file, key, what was expected) for a
    missing file, a file that is not a GGUF, or a missing metadata key."""
    _, keys, file_types = gguf_module()
    try:
        value_bytes = kv_bytes(kv_type)
    except ValueError as exc:
        raise ScenarioError("--kv-type", kv_type, str(exc)) from None
    reader = open_gguf(path)
    others = other_shards(path, GgufMetadata(path, reader, ""), keys)
    arch_field = reader.fields.get(keys.General.ARCHITECTURE)
    arch = arch_field.contents() if arch_field is not None else None
    if not isinstance(arch, str) or not arch:
        raise ScenarioError(path, keys.General.ARCHITECTURE, "missing: expected the model's architecture name")
    head = GgufMetadata(path, reader, arch)
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
                    kv_bytes_per_layer_f16=per_layer_f16, bytes_from="gguf",
                    train_context=head.int(llm.CONTEXT_LENGTH, 0, minimum=0), **dims)


def _layer_kinds(head: GgufMetadata, layers: int, kv_heads: list[int], keys: Any,
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


def _tensor(path: str, t: Any) -> TensorSpec:
    """A tensor of the file (checked by :func:`sim.formats.gguf.checked_tensor`) as a TensorSpec."""
    entry = checked_tensor(path, t)
    return spec(entry.name, entry.shape, entry.qtype, entry.n_bytes)


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
