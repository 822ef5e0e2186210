"""A hardware catalog shipped with the package: GPUs (capacity in GiB, memory bandwidth in GB/s, dense FP16/BF16
matrix TFLOP/s with FP32 accumulate, FP32 vector TFLOP/s, the kind of matrix unit, INT8 TOPS, PCIe, board power in W),
hosts (DRAM generation, MT/s, channels, cores, clocks in GHz, FP32 FLOP per cycle per core, vector ISA) and links (PCIe
generations, NVLink), every entry with the URL of the vendor document its numbers come from.

``sim catalog`` prints it. A host's paper DRAM bandwidth is derived, not stored: :func:`dram_paper_gbps`,
:func:`host_dram_gbps`."""

from sim.catalog.store import (
    GPU_INFO_KEYS,
    GPU_SPEC_KEYS,
    HOST_INFO_KEYS,
    HOST_SPEC_KEYS,
    ISAS,
    KINDS,
    LINK_SPEC_KEYS,
    MATRIX_UNITS,
    CatalogError,
    closest,
    dram_paper_gbps,
    entries,
    gpu_entries,
    gpu_fp32_from_shaders,
    host_dram_gbps,
    host_entries,
    link_entries,
)

__all__ = ["GPU_INFO_KEYS", "GPU_SPEC_KEYS", "HOST_INFO_KEYS", "HOST_SPEC_KEYS", "ISAS", "KINDS", "LINK_SPEC_KEYS",
           "MATRIX_UNITS", "CatalogError", "closest", "dram_paper_gbps", "entries", "gpu_entries",
           "gpu_fp32_from_shaders", "host_dram_gbps", "host_entries", "link_entries"]
