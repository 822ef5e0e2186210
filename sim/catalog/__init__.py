"""A hardware catalog shipped with the package: GPUs (capacity in GiB, memory bandwidth in GB/s, dense FP16/BF16
tensor TFLOP/s with FP32 accumulate, INT8 TOPS, PCIe, board power in W), hosts (DRAM generation, MT/s, channels,
cores) and links (PCIe generations, NVLink), every entry with the URL of the vendor document its numbers come from.

``sim catalog`` prints it. A host's paper DRAM bandwidth is derived, not stored: :func:`dram_paper_gbps`."""

from sim.catalog.store import (
    GPU_SPEC_KEYS,
    HOST_SPEC_KEYS,
    KINDS,
    LINK_SPEC_KEYS,
    CatalogError,
    closest,
    dram_paper_gbps,
    entries,
    gpu_entries,
    host_entries,
    link_entries,
)

__all__ = ["GPU_SPEC_KEYS", "HOST_SPEC_KEYS", "KINDS", "LINK_SPEC_KEYS", "CatalogError", "closest", "dram_paper_gbps",
           "entries", "gpu_entries", "host_entries", "link_entries"]
