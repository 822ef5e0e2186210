"""What llama.cpp allocates on each device, and what happens when a card cannot hold it.

Per card: the weights placed there, the cache of the blocks it holds (:meth:`~sim.llamacpp.layers.Mixer.cells` cells
of each block's K and V at their cache types; a linear-attention block's per-sequence state instead), its compute
buffer and what its backend holds besides (``context_mib``: driver context, libraries, pools). On the CPU: its
weights (mapped from the file with mmap), its blocks' caches and its compute buffer.

The compute buffer is the peak of the intermediate results llama.cpp's graph allocator keeps alive at once while it
reserves a worst-case ubatch (``n_ubatch`` tokens, every one an output): the largest of

- the logits of the whole ubatch (``ubatch x vocab`` floats) on the device holding the output head,
- a block's FFN (``ubatch x`` its inner width ``x 3`` floats: gate, up and their product; routed experts: for each of
  the ``top_k`` experts a token goes to),
- a block's attention: without flash attention the scores of the ubatch against every cell (``ubatch x cells x
  heads`` floats, twice during the soft-max); with it, flash attention's own f16 copies of a quantized cache,

plus the hidden states that live across them (``ubatch x hidden x 4`` floats).

A card whose allocations exceed its free VRAM (capacity, less other tenants and, under Windows, what the desktop
keeps) fails to load, as llama.cpp does, unless the driver falls back to shared system memory (Windows' default):
then the excess lives in host RAM and every read the card makes of it crosses the link, with the share the excess is
of everything the card allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.units import GIB, MIB
from sim.llamacpp.layers import F32, Mixer
from sim.llamacpp.placement import CPU, Placement

KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
                 "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}  # bytes per cached value (ggml block sizes)
HIDDEN_STATES = 4  # hidden-state tensors of a ubatch alive across a block (residual, normed input, output, ...)


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
              f"{self.compute / GIB:.2f}" + (f", backend context {self.context / GIB:.2f}" if self.context else "") \
              + ")"
        if self.free is None:
            return f"{self.device}: {gib}"
        return f"{self.device}: {gib} of {self.free / GIB:.2f} GiB free"


def cache_bytes(mixer: Mixer, *, ctx_size: int, ubatch: int, sequences: int, k_bytes: float,
                v_bytes: float) -> float:
    """One block's cache: its cells at the cache types, or a linear-attention block's states (bytes)."""
    if mixer.kind == "linear":
        return mixer.state_bytes * sequences
    return mixer.cells(ctx_size, ubatch, sequences) * mixer.cell_bytes(k_bytes, v_bytes)


def compute_buffer_bytes(placement: Placement, mixers: tuple[Mixer, ...], device: str, *, ubatch: int,
                         ctx_size: int, flash_attn: bool, cache_type_k: str, sequences: int = 1) -> float:
    """The compute buffer llama.cpp reserves on ``device`` (bytes, the module docstring's peak)."""
    g = placement.model.geometry
    blocks = [b for b, d in enumerate(placement.block_device) if d == device]
    here = [(role, params) for _, role, ps in placement.path for d, _, params in ps if d == device]
    if not blocks and not here and placement.output_device != device:
        return 0.0
    hidden = HIDDEN_STATES * ubatch * g.hidden * F32
    peak = 0.0
    if placement.output_device == device:
        peak = max(peak, ubatch * g.vocab * F32)
    expert_inner = g.expert_params / (3 * g.hidden) if g.expert_params else 0.0
    for role, params in here:
        if role == "experts":
            peak = max(peak, 3 * ubatch * max(g.top_k, 1) * expert_inner * F32)
        elif role == "ffn":  # a dense FFN's or shared expert's inner width: its parameters over 3 x hidden
            peak = max(peak, 3 * ubatch * params / (3 * g.hidden) * F32)
    for b in blocks:
        m = mixers[b]
        if m.kind == "linear":
            continue
        cells = m.cells(ctx_size, ubatch, sequences)
        if not flash_attn:
            peak = max(peak, 2 * ubatch * cells * m.heads * F32)
        elif cache_type_k not in ("f16", "bf16", "f32"):
            peak = max(peak, cells * (m.cache_k + m.cache_v) * 2.0)  # f16 copies of a quantized cache
    return hidden + peak


def device_memory(placement: Placement, mixers: tuple[Mixer, ...], *, ctx_size: int, ubatch: int,
                  cache_type_k: str, cache_type_v: str, flash_attn: bool, kv_offload: bool,
                  free_bytes: dict[str, float], context_mib: dict[str, float], sequences: int = 1
                  ) -> list[DeviceMemory]:
    """Every device's allocations: the CPU first, then each card in order (``context_mib``: per card, what its
    backend holds besides its buffers)."""
    out = []
    homes = [home if kv_offload else CPU for home in placement.block_device]
    kb, vb = KV_TYPE_BYTES[cache_type_k], KV_TYPE_BYTES[cache_type_v]
    caches = [cache_bytes(m, ctx_size=ctx_size, ubatch=ubatch, sequences=sequences, k_bytes=kb, v_bytes=vb)
              for m in mixers]
    for device in (CPU, *placement.gpus):
        kv = sum(c for c, home in zip(caches, homes, strict=True) if home == device)
        compute = compute_buffer_bytes(placement, mixers, device, ubatch=ubatch, ctx_size=ctx_size,
                                       flash_attn=flash_attn, cache_type_k=cache_type_k, sequences=sequences)
        weights = placement.bytes_on(device)
        used = device == CPU or weights > 0 or kv > 0
        context = context_mib.get(device, 0.0) * MIB if device != CPU and used else 0.0
        out.append(DeviceMemory(device, weights, kv, compute if used else 0.0, context,
                                None if device == CPU else free_bytes[device]))
    return out


def out_of_memory(mem: DeviceMemory, backend: str = "cuda") -> str:
    """llama.cpp's words when a card cannot hold its buffers, with what it tried to hold."""
    digits = "".join(ch for ch in mem.device if ch.isdigit()) or "0"
    alloc = {"cuda": "cudaMalloc failed: out of memory", "hip": "hipMalloc failed: out of memory",
             "vulkan": "vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
             "sycl": "failed to allocate SYCL buffer", "metal": "failed to allocate buffer"}.get(backend,
                                                                                                "out of memory")
    return (f"llama.cpp cannot load: {mem.summary()}; it would fail with 'allocating {mem.weights / MIB:.2f} MiB on "
            f"device {digits}: {alloc}' (fewer -ngl layers, a larger --n-cpu-moe, a smaller -c or -ub, or a "
            "quantized KV cache)")
