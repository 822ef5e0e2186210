"""Tensor-parallel ranks loading one checkpoint at once, on one host: one disk, one page cache, one set of DRAM
channels, a GPU (and its link) each.

What one rank does depends on the loader's code (docs/research/loaders.md, 3, "TP reads"):

- ``shard`` (vLLM's default loader, safetensors): every rank opens every file and iterates every tensor (the
  per-tensor work is paid by every rank), and copies only its narrowed shard of each tensor: about 1/N of the bytes.
- ``all`` (Run:ai Model Streamer through vLLM): every rank streams the whole checkpoint into host memory and keeps
  its shard: every rank reads and copies every byte.
- ``files`` (fastsafetensors, InstantTensor): rank r reads its own files (1/N of the bytes); the tensors are then
  spread by collectives (fastsafetensors: every rank joins a broadcast or scatter per tensor, so it iterates every
  tensor; InstantTensor: its own tensors).

Shared: the disk serves the bytes the ranks miss in the page cache once (the page cache dedups them), at most its
bandwidth (:meth:`sim.lab.resources.StageCosts.disk_gbps_effective`); the host's copies of every rank together get at
most ``host_cap_gbps``. So a rank's host stage of a chunk takes the longer of its own work and the chunk's share of
every rank's copies through the host: more ranks never copy faster than the host allows, and ranks that each read
the whole checkpoint load slower together than one alone once the host is the limit.
"""

from __future__ import annotations

import math

import numpy as np

from sim.lab.resources import StageCosts

READS = ("shard", "all", "files")
TENSORS = ("all", "share")


def touched_share(costs: StageCosts) -> float:
    """Share of the checkpoint's bytes one rank reads and copies (fraction)."""
    if costs.rank_reads not in READS:
        raise ValueError(f"rank_reads {costs.rank_reads!r}: expected one of {', '.join(READS)}")
    return 1.0 if costs.rank_reads == "all" else 1.0 / costs.readers


def tensor_share(costs: StageCosts) -> float:
    """Share of the checkpoint's tensors one rank iterates (fraction)."""
    if costs.rank_tensors not in TENSORS:
        raise ValueError(f"rank_tensors {costs.rank_tensors!r}: expected one of {', '.join(TENSORS)}")
    return 1.0 if costs.rank_tensors == "all" else 1.0 / costs.readers


def rank_loader_s(gb: np.ndarray, read_per_gb: np.ndarray, kept_per_gb: np.ndarray, copies: np.ndarray,
                  staged: np.ndarray, tensors: np.ndarray, costs: StageCosts) -> np.ndarray:
    """Seconds of one rank's host stage per chunk: the bytes it reads at ``read_per_gb`` (its copies out of the page
    cache, mapping hits; s/GB), its shard of them at ``kept_per_gb`` (the driver's staging copy to its GPU, a dtype
    conversion), and its tensors' per-tensor work; at least the chunk's host copies by every rank at the host's cap
    (``costs.host_cap_gbps``): ``copies`` per byte it reads and ``staged`` (the staging copy) per byte of its shard.
    ``gb``: the chunk's decimal GB."""
    read = touched_share(costs)
    shard = 1.0 / costs.readers
    own = gb * (read * read_per_gb + shard * kept_per_gb) + tensors * tensor_share(costs) * costs.loader_s_per_tensor
    if not math.isfinite(costs.host_cap_gbps):
        return own
    shared = gb * costs.readers * (read * copies + shard * staged) / costs.host_cap_gbps
    return np.maximum(own, shared)
