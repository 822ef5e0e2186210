"""Time of a decode step and of a prompt under llama.cpp, from the placement, the hardware's specs and the cost
parameters, written as a :class:`~sim.llamacpp.ledger.Ledger`.

A token passes the blocks in order and, in each, its mixer (attention, MLA or linear attention, :mod:`layers`),
the FFN part outside the routed experts and the routed experts, each on the device holding it
(:mod:`sim.llamacpp.placement`). llama.cpp runs these one after another: the CPU part of a block and its GPU part
never overlap. Every part costs the longer of its reads and its arithmetic on its device:

- a card reads at ``gpu_memory_efficiency.B x hbm_gbps`` (B its backend); its prompt arithmetic runs on the units of
  its path (:func:`sim.llamacpp.backends.compute_path`) at ``matrix_efficiency.P x`` its dense FP16 matrix peak
  (or ``vector_efficiency.P x`` its FP32 vector peak on a path without matrix kernels), a decode step's at
  ``vector_efficiency.B_vector x`` the vector peak, a prompt's flash attention at ``flash_attn_efficiency.P x`` the
  path's peak (``vector_flash_efficiency`` on a vector path); a unified-memory chip's GPU runs a prompt's matrix
  products at ``soc_compute_share`` of that rate (one power budget for CPU, GPU and memory); bytes the driver moved
  to shared system memory (:mod:`sim.llamacpp.memory`) are read over the link at ``spill_link_share x`` its rate;
- the CPU reads at ``cpu_memory_efficiency x`` the host's paper DRAM bandwidth, or ``threads x cpu_thread_gbps``
  when fewer threads cannot pull that much, and computes at ``cpu_flops_efficiency x`` its FP32 SIMD peak (cores x
  clock x FLOPs per cycle; ik_llama.cpp's kernels: ``ik_cpu_flops_efficiency``). CPU-held weights a mapping cannot
  keep resident (host RAM smaller than them) are read from the disk each pass.

A decode step of ``b`` sequences at context ``d`` reads every weight of its parts once, the routed experts its tokens
chose (``sum_e 1 - (1 - pi_e)^b`` of a block's experts, ``pi`` a token's inclusion probabilities under the model's
routing law, :mod:`sim.llamacpp.routing`) and each sequence's cache (:class:`~sim.llamacpp.layers.Mixer`);
up to ``VECTOR_ROWS`` sequences its products run on matrix-vector kernels, beyond on the matrix kernels a ubatch of
``b`` tokens uses; a routed expert's product has the rows routed to it (``b k`` over the experts touched), and while
those are at most ``VECTOR_ROWS`` it costs its reads and its vector arithmetic (the few rows of a batched step's
experts leave llama.cpp's ``mul_mat_id`` kernels bound by the weights they stream).
Each graph node a device runs costs ``node_s`` of its backend (:mod:`graph`), each hand-over between devices
``split_s``, each step (and each prompt ubatch) ``token_s`` of the main device's backend.

A prompt runs in ubatches of ``ubatch_size`` tokens (at most ``batch_size``). Weights in host RAM are computed by the
CPU for small ubatches; from ``offload_min_batch`` tokens on (with op offload on) llama.cpp copies each such tensor
whole over the link and the card computes it: pageable (mmap) memory crosses at ``link_share x`` the link's rate,
pinned (``--no-mmap``) at the link's rate, and host memory bounds both (a pageable copy passes every byte through
DRAM three times, a pinned one once). The attention over a cache in host RAM stays on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sim.core.errors import SimulationError
from sim.llamacpp.backends import uses_matrix_units, vector_path
from sim.llamacpp.graph import OUTPUT_NODES, attention_nodes, ffn_nodes
from sim.llamacpp.layers import Mixer, mixers
from sim.llamacpp.ledger import Channel, Ledger
from sim.llamacpp.memory import KV_TYPE_BYTES
from sim.llamacpp.params import CostParams
from sim.llamacpp.placement import CPU, Placement

# HIP on RDNA 3 multiplies a dense (non-expert) product of more rows than this with hipBLAS on dequantized weights,
# not its int8 kernels (ggml-cuda mmq.cu's RDNA 3 rule; docs/research/llamacpp_internals.md section 6); experts stay
# on MMQ (64 experts or more)
HIP_MMQ_ROWS = 128
# Fixed costs (graph build, kernel launches and dispatches, synchronisation) are the host CPU's work: node_s and
# token_s are at a core of this clock, and scale with the host's boost clock (GHz)
REFERENCE_GHZ = 4.0
VECTOR_ROWS = 8  # rows up to which llama.cpp multiplies with matrix-vector kernels (ggml-cuda MMVQ_MAX_BATCH_SIZE)
PAGEABLE_DRAM_PASSES = 3  # a pageable copy: the CPU reads the page, writes a pinned staging buffer, the DMA reads it
SOC_SHARE = "soc_compute_share"  # the share of its derived peak a unified chip's GPU sustains (sim.llamacpp.params)


@dataclass(frozen=True)
class Device:
    """One device's specs as the costs use them: bytes/s of its memory, FLOP/s of its prompt path's units and of its
    vector units, and for a card its backend, path, link (bytes/s, host -> card) and the share of its allocations in
    system memory."""

    name: str
    backend: str  # cuda, hip, vulkan, metal, sycl, opencl; cpu
    memory_bps: float  # paper bytes/s (a card's memory; the CPU: its read rate, already the threads' cap)
    peak_flops: float  # FLOP/s of the prompt path's units (the CPU: its FP32 SIMD peak)
    vector_flops: float  # FLOP/s of its vector units (decode arithmetic)
    path: str = "cpu"  # the prompt kernels' path (sim.llamacpp.backends.PATHS), "cpu" for the CPU
    link_bps: float = 0.0
    spill_share: float = 0.0
    resident_share: float = 1.0  # CPU: share of its mapped weights that stay in RAM (the rest is re-read from disk)
    disk_bps: float = 0.0  # CPU: the disk the non-resident weights are read from (bytes/s)
    thread_bps: float = 0.0  # CPU: what its threads can pull at most (threads x cpu_thread_gbps, bytes/s; 0: no cap)
    isa: str = ""  # CPU: its widest vector instruction set (avx2, avx512, neon, ...; "": not known)
    soc: bool = False  # the GPU of a unified-memory chip: its prompt arithmetic at ``soc_compute_share`` of its peak

    @property
    def is_cpu(self) -> bool:
        return self.name == CPU


@dataclass(frozen=True)
class Hardware:
    """The devices one engine runs on (by llama.cpp's names), its cost parameters and host DRAM's paper bandwidth
    (bytes/s), which bounds every copy from host memory."""

    devices: dict[str, Device]
    params: CostParams
    main_gpu: str | None  # the card large batches of CPU-held weights are copied to
    dram: float = float("inf")
    ik_kernels: bool = False  # ik_llama.cpp's CPU kernels
    os: str = "linux"  # the host's operating system (its driver's pageable copies)
    host_factor: float = 1.0  # REFERENCE_GHZ over the host's boost clock: fixed costs are CPU work (1: not known)

    def read(self, device: str) -> Channel:
        d = self.devices[device]
        if d.is_cpu:
            return ("cpu_memory_efficiency", d.memory_bps)
        return (self.params.name("gpu_memory_efficiency", d.backend), d.memory_bps)

    def gemm(self, device: str, kind: str = "quant") -> Channel:
        """The channel of a prompt's matrix products on ``device``; under CUDA and HIP, weights without int8 matrix
        kernels (``kind`` float or dequant) are multiplied in FP16 by cuBLAS/hipBLAS at ``fp16_matrix_efficiency``."""
        d = self.devices[device]
        if kind != "quant" and d.backend in ("cuda", "hip") and uses_matrix_units(d.path):
            return self._soc(d, (self.params.name("fp16_matrix_efficiency", d.path), d.peak_flops))
        if d.is_cpu:
            if d.peak_flops <= 0:
                raise SimulationError("the host CPU's arithmetic is not known (its clock and FLOPs per cycle: a "
                                      "catalog host type gives them, or host.boost_ghz and host.fp32_flops_per_cycle)"
                                      ", and this run computes on the CPU")
            family = "ik_cpu_flops_efficiency" if self.ik_kernels else "cpu_flops_efficiency"
            return (self.params.name(family, d.isa) if d.isa else family, d.peak_flops)
        family = "matrix_efficiency" if uses_matrix_units(d.path) else "vector_efficiency"
        return self._soc(d, (self.params.name(family, d.path), d.peak_flops))

    @staticmethod
    def _soc(d: Device, channel: Channel) -> Channel:
        """``channel`` on a unified chip's GPU: times the share of its peak an SoC sustains."""
        return (channel[0], channel[1], None, SOC_SHARE) if d.soc else channel

    def vector(self, device: str) -> Channel | None:
        """The channel of a decode step's arithmetic on ``device`` (None: a CPU whose peak is not known, whose
        memory-bound decode is then costed by its reads alone)."""
        d = self.devices[device]
        if d.is_cpu:
            return self.gemm(device) if d.peak_flops > 0 else None
        return (self.params.name("vector_efficiency", vector_path(d.backend)), d.vector_flops)

    def flash(self, device: str) -> Channel:
        d = self.devices[device]
        if d.is_cpu:
            return self.gemm(device)
        family = "flash_attn_efficiency" if uses_matrix_units(d.path) else "vector_flash_efficiency"
        return (self.params.name(family, d.path), d.peak_flops)

    def half_rows(self, device: str, experts: bool = False) -> str:
        d = self.devices[device]
        return self.params.name("expert_half_rows" if experts else "gemm_half_rows", "cpu" if d.is_cpu else d.path)

    def node(self, device: str) -> str:
        return self.params.name("node_s", self.devices[device].backend)

    def token(self, device: str) -> str:
        return self.params.name("token_s", self.devices[device].backend)

    def reads(self, device: str, nbytes: float) -> list[tuple[float, Channel]]:
        """The addends of ``device`` reading ``nbytes`` of what it holds: its memory, the share in shared system
        memory over the link, the share a mapping could not keep resident from the disk."""
        d = self.devices[device]
        if d.is_cpu:
            if d.resident_share < 1.0 and d.disk_bps > 0:
                return [(nbytes * d.resident_share, self.read(device)),
                        (nbytes * (1 - d.resident_share), (None, d.disk_bps))]
            return [(nbytes, self.read(device))]
        if d.spill_share > 0 and d.link_bps > 0:
            return [(nbytes * (1 - d.spill_share), self.read(device)),
                    (nbytes * d.spill_share, ("spill_link_share", d.link_bps))]
        return [(nbytes, self.read(device))]

    def work(self, device: str, nbytes: float, flops: float, arithmetic: Channel | None
             ) -> tuple[list, list, list]:
        """A part's three bounds on ``device``: its reads, its arithmetic on ``arithmetic``, and for the CPU what its
        threads can pull."""
        d = self.devices[device]
        cap = [(nbytes * d.resident_share, (None, d.thread_bps))] if d.is_cpu and d.thread_bps > 0 else []
        return self.reads(device, nbytes), [(flops, arithmetic)] if arithmetic is not None else [], cap

    def copy(self, device: str, nbytes: float, pinned: bool) -> tuple[list, list]:
        """The two bounds of copying ``nbytes`` from host memory to card ``device``: its link (pageable memory at
        ``link_share`` of it) and host DRAM over the passes the copy makes through it."""
        link = self.devices[device].link_bps
        if pinned:
            return [(nbytes, (None, link))], [(nbytes, (None, self.dram))]
        return [(nbytes, (self.params.name("link_share", self.os), link))], \
            [(nbytes * PAGEABLE_DRAM_PASSES, (None, self.dram))]


@dataclass(frozen=True)
class StepParts:
    """Where one decode step's (or one ubatch's) time goes (s)."""

    gpu_s: float = 0.0
    cpu_s: float = 0.0
    link_s: float = 0.0  # weights copied to a card for a large batch (a card's reads of spilled memory: in gpu_s)
    split_s: float = 0.0
    fixed_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.gpu_s + self.cpu_s + self.link_s + self.split_s + self.fixed_s

    @classmethod
    def of(cls, seconds: dict[str, float]) -> StepParts:
        """From seconds by ledger category (``gpu:weights``, ``cpu:experts``, ``fixed:nodes``, ...: summed by what
        precedes the colon)."""
        sums: dict[str, float] = {}
        for k, v in seconds.items():
            head = k.split(":", 1)[0]
            sums[head] = sums.get(head, 0.0) + v
        return cls(sums.get("gpu", 0.0), sums.get("cpu", 0.0), sums.get("link", 0.0), sums.get("split", 0.0),
                   sums.get("fixed", 0.0))


def _touched(experts: int, top_k: int, tokens: float, inclusion: tuple[float, ...] = ()) -> float:
    """Distinct experts of a block ``tokens`` tokens choose, each ``top_k`` of ``experts``: ``sum_e 1 - (1 -
    pi_e)^tokens`` over a token's inclusion probabilities ``pi`` (:mod:`sim.llamacpp.routing`), uniform ``pi_e =
    k / E`` when none are given."""
    if experts <= 0:
        return 0.0
    if inclusion:
        return float(sum(1.0 - (1.0 - p) ** tokens for p in inclusion))
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class Engine:
    """One placed model on its hardware, with the settings that shape a step."""

    placement: Placement
    hw: Hardware
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    kv_offload: bool = True
    op_offload: bool = True
    offload_min_batch: int = 32
    expert_offload_min_batch: int = 32  # the same for routed experts (ik_llama.cpp: 32 x experts / top-k)
    pinned_host: bool = False  # CPU weights in pinned host memory (--no-mmap with a GPU): copies at the full link rate
    flash_attn: bool = True
    expert_inclusion: tuple[float, ...] = ()  # a token's inclusion probability of each expert (): uniform routing
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @cached_property
    def mixers(self) -> tuple[Mixer, ...]:
        return mixers(self.placement.model.geometry)

    @cached_property
    def _values(self) -> dict[str, float]:
        return self.hw.params.lookup()

    def values(self) -> dict[str, float]:
        """The parameter values this engine's ledgers are evaluated with."""
        return self._values

    def _touched(self, tokens: float) -> float:
        """Distinct experts of a block ``tokens`` tokens choose (memoised per token count)."""
        key = ("touched", tokens)
        if key not in self._memo:
            g = self.placement.model.geometry
            self._memo[key] = _touched(g.experts_per_layer, g.top_k, tokens, self.expert_inclusion)
        return self._memo[key]

    def _main(self) -> str:
        return self.hw.main_gpu if self.hw.main_gpu is not None else CPU

    def _kv_device(self, block: int) -> str:
        return self.placement.block_device[block] if self.kv_offload else CPU

    def _category(self, device: str, what: str) -> str:
        return ("cpu:" if device == CPU else "gpu:") + what

    def _kv_bytes(self) -> tuple[float, float]:
        return KV_TYPE_BYTES[self.cache_type_k], KV_TYPE_BYTES[self.cache_type_v]

    def decode_ledger(self, batch: int = 1, context: float = 0.0) -> Ledger:
        """The work of one decode step of ``batch`` sequences each with ``context`` tokens of cache."""
        pl, hw = self.placement, self.hw
        g = pl.model.geometry
        lg = Ledger()
        here = CPU  # the token embedding is looked up on the CPU
        kb, vb = self._kv_bytes()
        moe_blocks = self._moe_blocks
        for block, role, parts in pl.path:
            for device, nbytes, params in parts:
                read, flops = nbytes, 2.0 * params * batch
                rows = float(batch)
                if role == "experts":
                    touched = self._touched(batch)
                    read = nbytes * touched / max(g.experts_per_layer, 1)
                    flops = 2.0 * params * batch * g.top_k / max(g.experts_per_layer, 1)
                    rows = batch * g.top_k / max(touched, 1e-9)  # rows each touched expert multiplies
                if device != here:
                    lg.count("split_s", 1, "split")
                    here = device
                if rows > VECTOR_ROWS:  # llama.cpp's matrix kernels, as for a ubatch of ``batch`` tokens
                    weights = params * (read / nbytes if nbytes > 0 else 1.0)
                    for kind, share in pl.kernel_shares.get((block, role, device), {"quant": 1.0}).items():
                        lg.term(self._category(device, role), *self._gemm(device, read * share, flops * share,
                                                                          weights * share, batch, kind,
                                                                          role == "experts"))
                else:
                    lg.term(self._category(device, role), *hw.work(device, read, flops, hw.vector(device)))
                lg.count(hw.node(device), self._nodes(block, role, moe_blocks) * hw.host_factor,
                         "fixed:nodes")
            if role == "attention":
                kv_dev = self._kv_device(block)
                if kv_dev != here:
                    lg.count("split_s", 1, "split")
                    here = kv_dev
                reads, flops, scores = self.mixers[block].decode(context, batch, self.flash_attn, kb, vb)
                lg.term(self._category(kv_dev, "cache"), *hw.work(kv_dev, reads, flops, hw.vector(kv_dev)))
                if scores:
                    lg.term(self._category(kv_dev, "scores"), hw.reads(kv_dev, scores))
        self._output(lg, here, batch)
        self._io(lg, batch, batch)
        lg.count(hw.token(self._main()), hw.host_factor, "fixed:step")
        return lg

    @cached_property
    def _moe_blocks(self) -> frozenset[int]:
        return frozenset(b for b, role, _ in self.placement.path if role == "experts")

    @cached_property
    def _qk_norm(self) -> bool:
        return any("attn_q_norm" in t.name for t in self.placement.model.tensors)

    def _nodes(self, block: int, role: str, moe_blocks: frozenset[int]) -> int:
        g = self.placement.model.geometry
        if role == "attention":
            return attention_nodes(self.mixers[block].kind, self.flash_attn, self._qk_norm)
        ffn, experts = ffn_nodes(g, block in moe_blocks)
        return ffn if role == "ffn" else experts

    def _io(self, lg: Ledger, tokens: int, outputs: int) -> None:
        """The step's inputs and outputs crossing the link: the embedded tokens (looked up on the CPU) to the card
        running the first block, the logits of the output tokens back to host memory (both pinned)."""
        pl, hw, g = self.placement, self.hw, self.placement.model.geometry
        first = pl.path[0][2][0][0] if pl.path else CPU
        if first != CPU:
            lg.term("link:io", [(tokens * g.hidden * 4.0, (None, hw.devices[first].link_bps))])
        if pl.output_device != CPU:
            lg.term("link:io", [(outputs * g.vocab * 4.0, (None, hw.devices[pl.output_device].link_bps))])

    def _output(self, lg: Ledger, here: str, tokens: int) -> None:
        pl, hw = self.placement, self.hw
        out = pl.output_device
        out_t = pl.model.tensors[-1]
        if out != here:
            lg.count("split_s", 1, "split")
        lg.term(self._category(out, "output"), *hw.work(out, out_t.bytes, 2.0 * out_t.params * tokens,
                                                          hw.vector(out)))
        lg.count(hw.node(out), OUTPUT_NODES * hw.host_factor, "fixed:nodes")

    def ubatch_ledger(self, tokens: int, context: float, sequences: int = 1) -> Ledger:
        """The work of one ubatch of ``tokens`` prompt tokens after ``context`` tokens of cache; with ``sequences``
        > 1, ``tokens`` split equally among that many sequences (llama.cpp's equal split of a batch of several
        sequences), each after ``context`` tokens of its own: the weights are read once for all, each sequence
        attends to its own cache."""
        pl, hw = self.placement, self.hw
        g = pl.model.geometry
        lg = Ledger()
        here = CPU
        offload = self.op_offload and hw.main_gpu is not None and tokens >= self.offload_min_batch
        offload_experts = self.op_offload and hw.main_gpu is not None and tokens >= self.expert_offload_min_batch
        kb, vb = self._kv_bytes()
        moe_blocks = self._moe_blocks
        for block, role, parts in pl.path:
            for device, nbytes, params in parts:
                flops, read, weights = 2.0 * params * tokens, nbytes, params
                if role == "experts":
                    share = self._touched(tokens) / max(g.experts_per_layer, 1)
                    read, weights = nbytes * share, params * share
                    flops = 2.0 * params * tokens * g.top_k / max(g.experts_per_layer, 1)
                run_on = device
                if device == CPU and (offload_experts if role == "experts" else offload):
                    run_on = hw.main_gpu
                    assert run_on is not None
                    lg.term("link", *hw.copy(run_on, nbytes, self.pinned_host))  # the whole tensor crosses
                    read = 0.0  # computed from the copy
                if run_on != here:
                    lg.count("split_s", 1, "split")
                    here = run_on
                shares = pl.kernel_shares.get((block, role, device), {"quant": 1.0})
                if role != "experts" and hw.devices[run_on].backend == "hip" and tokens > HIP_MMQ_ROWS:
                    shares = {"float" if k == "float" else "dequant": v for k, v in shares.items()}
                for kind, share in shares.items():
                    lg.term(self._category(run_on, role), *self._gemm(run_on, read * share, flops * share,
                                                                      weights * share, tokens, kind,
                                                                      role == "experts"))
                lg.count(hw.node(run_on), self._nodes(block, role, moe_blocks) * hw.host_factor,
                         "fixed:nodes")
            if role == "attention":
                kv_dev = self._kv_device(block)
                if kv_dev != here:
                    lg.count("split_s", 1, "split")
                    here = kv_dev
                reads, flops, scores = (sequences * x for x in self.mixers[block].prompt(
                    tokens / sequences, context, self.flash_attn, kb, vb))  # type: ignore[arg-type]
                arithmetic = hw.flash(kv_dev) if self.flash_attn else hw.gemm(kv_dev)
                lg.term(self._category(kv_dev, "attention"), *hw.work(kv_dev, reads, flops, arithmetic))
                if scores:
                    lg.term(self._category(kv_dev, "scores"), hw.reads(kv_dev, scores))
        self._output(lg, here, 1)  # llama-bench and a server's prompt want the last token's logits
        self._io(lg, tokens, 1)
        lg.count(hw.token(self._main()), hw.host_factor, "fixed:step")
        return lg

    def _gemm(self, device: str, read: float, flops: float, weights: float, tokens: int, kind: str = "quant",
              experts: bool = False) -> tuple[list, list, list]:
        """A prompt's matrix product of ``tokens`` rows against ``weights`` weights (those of the experts it
        touches) on ``device``: up to ``VECTOR_ROWS`` rows llama.cpp runs its matrix-vector kernels (as a decode
        step does); above, its matrix kernels, whose fixed work per weight (loading and converting each tile of
        weights, filling the units' pipelines) costs as much as ``gemm_half_rows`` more rows would: a product of
        ``r`` rows runs at ``r / (r + half)`` of its path's rate."""
        hw = self.hw
        if tokens <= VECTOR_ROWS:
            return hw.work(device, read, flops, hw.vector(device))
        channel = hw.gemm(device, kind)
        if kind == "dequant" and channel[0] is not None and channel[0].startswith("fp16_matrix"):
            read += 4.0 * weights  # dequantized to f16 into the pool, then read by the GEMM
        reads, arithmetic, cap = hw.work(device, read, flops, channel)
        arithmetic.append((2.0 * weights, (channel[0], channel[1], hw.half_rows(device, experts), *channel[3:])))
        return reads, arithmetic, cap

    def prompt_ledger(self, tokens: int, context: float = 0.0, ubatch: int = 512, sequences: int = 1) -> Ledger:
        """A prompt of ``tokens`` tokens after ``context`` tokens of cache, in ubatches of ``ubatch``: the ``k`` full
        ubatches as ``k`` times the mean of the first and the last (a ubatch's work is linear in its context, so
        exact but across a kink of a roofline's max), then the remainder. With ``sequences`` > 1, that many
        sequences' prompts of ``tokens`` each go together, every ubatch taking ``ubatch`` tokens of each."""
        lg = Ledger()
        full, rest = divmod(tokens, ubatch)
        s = sequences
        if full == 1:
            lg.extend(self.ubatch_ledger(ubatch * s, context, s))
        elif full > 1:
            lg.extend(self.ubatch_ledger(ubatch * s, context, s), full / 2.0)
            lg.extend(self.ubatch_ledger(ubatch * s, context + (full - 1) * ubatch, s), full / 2.0)
        if rest:
            lg.extend(self.ubatch_ledger(rest * s, context + full * ubatch, s))
        return lg

    def generate_ledger(self, tokens: int, context: float = 0.0, batch: int = 1) -> Ledger:
        """``tokens`` decode steps of ``batch`` sequences from ``context`` tokens of cache on: ``tokens`` times the
        mean of the first and the last step (exact while a step is linear in its context, close across a kink of
        the roofline's max)."""
        lg = Ledger()
        if tokens <= 0:
            return lg
        if tokens == 1:
            lg.extend(self.decode_ledger(batch, context))
            return lg
        lg.extend(self.decode_ledger(batch, context), tokens / 2.0)
        lg.extend(self.decode_ledger(batch, context + tokens - 1), tokens / 2.0)
        return lg

    def _parts(self, lg: Ledger) -> StepParts:
        return StepParts.of(lg.seconds_by_category(self._values))

    def decode_step(self, batch: int = 1, context: float = 0.0) -> StepParts:
        """One decode step of ``batch`` sequences each with ``context`` tokens of cache (s, by where it goes)."""
        return self._parts(self.decode_ledger(batch, context))

    def ubatch(self, tokens: int, context: float) -> StepParts:
        """One ubatch of ``tokens`` prompt tokens after ``context`` tokens of cache (s, by where it goes)."""
        return self._parts(self.ubatch_ledger(tokens, context))

    def prompt_parts(self, tokens: int, context: float = 0.0, ubatch: int = 512) -> StepParts:
        """Where :meth:`prompt_s`'s time goes (s): the same sum of ubatches, by device."""
        return self._parts(self.prompt_ledger(tokens, context, ubatch))

    def prompt_s(self, tokens: int, context: float = 0.0, ubatch: int = 512) -> float:
        """A prompt of ``tokens`` tokens after ``context`` tokens of cache, in ubatches of ``ubatch`` (s)."""
        return self.prompt_ledger(tokens, context, ubatch).seconds(self._values)

    def generate_s(self, tokens: int, context: float = 0.0, batch: int = 1) -> float:
        """``tokens`` decode steps of ``batch`` sequences from ``context`` tokens of cache on (s)."""
        if tokens <= 0:
            return 0.0
        return self.generate_ledger(tokens, context, batch).seconds(self._values)
