"""A unified-memory machine's one pool of memory, and the part of it its GPU may allocate.

The CPU and the GPU of a GB10 (DGX Spark), a Strix Halo (Ryzen AI Max) or an Apple M chip share one memory: the OS and
other programs, the weights, the KV cache and every compute buffer come out of the same ``pool_gib`` (the machine's
``host.ram_gib``, or the chip's largest configuration when the host does not say). What the GPU may allocate of it
is set by the platform, each its own way (docs/research/unified_memory.md gives the sources):

- macOS: Metal's ``recommendedMaxWorkingSetSize``, which llama.cpp's Metal backend takes as the device's memory; it
  follows ``sysctl iogpu.wired_limit_mb`` when that is set and is otherwise a share of RAM: 2/3 measured at 8-32 GB,
  3/4 at 64-128 GB (macOS 15 and earlier; :data:`MACOS_SHARE`, the change assumed at :data:`MACOS_SMALL_GIB`).
- Linux on AMD (Strix Halo): the BIOS carve-out (VRAM, :data:`CARVE_OUT_GIB` assumed) plus the GTT the amdgpu
  driver maps, by default TTM's page limit, half of the RAM Linux sees (the rest); ``ttm.pages_limit`` or
  ``amdgpu.gttsize`` raise it (kyuz0's toolboxes set 124 GiB of 128).
- Linux on GB10: CUDA allocates from the RAM Linux sees (``MemTotal``, measured 119.7-121.7 GiB of 128 GB:
  :data:`LINUX_SEES_SHARE`), less what the OS keeps (:data:`OS_KEEPS_GIB`).

``machines.M.unified_memory_gib`` overrides the rule (the limit a user set). The GPU's reads and the CPU's share the
one bandwidth; there is no PCIe link between them: a copy from a CPU buffer to the GPU's stays in the pool.
"""

from __future__ import annotations

from sim.config.machines import Machine
from sim.config.scenario import Scenario

OS_KEEPS_GIB = 2.0  # assumed: what the OS and its other programs keep of the pool (GiB), as a discrete host's RAM
MACOS_SMALL_GIB = 36.0  # assumed: macOS gives the GPU 2/3 of RAM up to this size (measured 8-32 GB), 3/4 above
MACOS_SHARE = (2.0 / 3.0, 0.75)
GTT_DEFAULT_SHARE = 0.5  # amdgpu's default GTT: half of the RAM Linux sees (TTM's page limit, kernels since 6.x)
CARVE_OUT_GIB = 0.5  # assumed: the BIOS VRAM carve-out of a Strix Halo box left at its usual 512 MB
LINUX_SEES_SHARE = 119.7 / 128.0  # GB10: MemTotal of 119.7 GiB on a 128 GB Spark (llama.cpp #17368; the lowest report)


def unified_card(scn: Scenario, machine: Machine):
    """The unified-memory chip of ``machine`` (its GPU type), or None for a discrete machine or one without a GPU."""
    if machine.kind != "unified" or not machine.gpus:
        return None
    return scn.gpus[next(iter(machine.gpus.values())).type]


def pool_gib(scn: Scenario, machine: Machine) -> float:
    """The machine's one memory (GiB): host.ram_gib, else the chip's largest configuration."""
    if machine.host is not None and machine.host.ram_gib:
        return float(machine.host.ram_gib)
    card = unified_card(scn, machine)
    if card is not None:
        return float(card.vram_gib)
    return float(machine.unified_memory_gib or 0.0)


def platform_rule(vendor: str, os_name: str, pool: float) -> tuple[float, str]:
    """What the GPU may allocate of a ``pool`` GiB memory by default (GiB), and the rule's words."""
    if vendor == "apple" or os_name == "macos":
        share = MACOS_SHARE[0] if pool <= MACOS_SMALL_GIB else MACOS_SHARE[1]
        return pool * share, (f"macOS's default GPU working set ({share:.0%} of {pool:g} GiB; sysctl "
                              "iogpu.wired_limit_mb raises it)")
    if vendor == "amd":
        gib = CARVE_OUT_GIB + GTT_DEFAULT_SHARE * (pool - CARVE_OUT_GIB)
        return gib, (f"the {CARVE_OUT_GIB:g} GiB carve-out and amdgpu's default GTT, half of the other "
                     f"{pool - CARVE_OUT_GIB:g} GiB (ttm.pages_limit or amdgpu.gttsize raise it)")
    seen = pool * LINUX_SEES_SHARE
    return max(seen - OS_KEEPS_GIB, 0.0), (f"the {seen:.1f} GiB Linux sees of {pool:g} GiB, less {OS_KEEPS_GIB:g} "
                                            "GiB the OS keeps")


def _platform(scn: Scenario, machine: Machine) -> tuple[str, str]:
    """The machine's chip vendor ("" without one) and operating system."""
    card = unified_card(scn, machine)
    return (card.vendor if card is not None else "", machine.host.os if machine.host is not None else "linux")


def gpu_memory_gib(scn: Scenario, machine: Machine) -> float:
    """What the GPU of a unified machine may allocate (GiB): ``unified_memory_gib`` as set, else the platform's
    rule; never more than the pool less what the OS keeps."""
    pool = pool_gib(scn, machine)
    if machine.unified_memory_gib is not None:
        return min(float(machine.unified_memory_gib), pool)
    share, _ = platform_rule(*_platform(scn, machine), pool)
    return min(share, max(pool - OS_KEEPS_GIB, 0.0))


def gpu_memory_rule(scn: Scenario, machine: Machine) -> str:
    """In words, where the GPU's share of the pool comes from."""
    if machine.unified_memory_gib is not None:
        return f"unified_memory_gib {machine.unified_memory_gib:g} GiB as set"
    return platform_rule(*_platform(scn, machine), pool_gib(scn, machine))[1]


def card_capacity_gib(scn: Scenario, machine: Machine, gpu_key: str) -> float:
    """What one GPU of ``machine`` may allocate (GiB): a card's VRAM, a unified chip's share of the pool."""
    if machine.kind == "unified" and machine.gpus:
        return gpu_memory_gib(scn, machine)
    return float(scn.gpus[machine.gpus[gpu_key].type].vram_gib)


def raise_limit(vendor: str, os_name: str, gib: float) -> str:
    """How a user gives the GPU ``gib`` GiB of the pool, in the platform's own setting."""
    import math

    if vendor == "apple" or os_name == "macos":
        return f"sudo sysctl iogpu.wired_limit_mb={math.ceil(gib * 1024)}"
    if vendor == "amd":
        gtt = max(gib - CARVE_OUT_GIB, 0.0)
        return (f"ttm.pages_limit={math.ceil(gtt * 2**30 / 4096)} on the kernel command line (4 KiB pages; "
                f"amdgpu.gttsize={math.ceil(gtt * 1024)} on older kernels), or a BIOS carve-out of {math.ceil(gib)} GB")
    return "nothing to set: the GPU may allocate all the OS leaves"


def most_gpu_gib(scn: Scenario, machine: Machine) -> float:
    """The most of the pool a user can give the GPU (GiB): on macOS and Strix Halo all of it less what the OS keeps
    (the limits are settings); on GB10 the platform's rule (no setting raises it)."""
    vendor, os_name = _platform(scn, machine)
    pool = pool_gib(scn, machine)
    if vendor not in ("", "apple", "amd") and os_name != "macos":
        return platform_rule(vendor, os_name, pool)[0]
    return max(pool - OS_KEEPS_GIB, 0.0)
