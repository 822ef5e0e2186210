"""Time of a decode step and of a prompt under llama.cpp, from the placement, the hardware's specs and the cost
parameters.

A token passes the blocks in order and, in each, its attention, the FFN part outside the routed experts and the
routed experts, each on the device holding it (:mod:`sim.llamacpp.placement`). llama.cpp runs these one after
another: the CPU part of a block and its GPU part never overlap. Every part costs the longer of its reads and its
arithmetic on its device:

- a card reads at ``gpu_memory_efficiency x hbm_gbps`` and computes at ``gpu_compute_efficiency x tflops``; bytes the
  driver moved to shared system memory (:mod:`sim.llamacpp.memory`) are read over the link at
  ``spill_link_share x`` its rate;
- the CPU reads at ``cpu_memory_efficiency x`` the host's paper DRAM bandwidth, or ``threads x cpu_thread_gbps`` when
  fewer threads cannot pull that much, and computes at ``min(threads, cores) x cpu_gflops_per_core`` (ik_llama.cpp's
  CPU kernels: ``ik_cpu_gflops_per_core``).

A decode step of ``b`` sequences at context ``d`` reads every weight of its parts once, the routed experts its
tokens chose (``E (1 - (1 - k/E)^b)`` of a block's ``E``, each token taking ``k``) and each sequence's KV; it
computes 2 FLOPs per weight per token and ``4 x heads x head_dim`` per token and context token. Each hand-over
between devices along the path costs ``split_s``; each block costs ``gpu_layer_s`` and/or ``cpu_layer_s`` where it
runs; a step costs ``token_s`` more.

A prompt runs in ubatches of ``ubatch_size`` tokens (at most ``batch_size``). Weights in host RAM are computed by
the CPU for small ubatches; from ``offload_min_batch`` tokens on (with op offload on) llama.cpp copies each such
tensor whole (every expert of a block) over the link and the card computes it: so prefill depends on the ubatch and
on PCIe. Weights mapped from the file (mmap) are pageable memory and cross at ``link_share x`` the link's rate; with
``--no-mmap`` llama.cpp loads them into pinned host memory (its CUDA_Host buffer), which crosses at the link's rate.
Host memory bandwidth bounds the copies too: a pageable copy passes every byte through DRAM three times, so it goes
no faster than a third of the DRAM's paper rate (a pinned one: that rate), which a slow DRAM makes the limit.
The attention over a KV cache in host RAM stays on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.units import GB
from sim.llamacpp.memory import kv_bytes_per_cell
from sim.llamacpp.params import CostParams
from sim.llamacpp.placement import CPU, Placement


@dataclass(frozen=True)
class Rates:
    """A device's effective rates: bytes/s it reads weights at, FLOP/s it computes at; for a card also its link
    (bytes/s, host -> card) and the share of its allocations in system memory."""

    read: float
    flops: float
    link: float = 0.0
    spill_share: float = 0.0


PAGEABLE_DRAM_PASSES = 3  # a pageable copy: the CPU reads the page, writes a pinned staging buffer, the DMA reads it


@dataclass(frozen=True)
class Hardware:
    """The devices one engine runs on (by llama.cpp's names) and the cost parameters; ``dram`` is the host DRAM's
    paper bandwidth (bytes/s), which bounds every copy from host memory."""

    rates: dict[str, Rates]
    params: CostParams
    main_gpu: str | None  # the card large batches of CPU-held weights are copied to
    dram: float = float("inf")

    def copy_rate(self, device: str, pinned: bool) -> float:
        """Bytes/s a card receives weights from host memory at: its link (pageable memory at ``link_share`` of
        it), and at most the host DRAM's paper rate over the passes the copy makes through it (three for pageable
        memory, one for pinned: the DMA reads it)."""
        link = self.rates[device].link
        if pinned:
            return min(link, self.dram)
        return min(self.params.link_share * link, self.dram / PAGEABLE_DRAM_PASSES)

    def read_s(self, device: str, nbytes: float) -> float:
        """Seconds ``device`` takes to read ``nbytes`` of its weights (system-memory share over the link, at most
        at the host DRAM's rate)."""
        r = self.rates[device]
        if r.spill_share > 0 and r.link > 0:
            spill_rate = min(self.params.spill_link_share * r.link, self.dram)
            return nbytes * ((1 - r.spill_share) / r.read + r.spill_share / spill_rate)
        return nbytes / r.read

    def part_s(self, device: str, nbytes: float, flops: float) -> float:
        return max(self.read_s(device, nbytes), flops / self.rates[device].flops)


def cpu_rates(paper_gbps: float, cores: int, threads: int, p: CostParams, build: str = "llama.cpp") -> Rates:
    """The CPU's read rate (bytes/s) and arithmetic (FLOP/s) with ``threads`` threads, with the build's kernels."""
    read = min(p.cpu_memory_efficiency * paper_gbps, threads * p.cpu_thread_gbps) * GB
    per_core = p.ik_cpu_gflops_per_core if build == "ik_llama.cpp" else p.cpu_gflops_per_core
    return Rates(read, min(threads, cores) * per_core * 1e9)


def gpu_rates(hbm_gbps: float, tflops: float | None, link_gbps: float, spill_share: float, p: CostParams) -> Rates:
    """A card's read rate and arithmetic (no tflops: reads alone bound it) and its link (bytes/s)."""
    flops = p.gpu_compute_efficiency * tflops * 1e12 if tflops else float("inf")
    return Rates(p.gpu_memory_efficiency * hbm_gbps * GB, flops, link_gbps * GB, spill_share)


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


class _Acc:
    def __init__(self) -> None:
        self.gpu = self.cpu = self.link = self.split = self.fixed = 0.0

    def add(self, device: str, seconds: float) -> None:
        if device == CPU:
            self.cpu += seconds
        else:
            self.gpu += seconds

    def parts(self) -> StepParts:
        return StepParts(self.gpu, self.cpu, self.link, self.split, self.fixed)


def _touched(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts of a block ``tokens`` tokens choose, each ``top_k`` of ``experts`` (uniformly)."""
    if experts <= 0:
        return 0.0
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
    pinned_host: bool = False  # CPU weights in pinned host memory (--no-mmap with a GPU): copies at the full link rate

    def _path(self):
        return self.placement.path

    def _kv_device(self, block: int) -> str:
        return self.placement.block_device[block] if self.kv_offload else CPU

    def decode_step(self, batch: int = 1, context: float = 0.0) -> StepParts:
        """One decode step of ``batch`` sequences each with ``context`` tokens of KV (s, by where it goes)."""
        pl, hw, p = self.placement, self.hw, self.hw.params
        g = pl.model.geometry
        acc = _Acc()
        here = CPU  # the token embedding is looked up on the CPU
        att_flops_per_ctx = 4.0 * g.heads * g.head_dim
        cell = kv_bytes_per_cell(pl, self.cache_type_k, self.cache_type_v)
        for block, role, parts in self._path():
            for device, nbytes, params in parts:
                flops = 2.0 * params * batch
                read = nbytes
                if role == "experts":
                    share = _touched(g.experts_per_layer, g.top_k, batch) / max(g.experts_per_layer, 1)
                    read = nbytes * share
                    flops = 2.0 * params * batch * g.top_k / max(g.experts_per_layer, 1)
                if device != here:
                    acc.split += p.split_s
                    here = device
                seconds = hw.part_s(device, read, flops)
                acc.add(device, seconds)
            if role == "attention":
                kv_dev = self._kv_device(block)
                kv = batch * context * cell
                if kv_dev != here:
                    acc.split += p.split_s
                    here = kv_dev
                acc.add(kv_dev, hw.part_s(kv_dev, kv, batch * context * att_flops_per_ctx))
        out = pl.output_device
        out_t = pl.model.tensors[-1]
        if out != here:
            acc.split += p.split_s
        acc.add(out, hw.part_s(out, out_t.bytes, 2.0 * out_t.params * batch))
        acc.fixed = p.token_s + self._layer_fixed()
        return acc.parts()

    def _layer_fixed(self) -> float:
        p = self.hw.params
        cpu_blocks, gpu_blocks = self.placement.blocks_running
        return cpu_blocks * p.cpu_layer_s + gpu_blocks * p.gpu_layer_s

    def ubatch(self, tokens: int, context: float) -> StepParts:
        """One ubatch of ``tokens`` prompt tokens after ``context`` tokens of KV (s, by where it goes)."""
        pl, hw, p = self.placement, self.hw, self.hw.params
        g = pl.model.geometry
        acc = _Acc()
        here = CPU
        offload = self.op_offload and hw.main_gpu is not None and tokens >= self.offload_min_batch
        att_flops = 4.0 * g.heads * g.head_dim * tokens * (context + tokens / 2.0)
        cell = kv_bytes_per_cell(pl, self.cache_type_k, self.cache_type_v)
        for block, role, parts in self._path():
            for device, nbytes, params in parts:
                flops = 2.0 * params * tokens
                read = nbytes
                if role == "experts":
                    read = nbytes * _touched(g.experts_per_layer, g.top_k, tokens) / max(g.experts_per_layer, 1)
                    flops = 2.0 * params * tokens * g.top_k / max(g.experts_per_layer, 1)
                run_on = device
                if device == CPU and offload:
                    run_on = hw.main_gpu
                    acc.link += nbytes / hw.copy_rate(run_on, self.pinned_host)  # the whole tensor crosses
                    read = 0.0  # computed from the copy
                if run_on != here:
                    acc.split += p.split_s
                    here = run_on
                acc.add(run_on, hw.part_s(run_on, read, flops))
            if role == "attention":
                kv_dev = self._kv_device(block)
                kv = context * cell
                if kv_dev != here:
                    acc.split += p.split_s
                    here = kv_dev
                acc.add(kv_dev, hw.part_s(kv_dev, kv, att_flops))
        acc.fixed = p.token_s + self._layer_fixed()
        return acc.parts()

    def prompt_s(self, tokens: int, context: float = 0.0, ubatch: int = 512) -> float:
        """A prompt of ``tokens`` tokens after ``context`` tokens of KV, in ubatches of ``ubatch`` (s)."""
        total, done = 0.0, 0
        while done < tokens:
            u = min(ubatch, tokens - done)
            total += self.ubatch(u, context + done).total_s
            done += u
        return total

    def generate_s(self, tokens: int, context: float = 0.0, batch: int = 1) -> float:
        """``tokens`` decode steps of ``batch`` sequences from ``context`` tokens of KV on (s): ``tokens`` times the
        mean of the first and the last step, exact while a step is linear in its context (between the kinks of the
        max() of reads and arithmetic) and close across one."""
        if tokens <= 0:
            return 0.0
        first = self.decode_step(batch, context).total_s
        if tokens == 1:
            return first
        last = self.decode_step(batch, context + tokens - 1).total_s
        return tokens * (first + last) / 2.0
