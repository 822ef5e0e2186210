"""Weight loading as a fidelity domain: every row of the public weight-loading tables the loading mechanism can
express, predicted by a fit of shared parameters that never saw the row's source.

The mechanism is the project's (:mod:`sim.lab.loaders`, :mod:`sim.lab.loading`, :mod:`sim.lab.ranks`,
:mod:`sim.lab.pagecache`): a loader kind's requests against its disk, its host copies on its threads, its per-tensor
work, the copy over the GPU's link, tensor-parallel ranks sharing one disk and one host, the page cache across
consecutive starts with the load's own buffers taking room. What each row's columns leave implicit (which GPU,
disk, loader, placement, page-cache state, ranks) is in calibration/loads_setups.yaml, one assumption a sentence.

Fitted (:meth:`LoadsDomain.fit`), all shared across machines (:data:`PARAMETERS`): the PCIe efficiency, one
thread's copy rate and the share of a host's paper DRAM all copies get, the per-tensor work of Python and of native
loaders, a CPU dtype conversion's rate, mapping a page-cache hit per OS, a flash device's access time as the
transfer time of ``flash_access_mb`` at its own bandwidth, an unidentified NVMe drive's bandwidth, a network
storage's round trip and llama.cpp's fixed start (context, buffers and warm-up inside its "load time"). No
parameter is per machine: a disk's bandwidth is the one its source states, or the shared NVMe bandwidth. Least
squares on log(predicted / measured), each row weighted by 1/sqrt(rows of its source) so that a source with 50 rows
does not outvote one with 2, with a soft-L1 loss (a row the mechanism misses by far pulls linearly, not
quadratically) and a weak pull towards each parameter's stated start; a parameter no training row
depends on stays at its start (:data:`PARAMETERS`).

:func:`loso_summary` refits once per held-out group (a source with every source sharing one of its machines) and
reports the median |error| per source and over all rows.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.config.links import link_info
from sim.config.load import validate
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError
from sim.core.units import GB, GIB, KIB, MIB
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.lab import loading
from sim.lab.loaders import composition, copy_bandwidth, host_cap_gbps, stage_costs
from sim.lab.pagecache import PageCache
from sim.lab.resources import StageCosts, memory_targets

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "calibration" / "public"
SETUPS = ROOT / "calibration" / "loads_setups.yaml"
MODELS = ROOT / "calibration" / "models"
TABLES = ("weight_loading.csv", "weight_loading_more.csv", "unified_memory_bandwidth.csv")
CHUNK_MIB = 1024.0  # chunks of 1 GiB: a chunk's share of the page cache and of the stages

# name: (stated start, low, high, unit, what). The start is the value a held-out group gets when no training row
# depends on the parameter; chosen before any fit (specifications or the schema's defaults where there are any).
PARAMETERS: dict[str, tuple[float, float, float, str, str]] = {
    "pcie_efficiency": (0.84, 0.3, 0.99, "fraction", "share of the paper PCIe bandwidth a host-to-GPU copy gets "
                        "(sim's default, calibration/loading.yaml)"),
    "copy_gbps_per_thread": (10.0, 0.5, 100.0, "GB/s", "one thread's copy of a large buffer (loading.host)"),
    "copy_share_of_dram": (0.309, 0.02, 0.98, "fraction", "most all copies of a host get at once, of its paper DRAM"),
    "python_s_per_tensor": (1e-4, 1e-8, 0.1, "s", "per-tensor work of a Python loader (loading.host)"),
    "fastsafetensors_s_per_tensor": (1e-4, 1e-8, 0.1, "s", "per-tensor work of fastsafetensors (loading.host)"),
    "native_s_per_tensor": (1e-5, 1e-9, 0.01, "s", "per-tensor work of a C/C++ loader (loading.host)"),
    "convert_gbps_per_thread": (2.0, 0.05, 100.0, "GB/s", "one thread's CPU dtype conversion (loading.host)"),
    "hit_s_per_gb_linux": (0.05, 1e-5, 20.0, "s/GB", "mapping page-cache hits under Linux (loading.mmap)"),
    "hit_s_per_gb_windows": (0.05, 1e-5, 20.0, "s/GB", "mapping page-cache hits under Windows"),
    "hit_s_per_gb_macos": (0.05, 1e-5, 20.0, "s/GB", "mapping page-cache hits under macOS"),
    "flash_access_mb": (0.25, 1e-3, 100.0, "MB", "a flash device's access time per request, as the transfer time "
                        "of this many MB at its own bandwidth"),
    "nvme_gbps": (3.5, 0.2, 30.0, "GB/s", "sequential read of an NVMe drive the source does not identify (a PCIe "
                  "3.0 x4 drive's 3.94 GB/s interface at sim's default PCIe efficiency)"),
    "network_latency_s": (5e-4, 1e-6, 0.5, "s", "round trip of one request to network storage"),
    "llamacpp_fixed_s": (1.0, 1e-3, 120.0, "s", "llama.cpp's fixed start inside its load time: context, buffers, "
                         "warm-up run"),
    "rocm_pageable_s_per_copy": (1e-4, 1e-8, 0.1, "s", "the ROCm runtime's cost of one copy to the GPU from "
                                 "pageable memory (one per tensor), beyond its bytes"),
    "server_start_s": (2.0, 1e-3, 120.0, "s", "a server process's start until it serves, beyond llama.cpp's load "
                       "time (an application's 'model start': process spawn, server init, first health check)"),
}
LOGIT = ("pcie_efficiency", "copy_share_of_dram")
GEN5_X4_PAPER_GBPS = 4 * 32 * 128 / 130 / 8  # PCIe 5.0 x4: 4 lanes x 32 GT/s x 128b/130b / 8 bits (GB/s)
UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "GB/s": 1.0, "GB/s_payload": 1.0, "MB/s": 1e-3, "MByte/s": 1e-3}
RATES = ("direct_read_gbps", "copy_gbps", "host_copy_gbps", "h2d_pinned_gbps", "h2d_pageable_gbps",
         "read_gbps_during_load")


@dataclass(frozen=True)
class RowSpec:
    """How one row is predicted: its machine (a validated one-machine scenario), what was measured and, for a
    load, its chunk plan and which chunks the page cache holds."""

    row_id: str
    quantity: str
    setup: str
    scenario: Scenario = field(repr=False)
    os: str = "linux"
    disk_class: str = "flash"
    disk_gbps: float | str | None = None  # stated GB/s, "nvme", "gen5_x4" or None (no disk)
    request_kib: float | None = None
    queue_depth: int | None = None
    copies_cpu: int | None = None
    unified_in_place: bool | None = None
    tmpfs: bool = False
    fixed: str = ""  # "llamacpp": add llama.cpp's fixed start; "server": and a server process's start
    payload_share: float = 1.0
    rocm: bool = False  # the GPU runs ROCm (its pageable copies cost rocm_pageable_s_per_copy each)
    plan: loading.ChunkPlan | None = field(default=None, repr=False)
    cached: np.ndarray | None = field(default=None, repr=False)
    how: str = ""


@dataclass
class LoadsFit:
    """Shared parameter values, and which of them the training rows determined (the others at their start)."""

    values: dict[str, float]
    fitted: tuple[str, ...]
    rows: int
    cost: float


def _num(text: str) -> float | None:
    """A cell's number: '~110' -> 110, '428-464' -> 446 (midpoint), '1,222' -> 1222; None when it holds two runs
    or no number."""
    t = text.strip().lstrip("~").replace(",", "")
    if " vs " in t or not t:
        return None
    m = re.fullmatch(r"([0-9.]+)\s*-\s*([0-9.]+)", t)
    if m:
        return (float(m[1]) + float(m[2])) / 2
    try:
        return float(t)
    except ValueError:
        return None


def _matches(row: dict[str, str], match: dict[str, Any]) -> bool:
    for col, want in match.items():
        have = row.get(col, "") or ""
        if isinstance(want, list):
            if have not in want:
                return False
        elif str(want) not in have:
            return False
    return True


def read_setups(path: str | Path = SETUPS) -> dict[str, Any]:
    """The mapping file; a one-line ScenarioError when it is not the expected mapping."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(str(path), "", f"expected a readable YAML mapping ({type(exc).__name__})") from None
    for key in ("setups", "models", "rules"):
        if not isinstance((data or {}).get(key), (dict, list)):
            raise ScenarioError(str(path), key, "missing: expected the setups, models and rules sections")
    return data


class LoadsDomain:
    """Load times and the disk, copy and link rates behind them (calibration/public/weight_loading.csv,
    weight_loading_more.csv, unified_memory_bandwidth.csv) against the loading mechanism."""

    name = "load times"

    def __init__(self, public: str | Path = PUBLIC, setups: str | Path = SETUPS) -> None:
        self.public = Path(public)
        self.setups_path = Path(setups)
        self.setups = read_setups(setups)
        self._obs: tuple[list[Observation], list[Excluded]] | None = None

    # -- rows -------------------------------------------------------------------------------------------------
    def observations(self) -> tuple[list[Observation], list[Excluded]]:
        if self._obs is None:
            obs: list[Observation] = []
            excluded: list[Excluded] = []
            for table in TABLES:
                with open(self.public / table, encoding="utf-8", newline="") as f:
                    for row in csv.DictReader(f):
                        got = self._read(table, row)
                        (obs if isinstance(got, Observation) else excluded).append(got)
            self._obs = (obs, excluded)
        return self._obs

    def _read(self, table: str, row: dict[str, str]) -> Observation | Excluded:
        def out(why: str) -> Excluded:
            return Excluded(table, row["row_id"], row["source_id"], row["setup_id"], why)

        rule = next((r for r in self.setups["rules"] if _matches(row, r.get("match", {}))), None)
        if rule is None:
            return out("no rule of calibration/loads_setups.yaml reads it")
        if "exclude" in rule:
            return out(rule["exclude"])
        read = {**rule["read"], **(self.setups.get("rows") or {}).get(row["row_id"], {})}
        value = _num(row["value"])
        scale = UNITS.get(row["unit"].strip())
        if value is None or scale is None:
            return out(f"its value {row['value']!r} {row['unit']!r} is not one number in a known unit")
        spec = self._spec(row, read)
        unit = "GB/s" if spec.quantity in RATES else "s"
        label = " ".join(x for x in (row["model"][:28], row["measurement"][:60]) if x)
        return Observation(table, row["row_id"], row["source_id"], row["setup_id"], spec.quantity, unit,
                           value * scale, engine=row["engine"][:40], grade=row["grade"], label=label, key=spec)

    def _model(self, read: dict, row: dict[str, str]) -> tuple[float, int, int]:
        """(decimal GB, tensors, files) of the row's model."""
        name = read.get("model")
        if name == "from_model_column":
            name = {"Qwen3-30B-A3B": "qwen3_30b_bf16", "DeepSeek-R1": "deepseek_r1_fp8", "GPT-2 (small)":
                    "gpt2_small_f32", "GPT-2 Medium": "gpt2_medium_f32"}[row["model"]]
        m = self.setups["models"][name]
        if "gb" in read:
            gb = float(read["gb"])
        elif "gib" in read:
            gb = float(read["gib"]) * GIB / GB
        elif read.get("gb_from") == "model_bytes_gib_gb":
            gb = float(row["model_bytes_gib"].split()[0])
        elif "gb" in m:
            gb = float(m["gb"])
        elif "gib" in m:
            gb = float(m["gib"]) * GIB / GB
        elif m.get("gib_column"):
            gb = float(row["model_bytes_gib"].split()[0]) * GIB / GB
        else:
            from sim.modelfiles import read_hf_config

            src = m.get("geometry") or m["tensors"]
            gb = read_hf_config(str(MODELS / src["config"]), src["quant"]).weights_bytes / GB
        t = m.get("tensors", {"count": 0})
        if "count" in t:
            tensors = int(t["count"])
        else:
            from sim.lab.tensors import checkpoint_tensors
            from sim.modelfiles import read_hf_config

            g = read_hf_config(str(MODELS / t["config"]), t["quant"])
            tensors = checkpoint_tensors(g, t.get("layout", "safetensors"), scales=bool(t.get("scales")),
                                         extra_layers=int(t.get("extra_layers", 0)))
        return gb, tensors, int(m.get("files", 1))

    def _spec(self, row: dict[str, str], read: dict) -> RowSpec:
        setup = self.setups["setups"][read["setup"]]
        quantity = read["quantity"]
        disk_name = read.get("disk")
        if disk_name == "from_disk_column":
            disk_name = next(d for d in setup["disks"] if d in row["disk"].lower().replace(" ", ""))
        disk = setup["disks"].get(disk_name, {}) if disk_name else {}
        cache = read.get("cache", "cold")
        if cache == "from_disk_column":
            cache = "tmpfs" if "tmpfs" in row["disk"] else "cold"
        elif cache == "from_column":
            cache = "warm" if row["page_cache_state"].startswith("warm") else "cold"
        kind = read.get("loader", "safetensors")
        if kind == "from_backend":
            backend = row["measurement"].split("backend=")[1]
            kind = {"Safetensors": "vllm", "fastsafetensors": "fastsafetensors", "Run:ai Model Streamer":
                    "runai_streamer", "InstantTensor": "instanttensor"}[backend]
        ranks = int(row["gpu"].split("x")[0]) if read.get("ranks_from") == "gpu_column" else int(read.get("ranks", 1))
        host = dict(setup.get("host") or {})
        mach = setup["machine"]
        loader: dict[str, Any] = {"kind": kind, "readers": ranks}
        for k in ("request_kib", "queue_depth"):
            if k in read:
                loader[k] = read[k]
        if read.get("converts"):
            loader["converts"] = True
        gb = tensors = files = 0
        if quantity == "load_s":
            gb, tensors, files = self._model(read, row)
            threads = _threads(kind, read, row, gb, files, ranks)
            if threads is not None:
                loader["threads"] = threads
            if "disk" in row and "S3" in row["disk"] and kind == "runai_streamer":
                loader.update(request_kib=8 * 1024, queue_depth=8, threads=8)  # object-store defaults
        raw = _raw_scenario(mach, host, loader, gb if gb else 1.0, ranks)
        scn = validate(raw, str(self.setups_path))
        spec = RowSpec(row["row_id"], quantity, read["setup"], scn, os=host.get("os", "linux"),
                       disk_class=disk.get("class", "flash"), disk_gbps=disk.get("read_gbps"),
                       request_kib=_request_kib(row) if read.get("request_from") == "transfer_size" else None,
                       queue_depth=read.get("queue_depth"), copies_cpu=read.get("copies_cpu"),
                       unified_in_place=read.get("unified_in_place"), tmpfs=cache == "tmpfs",
                       fixed=read.get("fixed", ""), payload_share=float(read.get("payload_share", 1.0)),
                       rocm=setup.get("runtime") == "rocm",
                       how=f"{kind} on {read['setup']}" + (f", {ranks} ranks" if ranks > 1 else ""))
        if quantity != "load_s":
            return spec
        m = scn.machines["m"]
        targets = memory_targets(scn, m)
        total = gb * GB
        place = read.get("place", "gpu")
        if isinstance(place, dict):
            free = [place["gpu_mib"] * MIB] + [0.0] * (len(targets) - 1)
        elif place == "host":
            free = [0.0] * len(targets)
        else:
            free = [total / len(targets)] * len(targets)
        plan = loading.plan_chunks(row["row_id"], total, tensors=tensors, chunk_bytes=CHUNK_MIB * MIB,
                                   targets=targets, free_bytes=free)
        spec = replace(spec, plan=plan)
        costs = _overrides(stage_costs(_with_params(scn, spec, start_values()), m), spec)
        return replace(spec, cached=_cached(cache, plan, costs, setup, scn))

    # -- fit and predict ----------------------------------------------------------------------------------------
    def fit(self, train: list[Observation]) -> LoadsFit:
        return fit_loads(train)

    def predict(self, fitted: LoadsFit, observations: list[Observation]) -> list[Prediction]:
        return [predict_one(fitted.values, o.key) for o in observations]


def _threads(kind: str, read: dict, row: dict[str, str], gb: float, files: int, ranks: int) -> int | None:
    """A rank's copy threads: fastsafetensors runs one thread per copy request of at most max_copy_block_size
    (default 16 GiB, loader.py @067e405), at most max_threads (the row's 'threads N', default 16)."""
    if not kind.startswith("fastsafetensors"):
        return None
    text = row["measurement"] if read.get("threads_from") == "measurement" else ""
    m = re.search(r"threads (\d+)", text)
    most = int(m[1]) if m else 16
    m = re.search(r"block (\d+)\s*MB", text)
    block = int(m[1]) * MIB if m else 16 * GIB
    own_files = math.ceil(files / ranks)
    per_file = gb * GB / files
    return max(1, min(most, own_files * math.ceil(per_file / block)))


def _request_kib(row: dict[str, str]) -> float:
    m = re.search(r"chunk (\d+) B", row["transfer_size"])
    if m is None:
        raise ScenarioError(row["row_id"], "transfer_size", "expected 'chunk N B'")
    return int(m[1]) / KIB


def _raw_scenario(mach: dict, host: dict, loader: dict, gb: float, ranks: int) -> dict:
    """A one-machine scenario (machine ``m`` on disk ``d``) for a setup; the disk's numbers are set per fit."""
    m: dict[str, Any] = {"disk": "d", "loader": loader, "kind": mach["kind"]}
    gpus: dict[str, Any] = {}
    if mach["kind"] == "unified":
        m["unified_memory_gib"] = mach["memory_gib"]
    else:
        g = mach["gpu"]
        gpus["card"] = {"vram_gib": g["vram_gib"], "pcie_max_gen": g["gen"], "pcie_max_lanes": g["lanes"]}
        n = max(ranks, 1)
        m["gpus"] = {f"g{i}": {"type": "card", "slot_gen": g["gen"], "slot_lanes": g["lanes"]} for i in range(n)}
    h = {k: v for k, v in host.items() if k in ("os", "dram", "mt_s", "channels", "dram_gbps", "ram_gib")}
    if h:
        m["host"] = h
    return {"name": "loads", "loading": {"chunk_mib": CHUNK_MIB}, "disks": {"d": {"read_gbps": 1.0}},
            "gpus": gpus, "models": {"x": {"weights_gib": max(gb * GB / GIB, 1e-3)}}, "machines": {"m": m}}


def start_values() -> dict[str, float]:
    return {k: v[0] for k, v in PARAMETERS.items()}


def _disk(spec: RowSpec, p: dict[str, float]) -> tuple[float, float]:
    """(GB/s, latency s) of the row's disk under parameters ``p``."""
    if spec.disk_gbps == "nvme" or spec.disk_gbps is None:
        bw = p["nvme_gbps"]
    elif spec.disk_gbps == "gen5_x4":
        bw = GEN5_X4_PAPER_GBPS * p["pcie_efficiency"]
    else:
        bw = float(spec.disk_gbps)
    lat = p["network_latency_s"] if spec.disk_class == "network" else p["flash_access_mb"] * 1e-3 / bw
    return bw, lat


def _with_params(scn: Scenario, spec: RowSpec, p: dict[str, float]) -> Scenario:
    """``scn`` with the shared parameters ``p`` set where the scenario holds them (no validation: the values are
    within the schema's bounds by :data:`PARAMETERS`)."""
    host = scn.loading.host.model_copy(update={k: p[k] for k in ("copy_gbps_per_thread", "convert_gbps_per_thread",
                                                                 "python_s_per_tensor", "native_s_per_tensor",
                                                                 "fastsafetensors_s_per_tensor")})
    mm = scn.loading.mmap
    os_costs = getattr(mm, spec.os).model_copy(update={"hit_s_per_gb": p[f"hit_s_per_gb_{spec.os}"]})
    ld = scn.loading.model_copy(update={"host": host, "copy_share_of_dram": p["copy_share_of_dram"],
                                        "mmap": mm.model_copy(update={spec.os: os_costs})})
    bw, lat = _disk(spec, p)
    disk = scn.disks["d"].model_copy(update={"read_gbps": bw, "latency_s": lat})
    return scn.model_copy(update={"loading": ld, "pcie": scn.pcie.model_copy(update={"efficiency":
                                                                                    p["pcie_efficiency"]}),
                                  "disks": {"d": disk}})


def _overrides(costs: StageCosts, spec: RowSpec) -> StageCosts:
    """The row's own reading of its loader (setups file): copies into its own host buffers, the mapping not used in
    place on unified memory, a direct-I/O read of tmpfs being a CPU copy."""
    if spec.copies_cpu is not None:
        costs = replace(costs, copies_cpu=spec.copies_cpu)
    if spec.unified_in_place is not None:
        costs = replace(costs, unified_in_place=spec.unified_in_place)
    if spec.tmpfs and costs.direct:
        costs = replace(costs, direct=False, copies_gpu=costs.copies_gpu + 1)
    return costs


def _runtime(costs: StageCosts, spec: RowSpec, p: dict[str, float]) -> StageCosts:
    """The GPU runtime's own per-copy cost: ROCm's copies from pageable memory, one per tensor."""
    if spec.rocm and costs.pageable:
        return replace(costs, loader_s_per_tensor=costs.loader_s_per_tensor + p["rocm_pageable_s_per_copy"])
    return costs


def _cached(cache: Any, plan: loading.ChunkPlan, costs: StageCosts, setup: dict, scn: Scenario) -> np.ndarray:
    """Which chunks are page-cache hits for the row's load."""
    n = plan.n
    if cache in ("warm", "tmpfs"):
        return np.ones(n, dtype=bool)
    if cache == "cold":
        return np.zeros(n, dtype=bool)
    if isinstance(cache, dict) and "evicted" in cache:  # the first share read again, the rest still cached
        edges = np.cumsum(plan.sizes) / plan.total_bytes
        return edges > float(cache["evicted"])
    if isinstance(cache, dict) and "restarts" in cache:
        room = (float(setup["host"].get("ram_gib", scn.machines["m"].unified_memory_gib or 0.0))
                - float(setup.get("reserve_gib", 0.0))) * GIB
        pc = PageCache(max(room - own_host_bytes(plan, costs), 0.0))
        hits = np.zeros(n, dtype=bool)
        for _ in range(int(cache["restarts"])):
            hits = pc.read_all(plan.file, plan.sizes, direct=costs.direct)
        return hits
    raise ScenarioError(str(SETUPS), "rules.read.cache", f"{cache!r}: expected cold, warm, tmpfs, restarts or evicted")


def own_host_bytes(plan: loading.ChunkPlan, costs: StageCosts) -> float:
    """Bytes the load itself holds in host RAM outside the page cache while it runs: what it copies into its own
    buffers there (unified memory not used in place, host tensors it copies), the room the page cache loses."""
    rates = loading.link_rates(plan)
    in_host = ~np.isfinite(rates)
    unified = in_host & (plan.target >= 0)
    copied_unified = unified & (not costs.unified_in_place)
    copied_host = in_host & (plan.target < 0) & (costs.copies_cpu > 0)
    return float(plan.sizes[copied_unified | copied_host].sum())


# -- the mechanism's value for one row --------------------------------------------------------------------------
def predict_one(p: dict[str, float], spec: RowSpec) -> Prediction:
    scn = _with_params(spec.scenario, spec, p)
    m = scn.machines["m"]
    q = spec.quantity
    if q == "h2d_pinned_gbps":
        return Prediction(link_info(scn, m, "g0").gbps, "link: paper x PCIe efficiency")
    if q == "h2d_pageable_gbps":
        link, copy = link_info(scn, m, "g0").gbps, copy_bandwidth(scn, m)
        return Prediction(1 / (1 / link + 1 / copy), f"staging copy {100 * link / (link + copy):.0f}%, "
                          f"link {100 * copy / (link + copy):.0f}%")
    if q == "copy_gbps":
        return Prediction(copy_bandwidth(scn, m), "one thread's copy")
    if q == "host_copy_gbps":
        return Prediction(host_cap_gbps(scn, m) / spec.payload_share, "the share of paper DRAM all copies get")
    costs = _runtime(_overrides(stage_costs(scn, m), spec), spec, p)
    if q in ("direct_read_gbps", "read_gbps_during_load"):
        if spec.request_kib is not None:
            costs = replace(costs, request_bytes=spec.request_kib * KIB, queue_depth=1, readers=1)
        r = costs.request_bytes / GB
        lat = costs.disk_latency_s
        share = lat / (lat + r / costs.disk_gbps)
        return Prediction(costs.disk_gbps_effective(), f"request latency {100 * share:.0f}%, transfer "
                          f"{100 * (1 - share):.0f}% ({costs.request_bytes / KIB:g} KiB x {costs.queue_depth})")
    assert spec.plan is not None and spec.cached is not None
    times = loading.stage_times(spec.plan, costs, spec.cached)
    comp = composition(scn, costs)
    wall = loading.load_time(times, comp, scn.loading.buffer_chunks)
    fixed = (p["llamacpp_fixed_s"] if spec.fixed else 0.0) + (p["server_start_s"] if spec.fixed == "server" else 0.0)
    return Prediction(wall + fixed, _mechanism(times, costs, spec, fixed))


def _mechanism(times: loading.StageTimes, costs: StageCosts, spec: RowSpec, fixed: float) -> str:
    """Which stages the load's seconds go to (shares of the stages' sums)."""
    assert spec.plan is not None
    per_tensor = float(spec.plan.tensors.sum()) * costs.loader_s_per_tensor
    if costs.readers > 1 and costs.rank_tensors == "share":
        per_tensor /= costs.readers
    parts = {"disk": float(times.disk.sum()), "host copies": max(float(times.loader.sum()) - per_tensor, 0.0),
             "per-tensor": per_tensor, "link": float(times.link.sum()), "fixed start": fixed}
    total = sum(parts.values()) or 1.0
    shown = [f"{k} {100 * v / total:.0f}%" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
             if v / total >= 0.05]
    hit = float(np.mean(spec.cached)) if spec.cached is not None and spec.cached.size else 0.0
    return ", ".join(shown) + f" ({spec.how}; page cache {100 * hit:.0f}%)"


# -- fitting ----------------------------------------------------------------------------------------------------
def _to_x(name: str, v: float) -> float:
    return math.log(v / (1 - v)) if name in LOGIT else math.log(v)


def _to_v(name: str, x: float) -> float:
    return 1 / (1 + math.exp(-x)) if name in LOGIT else math.exp(x)


def _log_errors(p: dict[str, float], rows: list[Observation]) -> np.ndarray:
    out = np.empty(len(rows))
    for i, o in enumerate(rows):
        v = predict_one(p, o.key).value
        out[i] = math.log(v / o.measured) if v > 0 and math.isfinite(v) else 10.0
    return out


PRIOR_WEIGHT = 0.3 / math.log(10)  # a parameter a decade from its stated start costs what a source 30% off does


def _free(p: dict[str, float], rows: list[Observation], candidates: Iterable[str]) -> list[str]:
    """The candidates some row of ``rows`` depends on (a 5% step in the parameter moves its prediction)."""
    base = _log_errors(p, rows)
    out = []
    for name in candidates:
        probe = dict(p)
        probe[name] = _to_v(name, _to_x(name, p[name]) + 0.05)
        if np.any(np.abs(_log_errors(probe, rows) - base) > 1e-9):
            out.append(name)
    return out


def _solve(p: dict[str, float], rows: list[Observation], free: list[str]) -> tuple[dict[str, float], float]:
    """``free`` fitted to ``rows`` from ``p``: least squares on weighted log errors, each source's rows weighted
    1/sqrt(its rows), a soft-L1 loss (a row far off pulls linearly, not quadratically), and a weak pull of each
    parameter towards its stated start."""
    from scipy.optimize import least_squares

    counts: dict[str, int] = {}
    for o in rows:
        counts[o.source] = counts.get(o.source, 0) + 1
    weights = np.array([1 / math.sqrt(counts[o.source]) for o in rows])
    x_start = np.array([_to_x(n, PARAMETERS[n][0]) for n in free])

    def values(x: np.ndarray) -> dict[str, float]:
        out = dict(p)
        out.update({n: _to_v(n, float(v)) for n, v in zip(free, x, strict=True)})
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([weights * _log_errors(values(x), rows), PRIOR_WEIGHT * (x - x_start)])

    lo = [_to_x(n, PARAMETERS[n][1]) for n in free]
    hi = [_to_x(n, PARAMETERS[n][2]) for n in free]
    x0 = np.clip([_to_x(n, p[n]) for n in free], lo, hi)
    sol = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2, diff_step=1e-4, xtol=1e-10,
                        ftol=1e-10, gtol=1e-10, max_nfev=400)
    return values(sol.x), float(sol.cost)


def fit_loads(train: list[Observation]) -> LoadsFit:
    """The shared parameters (:data:`PARAMETERS`) fitted to ``train``, deterministically (least squares from the
    stated starts, no random draws), in two steps, as one calibrates a machine from its parts: the rows that
    measure a part (a disk's requests, a copy, a link: :data:`RATES`) fit the parameters they depend on; the load
    times then fit the parameters left (those no such row determines), the parts' values held."""
    p = start_values()
    rates = [o for o in train if o.quantity in RATES]
    loads = [o for o in train if o.quantity not in RATES]
    fitted: list[str] = []
    cost = 0.0
    for rows in (rates, loads):
        if not rows:
            continue
        free = _free(p, rows, [n for n in PARAMETERS if n not in fitted])
        if free:
            p, c = _solve(p, rows, free)
            fitted += free
            cost += c
    return LoadsFit({n: float(f"{v:.6g}") for n, v in p.items()}, tuple(fitted), len(train), cost)


# -- leave one source out ---------------------------------------------------------------------------------------
def groups(obs: Iterable[Observation]) -> list[list[str]]:
    """Sources held out together: a source with every source that shares one of its machines (sorted)."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            a = parent[a]
        return a

    by_machine: dict[str, str] = {}
    for o in obs:
        find(o.source)
        if o.machine in by_machine:
            parent[find(o.source)] = find(by_machine[o.machine])
        else:
            by_machine[o.machine] = o.source
    out: dict[str, list[str]] = {}
    for s in sorted(parent):
        out.setdefault(find(s), []).append(s)
    return sorted(out.values())


@dataclass
class LosoRow:
    row_id: str
    source: str
    quantity: str
    measured: float
    predicted: float
    mechanism: str

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def loso(domain: LoadsDomain | None = None) -> list[LosoRow]:
    """Every observation predicted by a fit on every group but its own."""
    domain = domain or LoadsDomain()
    obs, _ = domain.observations()
    out: list[LosoRow] = []
    for group in groups(obs):
        held = [o for o in obs if o.source in group]
        fitted = domain.fit([o for o in obs if o.source not in group])
        for o, pr in zip(held, domain.predict(fitted, held), strict=True):
            out.append(LosoRow(o.row_id, o.source, o.quantity, o.measured, pr.value, pr.mechanism))
    return out


def loso_summary(rows: list[LosoRow] | None = None) -> dict[str, Any]:
    """Median |predicted / measured - 1| held out: over all rows, per source, and the median of the sources'
    medians; the ten worst rows with their mechanism."""
    rows = rows if rows is not None else loso()
    per: dict[str, list[float]] = {}
    for r in rows:
        per.setdefault(r.source, []).append(abs(r.error))
    sources = {s: float(np.median(v)) for s, v in sorted(per.items())}
    worst = sorted(rows, key=lambda r: -abs(r.error))[:10]
    return {"rows": len(rows), "median_abs_error": float(np.median([abs(r.error) for r in rows])),
            "median_of_source_medians": float(np.median(list(sources.values()))),
            "sources": {s: {"rows": len(per[s]), "median_abs_error": v} for s, v in sources.items()},
            "worst": [{"row_id": r.row_id, "source": r.source, "quantity": r.quantity, "measured": r.measured,
                       "predicted": r.predicted, "error": r.error, "mechanism": r.mechanism} for r in worst]}


def main() -> None:
    """``python -m sim.fidelity.loads``: the leave-one-source-out summary as JSON (a few minutes)."""
    import json

    print(json.dumps(loso_summary(), indent=1))


if __name__ == "__main__":
    main()
