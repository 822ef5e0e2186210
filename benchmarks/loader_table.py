"""The README's loader table: cold and warm start of a model by each loader kind, from the mechanisms alone.

One Linux machine with the BV-3070Ti's NVMe as fitted in calibration/public_loads.yaml (2.42 GB/s, 81 us per
request), its measured host copy bandwidth (17.78 GB/s) and a 24 GiB card on PCIe 4.0 x16 at the fitted efficiency;
models of 2, 8 and 16 GB held on the GPU. No start-up phase is counted (weights only).

    python benchmarks/loader_table.py
"""

from __future__ import annotations

import numpy as np

import sim
from sim.config.scenario import Scenario
from sim.core.units import GB, MIB
from sim.lab import loading
from sim.lab.loaders import lone_load_s, stage_costs
from sim.lab.resources import memory_targets

KINDS = ("vllm", "vllm_prefetch", "fastsafetensors", "fastsafetensors_gds", "llamacpp_mmap", "llamacpp_no_mmap")
SIZES_GB = (2.0, 8.0, 16.0)


def load_s(scn: Scenario, kind: str, size_gb: float, warm: bool) -> float:
    m = scn.machines["bv_3070ti"]
    m = m.model_copy(update={"loader": m.loader.model_copy(update={"kind": kind}), "host": None})
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("f", size_gb * GB, tensors=0, chunk_bytes=256 * MIB, targets=targets,
                               free_bytes=[t.capacity_bytes for t in targets])
    return lone_load_s(scn, stage_costs(scn, m), plan, np.full(plan.n, warm))


def main() -> None:
    scn = sim.load("scenarios/public_loads.yaml").set("gpus.rtx3070ti.vram_gib", 24).config
    print("| loader | " + " | ".join(f"{s:g} GB cold / warm (s)" for s in SIZES_GB) + " | cold / warm |")
    print("|---|" + "---|" * (len(SIZES_GB) + 1))
    for kind in KINDS:
        cells, ratio = [], 0.0
        for size in SIZES_GB:
            cold, warm = load_s(scn, kind, size, False), load_s(scn, kind, size, True)
            cells.append(f"{cold:.1f} / {warm:.1f}")
            ratio = cold / warm
        print(f"| `{kind}` | " + " | ".join(cells) + f" | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
