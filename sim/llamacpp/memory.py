"""What llama.cpp allocates on each device, and what happens when a card cannot hold it.

Per card: the weights placed there, the KV cache of the blocks it holds (``ctx_size`` cells of each block's K and V
at their cache types), its compute buffer (the largest intermediate results of one ``ubatch``: activations,
attention scores without flash attention, and the logits of a whole ubatch on the card holding the output head) and
the CUDA context. On the CPU: its weights (mapped from the file with mmap), its blocks' KV and its compute buffer.

A card whose allocations exceed its free VRAM (capacity, less other tenants and, under Windows, what the desktop
keeps) fails to load, as llama.cpp does (``cudaMalloc failed: out of memory``), unless the driver falls back to
shared system memory (Windows' default): then the excess lives in host RAM and every read the card makes of it
crosses the link. Which allocations the driver moves is its choice; here each byte the card reads is in system
memory with the share the excess is of everything the card allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.units import GIB, MIB
from sim.llamacpp.placement import CPU, Placement

KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
                 "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}  # bytes per cached value (ggml block sizes)


@dataclass(frozen=True)
class DeviceMemory:
    """One device's allocations (bytes) and, for a card, what it has free for them."""

    device: str
    weights: float
    kv: float
    compute: float
    context: float
    free: float | None  # a card's free VRAM (bytes); None: host RAM (not limited here)

    @property
    def total(self) -> float:
        return self.weights + self.kv + self.compute + self.context

    @property
    def excess(self) -> float:
        """Bytes beyond the free VRAM (0 when it fits, or for the CPU)."""
        return max(self.total - self.free, 0.0) if self.free is not None else 0.0

    @property
    def spill_share(self) -> float:
        """Share of the card's allocations beyond its VRAM (fraction)."""
        return self.excess / self.total if self.total > 0 else 0.0

    def summary(self) -> str:
        gib = f"{self.total / GIB:.2f} GiB (weights {self.weights / GIB:.2f}, KV {self.kv / GIB:.2f}, compute " \
              f"{self.compute / GIB:.2f}" + (f", CUDA context {self.context / GIB:.2f}" if self.context else "") + ")"
        if self.free is None:
            return f"{self.device}: {gib}"
        return f"{self.device}: {gib} of {self.free / GIB:.2f} GiB free"


def kv_bytes_per_cell(placement: Placement, cache_type_k: str, cache_type_v: str) -> float:
    """One token's K and V in one block at the cache types (bytes): the geometry's f16 KV, K and V halves scaled
    (every block with a KV cache holds the same)."""
    f16 = placement.model.kv_bytes_per_token_per_block
    return f16 / 2 * (KV_TYPE_BYTES[cache_type_k] + KV_TYPE_BYTES[cache_type_v]) / 2.0


def compute_buffer_bytes(placement: Placement, device: str, ubatch: int, ctx: int, flash_attn: bool) -> float:
    """The compute buffer llama.cpp reserves on ``device`` for a worst-case ubatch (bytes, an estimate): f32
    activations of the widest block part the device runs (hidden states, and the routed experts' or dense FFN's
    inner width for every selected expert), the attention scores of a whole context without flash attention, and
    the ubatch's logits on the device holding the output head."""
    g = placement.model.geometry
    runs = any(d == device for d in placement.block_device) or any(d == device for d in placement.devices)
    if not runs:
        return 0.0
    inner = g.expert_params / (3 * g.hidden) if g.expert_params else 4 * g.hidden
    act = ubatch * 4.0 * (4 * g.hidden + 3 * max(g.top_k, 1) * inner)
    scores = 0.0 if flash_attn else ubatch * 4.0 * g.heads * ctx
    logits = ubatch * 4.0 * g.vocab if placement.output_device == device else 0.0
    return act + scores + logits


def device_memory(placement: Placement, *, ctx_size: int, ubatch: int, cache_type_k: str, cache_type_v: str,
                  flash_attn: bool, kv_offload: bool, free_bytes: dict[str, float],
                  cuda_context_mib: float) -> list[DeviceMemory]:
    """Every device's allocations: the CPU first, then each card in order."""
    out = []
    homes = [home if kv_offload else CPU for home in placement.block_device]
    cell = kv_bytes_per_cell(placement, cache_type_k, cache_type_v)
    for device in (CPU, *placement.gpus):
        kv = ctx_size * cell * homes.count(device)
        compute = compute_buffer_bytes(placement, device, ubatch, ctx_size, flash_attn)
        weights = placement.bytes_on(device)
        used = device == CPU or weights > 0 or kv > 0
        context = cuda_context_mib * MIB if device != CPU and used else 0.0
        out.append(DeviceMemory(device, weights, kv, compute if used else 0.0, context,
                                None if device == CPU else free_bytes[device]))
    return out


def out_of_memory(mem: DeviceMemory) -> str:
    """llama.cpp's words when a card cannot hold its buffers, with what it tried to hold."""
    index = mem.device.removeprefix("CUDA")
    return (f"llama.cpp cannot load: {mem.summary()}; it would fail with 'ggml_backend_cuda_buffer_type_alloc_buffer: "
            f"allocating {mem.weights / MIB:.2f} MiB on device {index}: cudaMalloc failed: out of memory' "
            "(fewer -ngl layers, a larger --n-cpu-moe, a smaller -c or -ub, or a quantized KV cache)")
