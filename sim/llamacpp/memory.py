"""What llama.cpp allocates on each device, and what happens when a card cannot hold it.

Per card: the weights placed there, the cache of the blocks it holds (:meth:`~sim.llamacpp.layers.Mixer.cells` cells
of each block's K and V at their cache types; a linear-attention block's per-sequence state instead), its compute
buffer and what its backend holds besides (``context_mib``: driver context, libraries, the never-shrinking memory
pool). On the CPU: its weights (mapped from the file with mmap), its blocks' caches, its compute buffer and the
output buffer. docs/research/llamacpp_internals.md sections 1-3 give the sources of every rule below.

The compute buffer is what llama.cpp's graph allocator needs for a worst-case ubatch (``n_ubatch`` tokens, every one
an output, against a full cache): the peak of the tensors alive at once, not their sum, so the largest phase of

- the output head's: the logits of the whole ubatch (``ubatch x vocab`` floats) and the normed hidden state, on the
  device holding the output head;
- one layer's attention: without flash attention the scores of the ubatch against every cell (``heads x cells x
  ubatch`` floats) and the f32 mask (``cells x ubatch``); with it, the mask in f16 and the output, and on CUDA/HIP the
  f16 copy of a quantized cache for the tile kernels (``cells x (K + V widths) x 2``);
- one layer's FFN: dense, gate, up and their product (``3 x inner x ubatch`` floats); routed experts, the router's
  logits and gate, up and the GLU for every selected expert (``3 x inner x top_k x ubatch``) plus the experts'
  outputs (``hidden x top_k x ubatch``),

or, with op offload on (mainline llama.cpp), the largest weight tensor left in host memory with the activations of
the op it feeds: a prompt's ops on it run on the card, which receives the tensor into its compute buffer (ik_llama.cpp
does not stage it there); plus the hidden states that live across the phases (``4 x ubatch x hidden`` floats).
The CPU's (``CUDA_Host``) compute buffer holds the graph inputs built on the CPU: the embedded tokens (``hidden x
ubatch`` floats) and the f32 mask (``cells x ubatch``); the CPU's own phases too when it runs blocks.

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


def _phases(placement: Placement, mixers: tuple[Mixer, ...], device: str, *, ubatch: int, ctx_size: int,
            flash_attn: bool, cache_type_k: str, backend: str, sequences: int) -> float:
    """The largest phase (bytes) of the graph ``device`` runs (module docstring)."""
    g = placement.model.geometry
    peak = 0.0
    if placement.output_device == device:
        peak = (g.vocab + g.hidden) * ubatch * F32
    expert_inner = g.expert_params / (3 * g.hidden) if g.expert_params else 0.0
    for _, role, parts in placement.path:
        for d, _, params in parts:
            if d != device:
                continue
            if role == "experts":
                k = max(g.top_k, 1)
                peak = max(peak, (g.experts_per_layer + 3 * expert_inner * k + g.hidden * k) * ubatch * F32)
            elif role == "ffn":  # a dense FFN's or shared expert's inner width: its parameters over 3 x hidden
                peak = max(peak, 3 * params / (3 * g.hidden) * ubatch * F32)
    quantized = cache_type_k not in ("f16", "bf16", "f32")
    for b, home in enumerate(placement.block_device):
        m = mixers[b]
        if home != device or m.kind == "linear":
            continue
        cells = m.cells(ctx_size, ubatch, sequences)
        if not flash_attn:
            phase = (m.heads + 1) * cells * ubatch * F32
        else:
            phase = cells * ubatch * 2.0 + m.heads * m.value_dim * ubatch * F32
            if quantized and backend in ("cuda", "hip"):
                phase += cells * (m.cache_k + m.cache_v) * 2.0
        peak = max(peak, phase)
    return peak


def compute_buffer_bytes(placement: Placement, mixers: tuple[Mixer, ...], device: str, *, ubatch: int,
                         ctx_size: int, flash_attn: bool, cache_type_k: str, sequences: int = 1,
                         backend: str = "cuda", staged_bytes: float = 0.0) -> float:
    """The compute buffer llama.cpp reserves on ``device`` (bytes, the module docstring's peak); ``staged_bytes``:
    the host-resident weight tensor a card receives for offloaded prompt ops (0: none)."""
    g = placement.model.geometry
    runs = placement.output_device == device or any(d == device for _, _, ps in placement.path for d, _, _ in ps)
    if device == CPU:
        cells = max((m.cells(ctx_size, ubatch, sequences) for m in mixers if m.kind != "linear"), default=0)
        inputs = (g.hidden + cells) * ubatch * F32
        own = _phases(placement, mixers, CPU, ubatch=ubatch, ctx_size=ctx_size, flash_attn=flash_attn,
                      cache_type_k=cache_type_k, backend="cpu", sequences=sequences) if runs else 0.0
        return inputs + own
    if not runs and not staged_bytes:
        return 0.0
    peak = _phases(placement, mixers, device, ubatch=ubatch, ctx_size=ctx_size, flash_attn=flash_attn,
                   cache_type_k=cache_type_k, backend=backend, sequences=sequences)
    if staged_bytes:  # the received weight and the activations of the op it feeds live together
        k = max(g.top_k, 1)
        inner = g.expert_params / (3 * g.hidden) if g.expert_params else 0.0
        peak = max(peak, staged_bytes + (g.experts_per_layer + 3 * inner * k + g.hidden * k) * ubatch * F32)
    return HIDDEN_STATES * ubatch * g.hidden * F32 + peak


def staged_tensor_bytes(placement: Placement) -> float:
    """The largest weight tensor left in host memory that a prompt's ops would run on a card (the token embedding
    is looked up on the CPU, never offloaded)."""
    return max((t.bytes for t, d in zip(placement.model.tensors, placement.devices, strict=True)
                if d == CPU and t.role != "embedding"), default=0.0)


def device_memory(placement: Placement, mixers: tuple[Mixer, ...], *, ctx_size: int, ubatch: int,
                  cache_type_k: str, cache_type_v: str, flash_attn: bool, kv_offload: bool,
                  free_bytes: dict[str, float], context_mib: dict[str, float], sequences: int = 1,
                  backend: str = "cuda", op_offload: bool = True, stages_host_weights: bool = True
                  ) -> list[DeviceMemory]:
    """Every device's allocations: the CPU first, then each card in order (``context_mib``: per card, what its
    backend holds besides its buffers; ``stages_host_weights``: mainline llama.cpp's op offload receives a
    host-resident weight into the first card's compute buffer)."""
    out = []
    homes = [home if kv_offload else CPU for home in placement.block_device]
    kb, vb = KV_TYPE_BYTES[cache_type_k], KV_TYPE_BYTES[cache_type_v]
    caches = [cache_bytes(m, ctx_size=ctx_size, ubatch=ubatch, sequences=sequences, k_bytes=kb, v_bytes=vb)
              for m in mixers]
    staged = staged_tensor_bytes(placement) if op_offload and stages_host_weights and placement.gpus else 0.0
    for device in (CPU, *placement.gpus):
        kv = sum(c for c, home in zip(caches, homes, strict=True) if home == device)
        first_card = bool(placement.gpus) and device == placement.gpus[0]
        compute = compute_buffer_bytes(placement, mixers, device, ubatch=ubatch, ctx_size=ctx_size,
                                       flash_attn=flash_attn, cache_type_k=cache_type_k, sequences=sequences,
                                       backend=backend, staged_bytes=staged if first_card else 0.0)
        if device == CPU:
            compute += placement.model.geometry.vocab * max(sequences, 1) * F32  # the output buffer
        weights = placement.bytes_on(device)
        used = device == CPU or weights > 0 or kv > 0 or (first_card and staged > 0)
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
