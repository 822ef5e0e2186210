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

import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.load import validate
from sim.config.scenario import Scenario
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError
from sim.core.units import GB, GIB, KIB, MIB
from sim.fidelity import loso
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.fidelity.loads_fit import LoadsFit, fit_loads
from sim.fidelity.loads_mechanism import (  # noqa: F401 - the domain's parameters and mechanism, re-exported
    PARAMETERS,
    RATES,
    RowSpec,
    _overrides,
    _with_params,
    own_host_bytes,
    predict_one,
    start_values,
)
from sim.formats.public_loads import WeightLoadRow, read_weight_loading
from sim.lab import loading
from sim.lab.loaders import stage_costs
from sim.lab.pagecache import PageCache
from sim.lab.resources import StageCosts, memory_targets

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "calibration" / "public"
SETUPS = ROOT / "calibration" / "loads_setups.yaml"
MODELS = ROOT / "calibration" / "models"
TABLES = ("weight_loading.csv", "weight_loading_more.csv", "unified_memory_bandwidth.csv")
CHUNK_MIB = 1024.0  # chunks of 1 GiB: a chunk's share of the page cache and of the stages

def _matches(row: WeightLoadRow, match: dict[str, Any]) -> bool:
    for col, want in match.items():
        have = row.cells.get(col, "") or ""
        if isinstance(want, list):
            if have not in want:
                return False
        elif str(want) not in have:
            return False
    return True


def read_setups(path: str | Path = SETUPS) -> dict[str, Any]:
    """The mapping file; a one-line ScenarioError when it is not the expected mapping."""
    data = read_yaml(str(path))  # YAML 1.2, as every file of the project is read
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
                for row in read_weight_loading(self.public / table):
                    got = self._read(table, row)
                    (obs if isinstance(got, Observation) else excluded).append(got)
            self._obs = (obs, excluded)
        return self._obs

    def _read(self, table: str, row: WeightLoadRow) -> Observation | Excluded:
        def out(why: str) -> Excluded:
            return Excluded(table, row.row_id, row.source_id, row.setup_id, why)

        rule = next((r for r in self.setups["rules"] if _matches(row, r.get("match", {}))), None)
        if rule is None:
            return out("no rule of calibration/loads_setups.yaml reads it")
        if "exclude" in rule:
            return out(rule["exclude"])
        read = {**rule["read"], **(self.setups.get("rows") or {}).get(row.row_id, {})}
        if row.measured is None:
            return out(f"its value {row.value_text!r} {row.unit!r} is not one number in a known unit")
        spec = self._spec(row, read)
        unit = "GB/s" if spec.quantity in RATES else "s"
        label = " ".join(x for x in (row.model[:28], row.measurement[:60]) if x)
        return Observation(table, row.row_id, row.source_id, row.setup_id, spec.quantity, unit,
                           row.measured, engine=row.engine[:40], grade=row.grade, label=label, key=spec)

    def _model(self, read: dict, row: WeightLoadRow) -> tuple[float, int, int]:
        """(decimal GB, tensors, files) of the row's model."""
        name = read.get("model")
        if name == "from_model_column":
            name = {"Qwen3-30B-A3B": "qwen3_30b_bf16", "DeepSeek-R1": "deepseek_r1_fp8", "GPT-2 (small)":
                    "gpt2_small_f32", "GPT-2 Medium": "gpt2_medium_f32"}[row.model]
        m = self.setups["models"][name]
        if "gb" in read:
            gb = float(read["gb"])
        elif "gib" in read:
            gb = float(read["gib"]) * GIB / GB
        elif read.get("gb_from") == "model_bytes_gib_gb":
            gb = _model_bytes(row)
        elif "gb" in m:
            gb = float(m["gb"])
        elif "gib" in m:
            gb = float(m["gib"]) * GIB / GB
        elif m.get("gib_column"):
            gb = _model_bytes(row) * GIB / GB
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

    def _spec(self, row: WeightLoadRow, read: dict) -> RowSpec:
        setup = self.setups["setups"][read["setup"]]
        quantity = read["quantity"]
        disk_name = read.get("disk")
        if disk_name == "from_disk_column":
            disk_name = next(d for d in setup["disks"] if d in row.cells["disk"].lower().replace(" ", ""))
        disk = setup["disks"].get(disk_name, {}) if disk_name else {}
        cache = read.get("cache", "cold")
        if cache == "from_disk_column":
            cache = "tmpfs" if "tmpfs" in row.cells["disk"] else "cold"
        elif cache == "from_column":
            cache = "warm" if row.cells["page_cache_state"].startswith("warm") else "cold"
        kind = read.get("loader", "safetensors")
        if kind == "from_backend":
            backend = row.backend
            kind = {"Safetensors": "vllm", "fastsafetensors": "fastsafetensors", "Run:ai Model Streamer":
                    "runai_streamer", "InstantTensor": "instanttensor"}[backend]
        ranks = _ranks(row) if read.get("ranks_from") == "gpu_column" else int(read.get("ranks", 1))
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
            if "S3" in row.cells.get("disk", "") and kind == "runai_streamer":
                loader.update(request_kib=8 * 1024, queue_depth=8, threads=8)  # object-store defaults
        raw = _raw_scenario(mach, host, loader, gb if gb else 1.0, ranks)
        scn = validate(raw, str(self.setups_path))
        spec = RowSpec(row.row_id, quantity, read["setup"], scn, os=host.get("os", "linux"),
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
        plan = loading.plan_chunks(row.row_id, total, tensors=tensors, chunk_bytes=CHUNK_MIB * MIB,
                                   targets=targets, free_bytes=free)
        spec = replace(spec, plan=plan)
        costs = _overrides(stage_costs(_with_params(scn, spec, start_values()), m), spec)
        return replace(spec, cached=_cached(cache, plan, costs, setup, scn))

    # -- fit and predict ----------------------------------------------------------------------------------------
    def fit(self, train: list[Observation]) -> LoadsFit:
        return fit_loads(train)

    def predict(self, fitted: LoadsFit, observations: list[Observation]) -> list[Prediction]:
        return [predict_one(fitted.values, o.key) for o in observations]


def _threads(kind: str, read: dict, row: WeightLoadRow, gb: float, files: int, ranks: int) -> int | None:
    """A rank's copy threads: fastsafetensors runs one thread per copy request of at most max_copy_block_size
    (default 16 GiB, loader.py @067e405), at most max_threads (the row's 'threads N', default 16)."""
    if not kind.startswith("fastsafetensors"):
        return None
    stated = read.get("threads_from") == "measurement"
    most = row.threads if stated and row.threads is not None else 16
    block = row.block_mb * MIB if stated and row.block_mb is not None else 16 * GIB
    own_files = math.ceil(files / ranks)
    per_file = gb * GB / files
    return max(1, min(most, own_files * math.ceil(per_file / block)))


def _request_kib(row: WeightLoadRow) -> float:
    if row.chunk_bytes is None:
        raise ScenarioError(row.row_id, "transfer_size", "expected 'chunk N B'")
    return row.chunk_bytes / KIB


def _model_bytes(row: WeightLoadRow) -> float:
    """The model_bytes_gib cell's number, which a rule says to take."""
    if row.model_bytes_gib is None:
        raise ScenarioError(row.row_id, "model_bytes_gib", "expected a number")
    return row.model_bytes_gib


def _ranks(row: WeightLoadRow) -> int:
    """The GPU cell's "Nx" count, which a rule says to take."""
    if row.gpu_ranks is None:
        raise ScenarioError(row.row_id, "gpu", "expected 'Nx GPU'")
    return row.gpu_ranks


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


# -- leave one source out ---------------------------------------------------------------------------------------
def groups(obs: Iterable[Observation]) -> list[list[str]]:
    """Sources held out together (:func:`sim.fidelity.loso.groups`: a source with every source that shares one of
    its machines), each group's sources sorted."""
    members: dict[str, list[str]] = {}
    for source, group in loso.groups(obs).items():
        members.setdefault(group, []).append(source)
    return sorted(sorted(v) for v in members.values())


def loso_summary(results: list[loso.Result] | None = None) -> dict[str, Any]:
    """Median |predicted / measured - 1| held out (default: :func:`sim.fidelity.loso.run` of the domain): over all
    rows, per source, and the median of the sources' medians; the ten worst rows with their mechanism."""
    results = results if results is not None else loso.run(LoadsDomain(), in_sample=False)[0]
    per: dict[str, list[float]] = {}
    for r in results:
        per.setdefault(r.observation.source, []).append(abs(r.error))
    sources = {s: float(np.median(v)) for s, v in sorted(per.items())}
    worst = sorted(results, key=lambda r: -abs(r.error))[:10]
    return {"rows": len(results), "median_abs_error": float(np.median([abs(r.error) for r in results])),
            "median_of_source_medians": float(np.median(list(sources.values()))),
            "sources": {s: {"rows": len(per[s]), "median_abs_error": v} for s, v in sources.items()},
            "worst": [{"row_id": r.observation.row_id, "source": r.observation.source,
                       "quantity": r.observation.quantity, "measured": r.observation.measured,
                       "predicted": r.held_out.value, "error": r.error, "mechanism": r.held_out.mechanism}
                      for r in worst]}


def main() -> None:
    """``python -m sim.fidelity.loads``: the leave-one-source-out summary as JSON (a few minutes)."""
    import json

    print(json.dumps(loso_summary(), indent=1))


if __name__ == "__main__":
    main()
