"""Which device holds each tensor of a model, as llama.cpp decides it from its flags.

The model's tensors are named as in a GGUF file (``blk.12.ffn_up_exps.weight``) with their bytes from the model's
geometry: per block its attention (q, k, v, output and norms, split by their shapes), its FFN part outside the routed
experts (router, shared experts or a dense FFN) and its three routed-expert tensors; the token embedding, the output
head and the final norm. A geometry read from a config.json knows these roles' totals, not each block's: blocks share
them equally (a DeepSeek model's few dense-FFN blocks are spread over all of them).

llama.cpp's rules, in its order:
- ``-ngl N``: the output head counts as the last of ``blocks + 1`` layers; the last N of them are on the GPUs, the
  others on the CPU (``-ngl 48`` of a 48-block model: blocks 1-47 and the output head; llama.cpp's
  ``i_gpu_start = n_layer + 1 - n_gpu_layers``). The token embedding always stays on the CPU (its rows are looked
  up there).
- GPU layers are divided among the cards in contiguous runs by ``-ts`` (default: in proportion to each card's free
  VRAM).
- ``-ot REGEX=BUFFER`` rules, ``--cpu-moe`` and ``--n-cpu-moe N`` (which stand for the rules
  ``blk\\.(0|...|N-1)\\.ffn_(up|down|gate)_exps=CPU``): a tensor goes to the buffer of the first rule whose regular
  expression is found in its name (a search, not a full match), whatever ``-ngl`` said. The ``-ot`` expressions are
  RE2's (linear time whatever is pasted, :func:`sim.config.llamacpp.compile_rule`); the flags' own rules are fixed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from sim.config.llamacpp import (
    Matcher,
    parse_rules,  # noqa: F401 - re-exported: the rules are parsed where they are checked
)
from sim.modelfiles.geometry import ModelGeometry

CPU = "CPU"
ROLES = ("attention", "ffn", "experts")  # a block's parts, in the order a token passes them


@dataclass(frozen=True)
class Tensor:
    """One weight tensor: its GGUF name, its block (-1: outside the blocks), its role, its bytes, its parameters
    (weights) and its GGUF type."""

    name: str
    block: int
    role: str  # attention | ffn | experts | output | embedding
    bytes: float
    params: float
    qtype: str = ""  # GGUF type name (Q4_K, F32, ...), or a checkpoint format


@dataclass(frozen=True)
class ModelTensors:
    """A model's tensors and what a token reads of them."""

    geometry: ModelGeometry
    tensors: tuple[Tensor, ...]
    scale: float  # bytes of the file over the geometry's (1: the geometry's own)

    @property
    def blocks(self) -> int:
        return self.geometry.layers

    @property
    def kv_bytes_per_token_per_block(self) -> float:
        """KV of one token in one block at f16 (bytes), blocks with a KV cache sharing it equally."""
        g = self.geometry
        return g.kv_bytes_per_token / max(g.layers, 1)


def model_tensors(g: ModelGeometry, file_bytes: float | None = None) -> ModelTensors:
    """The tensors of ``g`` (its ``tensors``: GGUF names, bytes and types), the token embedding first, block by
    block (attention, FFN, experts), the final norm, the output head last; with ``file_bytes`` (a real file's
    size), every size scaled to add up to it. A model whose output head is tied to the embeddings gets llama.cpp's
    copy of them as its ``output.weight`` (not in the file, not scaled into it). Tensors outside the blocks other
    than the embedding (the final norm, rotary tables) travel with the output head."""
    scale = file_bytes / g.weights_bytes if file_bytes and g.weights_bytes else 1.0
    order = {"attention": 0, "ffn": 1, "experts": 2}
    first, blocks, last, output = [], [], [], []
    for t in g.tensors:
        if t.role == "embedding":
            first.append(Tensor(t.name, -1, "embedding", t.bytes * scale, float(t.elements), t.qtype))
        elif t.role == "output":
            output.append(Tensor(t.name, -1, "output", t.bytes * scale, float(t.elements), t.qtype))
        elif t.block < 0 or t.role == "output_norm":
            last.append(Tensor(t.name, -1, "output", t.bytes * scale, float(t.elements), t.qtype))
        else:
            blocks.append(Tensor(t.name, t.block, t.role, t.bytes * scale, float(t.elements), t.qtype))
    blocks.sort(key=lambda t: (t.block, order[t.role]))
    if not any(t.name == "output.weight" for t in output):
        emb = next((t for t in first if t.name == "token_embd.weight"), None)
        if emb is not None:  # tied: llama.cpp duplicates the embedding for the output head
            output.append(Tensor("output.weight", -1, "output", emb.bytes, emb.params, emb.qtype))
    output.sort(key=lambda t: t.name == "output.weight")  # the head itself last: the costs read tensors[-1]
    return ModelTensors(g, tuple(first + blocks + last + output), scale)


@dataclass(frozen=True)
class Placement:
    """Each tensor's device (``CPU`` or ``CUDA0``, ``CUDA1``, ...) and each block's device by ``-ngl`` and ``-ts``
    (where its KV cache lives and its attention runs)."""

    model: ModelTensors
    devices: tuple[str, ...]  # per tensor, in model.tensors' order
    block_device: tuple[str, ...]  # per block
    gpus: tuple[str, ...]  # the machine's cards as llama.cpp names them, in order

    def bytes_on(self, device: str) -> float:
        """Weight bytes on ``device``."""
        return self._bytes_by_device.get(device, 0.0)

    @cached_property
    def _bytes_by_device(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for t, d in zip(self.model.tensors, self.devices, strict=True):
            out[d] = out.get(d, 0.0) + t.bytes
        return out

    @property
    def output_device(self) -> str:
        return self.devices[-1]

    @cached_property
    def path(self) -> tuple[tuple[int, str, tuple[tuple[str, float, float], ...]], ...]:
        """(block, role, ((device, bytes, parameters), ...)) along a token's path, parts without tensors left out."""
        parts: dict[tuple[int, str], dict[str, list[float]]] = {}
        for t, d in zip(self.model.tensors, self.devices, strict=True):
            if t.block < 0:
                continue
            acc = parts.setdefault((t.block, t.role), {}).setdefault(d, [0.0, 0.0])
            acc[0] += t.bytes
            acc[1] += t.params
        out = []
        for b in range(self.model.blocks):
            for role in ROLES:
                by_device = parts.get((b, role))
                if by_device:
                    out.append((b, role, tuple((d, v[0], v[1]) for d, v in by_device.items())))
        return tuple(out)

    @cached_property
    def kernel_shares(self) -> dict[tuple[int, str, str], dict[str, float]]:
        """Per (block, role, device): the share of its parameters by the kernels a CUDA/HIP prompt multiplies them
        with (:func:`kernel_class`)."""
        sums: dict[tuple[int, str, str], dict[str, float]] = {}
        for t, d in zip(self.model.tensors, self.devices, strict=True):
            if t.block < 0 or t.params <= 0:
                continue
            acc = sums.setdefault((t.block, t.role, d), {})
            kind = kernel_class(t.qtype)
            acc[kind] = acc.get(kind, 0.0) + t.params
        return {k: {kind: p / sum(v.values()) for kind, p in v.items()} for k, v in sums.items()}

    @cached_property
    def blocks_running(self) -> tuple[int, int]:
        """(blocks with a part on the CPU, blocks with a part on a card)."""
        devices: dict[int, set[str]] = {}
        for b, _, parts in self.path:
            devices.setdefault(b, set()).update(d for d, _, _ in parts)
        return (sum(1 for d in devices.values() if CPU in d), sum(1 for d in devices.values() if d - {CPU}))

    def cpu_expert_blocks(self) -> int:
        """Blocks whose routed experts are (mostly) on the CPU."""
        return sum(1 for b, role, parts in self.path if role == "experts"
                   and max(parts, key=lambda x: x[1])[0] == CPU)


# GGUF types llama.cpp's CUDA/HIP quantized matrix kernels (MMQ, int8) multiply directly (ggml-cuda mmq.cu,
# docs/research/llamacpp_internals.md section 6); other quantized types are dequantized to f16 and multiplied by
# cuBLAS/hipBLAS, as float weights are
MMQ_TYPES = frozenset({"Q1_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                       "IQ1_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "MXFP4",
                       "NVFP4"})
FLOAT_TYPES = frozenset({"F16", "BF16", "F32"})


def kernel_class(qtype: str) -> str:
    """``quant`` for a type with int8 matrix kernels, ``float`` for float weights, ``dequant`` for the rest (an
    unknown type counts as quantized)."""
    q = (qtype or "").upper()
    if q in FLOAT_TYPES:
        return "float"
    if q in MMQ_TYPES or not q:
        return "quant"
    return "dequant"


def place(model: ModelTensors, *, n_gpu_layers: int, gpus: tuple[str, ...], split: list[float],
          rules: list[tuple[Matcher, str]], n_cpu_moe: int = 0, cpu_moe: bool = False) -> Placement:
    """Every tensor's device by llama.cpp's rules (module docstring). ``split``: each card's share of the GPU
    blocks (any positive scale), in ``gpus``' order."""
    blocks = model.blocks
    ngl = min(n_gpu_layers, blocks + 1) if gpus else 0  # the output head counts as the last layer
    first_gpu = blocks + 1 - ngl
    total = sum(split) or 1.0
    bounds, acc = [], 0.0
    for share in split:
        acc += share / total
        bounds.append(acc)

    def device_of(layer: int) -> str:  # layer == blocks: the output head
        if ngl == 0 or layer < first_gpu:
            return CPU
        pos = (layer - first_gpu) / ngl
        return gpus[next((i for i, edge in enumerate(bounds) if pos < edge - 1e-12), len(gpus) - 1)]

    block_device = [device_of(b) for b in range(blocks)]
    out_device = device_of(blocks)
    moe_rule = None
    if cpu_moe:
        moe_rule = (re.compile(r"\.ffn_(up|down|gate)_exps"), CPU)
    elif n_cpu_moe > 0:  # layers past the model's blocks have no tensor: the rule lists only those it has
        layers = "|".join(str(i) for i in range(min(n_cpu_moe, blocks)))
        moe_rule = (re.compile(r"^blk\.(" + layers + r")\.ffn_(up|down|gate)_exps"), CPU)
    all_rules: list[tuple[Matcher, str]] = list(rules) + ([moe_rule] if moe_rule else [])
    devices = []
    for t in model.tensors:
        if t.role == "embedding":
            devices.append(CPU)
            continue
        default = out_device if t.role == "output" else block_device[t.block]
        devices.append(next((dev for pattern, dev in all_rules if pattern.search(t.name)), default))
    return Placement(model, tuple(devices), tuple(block_device), gpus)
