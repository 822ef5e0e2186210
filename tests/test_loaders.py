"""Real loaders' paths (sim.lab.loaders): the request-size law, mmap against read, pinned against pageable, direct
I/O, parallel readers, start-up phases in dispatch, and the public loads kept out of the fit."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from conftest import CALIBRATION, ROOT, tiny_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.calibration.fit_loading import load_raw_for_fit
from sim.calibration.fit_loads import fit, predict, read_rows
from sim.config.load import validate
from sim.config.yaml_io import read_yaml
from sim.core.units import GB, MIB
from sim.lab import loading
from sim.lab.loaders import composition, lone_load_s, stage_costs
from sim.lab.resources import memory_targets

PUBLIC = os.path.join(ROOT, "scenarios", "public_loads.yaml")
TABLE = os.path.join(CALIBRATION, "public_loads.csv")


def machine_with(kind: str, latency_s: float = 80e-6, **loader):
    raw = tiny_scenario()
    raw["disks"]["d"] = {"read_gbps": 3.0, "latency_s": latency_s}
    raw["machines"]["box"]["loader"] = {"kind": kind, "copy_gbps": 10.0, **loader}
    scn = validate(raw, "t")
    return scn, scn.machines["box"]


def load_s(scn, m, warm: bool, gb: float = 8.0) -> float:
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("f", gb * GB, tensors=0, chunk_bytes=256 * MIB, targets=targets,
                               free_bytes=[t.capacity_bytes for t in targets])
    costs = stage_costs(scn, m)
    return lone_load_s(scn, costs, plan, np.full(plan.n, warm))


def test_a_request_costs_latency_plus_bytes_over_bandwidth_with_depth_in_flight():
    scn, m = machine_with("llamacpp_no_mmap", request_kib=1024, queue_depth=1)
    r = 1024 * 1024 / GB
    assert stage_costs(scn, m).disk_gbps_effective() == pytest.approx(r / (80e-6 + r / 3.0))
    scn, m = machine_with("llamacpp_no_mmap", request_kib=1024, queue_depth=64)
    assert stage_costs(scn, m).disk_gbps_effective() == 3.0  # enough in flight: the disk's bandwidth


def test_a_pageable_copy_costs_the_staging_copy_and_a_warm_load_beats_a_cold_one():
    scn, m = machine_with("vllm")
    costs = stage_costs(scn, m)
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("f", 8 * GB, tensors=0, chunk_bytes=256 * MIB, targets=targets,
                               free_bytes=[t.capacity_bytes for t in targets])
    warm = np.ones(plan.n, dtype=bool)
    pageable = loading.load_time(loading.stage_times(plan, costs, warm), "serial")
    pinned = loading.load_time(loading.stage_times(plan, replace(costs, pageable=False), warm), "serial")
    assert pageable - pinned == pytest.approx(8 / 10.0)  # 8 GB through the staging copy at 10 GB/s
    assert load_s(scn, m, warm=True) < load_s(scn, m, warm=False)
    _, direct = machine_with("fastsafetensors_gds")
    assert load_s(scn, direct, warm=True) == load_s(scn, direct, warm=False)  # direct I/O bypasses the page cache
    _, buffered = machine_with("fastsafetensors")  # without GDS its reads go through the page cache
    assert load_s(scn, buffered, warm=True) < load_s(scn, buffered, warm=False)


@pytest.mark.parametrize("kind", ["vllm", "vllm_prefetch", "llamacpp_mmap", "llamacpp_no_mmap", "fastsafetensors",
                                  "fastsafetensors_gds"])
def test_a_lone_load_in_one_event_equals_it_chunk_by_chunk_with_a_partly_warm_cache(kind):
    """The closed form (one event) and the simpy pipeline give the same load for every real kind, hits and misses
    mixed (mapped hits cost what misses do not), spilled chunks included."""
    import simpy

    from sim.lab.pagecache import PageCache
    from sim.lab.pipeline import Rig, load

    raw = tiny_scenario(models__m16={"weights_gib": 16, "tensors": 1600})
    raw["disks"]["d"] = {"read_gbps": 3.0, "latency_s": 200e-6}
    raw["machines"]["box"]["loader"] = {"kind": kind, "copy_gbps": 10.0}
    raw["machines"]["box"]["on_overflow"] = "spill"
    raw["machines"]["box"]["host"] = {"os": "windows"}
    scn = validate(raw, "t")
    m = scn.machines["box"]
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("m16", 16 * GB, tensors=1600, chunk_bytes=256 * MIB, targets=targets,
                               free_bytes=[8 * GB])  # half of it stays in host RAM
    assert plan.spilled_bytes > 0
    results = []
    for exclusive in (False, True):
        env = simpy.Environment()
        cache = PageCache(40 * GB)
        for i in range(0, plan.n, 3):  # a third of the chunks page-cached: hits and misses mixed
            cache.insert(("m16", i), float(plan.sizes[i]))
        rig = Rig.build(env, stage_costs(scn, m), cache, [t.name for t in targets])
        proc = env.process(load(rig, plan, "m16", composition(scn, rig.costs), 2, exclusive=exclusive))
        env.run()
        results.append(proc.value)
    chunked, whole = results
    assert whole.wall_s == pytest.approx(chunked.wall_s, rel=1e-12)
    for field in ("disk_s", "loader_s", "link_s", "bytes_from_disk", "bytes_from_cache"):
        assert getattr(whole, field) == pytest.approx(getattr(chunked, field), rel=1e-12), field


def test_mmap_faults_read_slower_than_large_reads_and_no_mmap_copies_once_more():
    scn, mmap = machine_with("llamacpp_mmap", latency_s=200e-6)
    _, read = machine_with("llamacpp_no_mmap", latency_s=200e-6)
    r = 256 * 1024 / GB  # 256 KiB faults, two in flight, 200 us each
    assert stage_costs(scn, mmap).disk_gbps_effective() == pytest.approx(2 * r / (200e-6 + r / 3.0))
    assert load_s(scn, read, warm=False) < load_s(scn, mmap, warm=False)
    assert stage_costs(scn, read).copies_gpu == stage_costs(scn, mmap).copies_gpu + 1


def ranks_load_s(kind: str, ranks: int, warm: bool, gb: float = 32.0, tensors: int = 0, host: dict | None = None,
                 link: float = 25.0, **loader) -> float:
    """A load of ``gb`` GB with ``ranks`` tensor-parallel ranks on one machine (a GPU each, one disk)."""
    raw = tiny_scenario()
    raw["disks"]["d"] = {"read_gbps": 3.0, "latency_s": 80e-6}
    raw["machines"]["box"]["loader"] = {"kind": kind, "readers": ranks, **loader}
    raw["machines"]["box"]["gpus"] = {f"g{i}": {"type": "card", "slot_gen": 4, "slot_lanes": 16,
                                                "measured_link_gbps": link} for i in range(ranks)}
    if host is not None:
        raw["machines"]["box"]["host"] = host
    scn = validate(raw, "t")
    m = scn.machines["box"]
    targets = memory_targets(scn, m)
    plan = loading.plan_chunks("f", gb * GB, tensors=tensors, chunk_bytes=256 * MIB, targets=targets,
                               free_bytes=[gb * GB / ranks] * ranks)
    return lone_load_s(scn, stage_costs(scn, m), plan, np.full(plan.n, warm))


@pytest.mark.parametrize("kind", ["vllm", "safetensors", "runai_streamer", "fastsafetensors", "instanttensor",
                                  "llamacpp_no_mmap"])
def test_more_ranks_on_one_disk_never_load_faster_cold_than_the_disk_allows(kind):
    """Ranks share one disk: a cold load never beats the disk's bandwidth however many ranks read, and when one
    rank already gets the disk's bandwidth and the host and links cost nothing, more ranks are no faster."""
    for ranks in (1, 2, 4, 8, 64):
        assert ranks_load_s(kind, ranks, warm=False) >= 32.0 / 3.0 * (1 - 1e-12), (kind, ranks)
    free = {"copy_gbps": 1e6, "s_per_tensor": 0.0, "queue_depth": 4096, "link": 1e6}  # the disk is the only cost
    one = ranks_load_s(kind, 1, warm=False, **free)
    assert one == pytest.approx(32.0 / 3.0, rel=1e-4)
    for ranks in (2, 4, 8):
        assert ranks_load_s(kind, ranks, warm=False, **free) == pytest.approx(one, rel=1e-4), (kind, ranks)


def test_a_four_rank_warm_load_is_not_faster_than_the_page_cache_allows():
    """Warm, the bytes come from the page cache through the host's DRAM: four ranks that each stream the whole
    checkpoint (Run:ai through vLLM) copy four times the bytes through one host and load slower than one rank;
    ranks reading their shards (vLLM's default loader) never beat the host's copy of the checkpoint once."""
    host = {"dram": "DDR4", "mt_s": 3200, "channels": 2}  # 51.2 GB/s on paper: copies of all ranks at ~15.8 GB/s
    cap = 0.309 * 51.2
    one = ranks_load_s("runai_streamer", 1, warm=True, host=host)
    four = ranks_load_s("runai_streamer", 4, warm=True, host=host)
    assert four > one
    assert four >= 4 * 32.0 / cap * (1 - 1e-9)  # four ranks each copy every byte once through the host
    for ranks in (1, 2, 4, 8):
        assert ranks_load_s("vllm", ranks, warm=True, host=host) >= 32.0 / cap * (1 - 1e-9)  # the staging copies


def test_every_rank_pays_every_tensor_when_it_iterates_every_tensor():
    """vLLM's default loader: every rank iterates every tensor, so the per-tensor work does not shrink with ranks;
    InstantTensor's ranks each handle their own files and tensors."""
    many = dict(tensors=50_000, s_per_tensor=1e-3, copy_gbps=1e6, queue_depth=4096, link=1e5)
    base = ranks_load_s("vllm", 1, warm=True, **many) - ranks_load_s("vllm", 1, warm=True, **{**many, "tensors": 0})
    assert base == pytest.approx(50.0, rel=1e-6)
    for ranks in (2, 8):
        with_t = ranks_load_s("vllm", ranks, warm=True, **many)
        assert with_t - ranks_load_s("vllm", ranks, warm=True, **{**many, "tensors": 0}) == pytest.approx(50.0,
                                                                                                         rel=1e-6)
    share = ranks_load_s("instanttensor", 8, warm=True, **many) - ranks_load_s("instanttensor", 8, warm=True,
                                                                                **{**many, "tensors": 0})
    assert share < 50.0 / 4


def test_the_per_tensor_cost_grows_with_the_tensor_count_and_comes_from_the_code_path():
    raw = tiny_scenario(models__m16={"weights_gib": 16})
    raw["loading"]["host"] = {"python_s_per_tensor": 2e-4, "native_s_per_tensor": 1e-5}
    for kind, per_tensor in (("vllm", 2e-4), ("llamacpp_no_mmap", 1e-5)):
        raw["machines"]["box"]["loader"] = {"kind": kind, "copy_gbps": 10.0}
        scn = validate(raw, "t")
        m = scn.machines["box"]
        costs = stage_costs(scn, m)
        assert costs.loader_s_per_tensor == per_tensor
        targets = memory_targets(scn, m)
        times = []
        for tensors in (0, 1_000, 20_000):
            plan = loading.plan_chunks("m16", 16 * GB, tensors=tensors, chunk_bytes=256 * MIB, targets=targets,
                                       free_bytes=[t.capacity_bytes for t in targets])
            times.append(lone_load_s(scn, costs, plan, np.ones(plan.n, dtype=bool)))
        assert times[0] < times[1] < times[2]
        if composition(scn, costs) == "serial":
            assert times[2] - times[0] == pytest.approx(20_000 * per_tensor)


def test_a_cpu_dtype_conversion_costs_a_pass_over_the_bytes():
    scn, m = machine_with("vllm", converts=True)
    scn0, m0 = machine_with("vllm")
    assert load_s(scn, m, warm=True) - load_s(scn0, m0, warm=True) == pytest.approx(
        8.0 / scn.loading.host.convert_gbps_per_thread)


def test_tensor_counts_come_from_the_geometry():
    from sim.lab.tensors import checkpoint_tensors
    from sim.modelfiles import read_hf_config

    qwen = read_hf_config(os.path.join(CALIBRATION, "models", "qwen3-30b-a3b.json"), "BF16")
    assert checkpoint_tensors(qwen) == 18867  # vLLM PR #52462 counts 18,867 tensors
    assert checkpoint_tensors(qwen, "gguf") == 48 * 12 + 3  # a GGUF merges a layer's experts into three tensors
    llama = read_hf_config(os.path.join(CALIBRATION, "models", "llama-3.1-8b.json"), "BF16")
    assert checkpoint_tensors(llama) == 32 * 9 + 3
    with pytest.raises(ValueError):
        checkpoint_tensors(qwen, "onnx")


def test_vllm_loaders_report_their_start_up_under_vllms_log_names():
    from sim.lab.startup import VLLM_PHASES, startup_metrics

    raw = tiny_scenario()
    raw["machines"]["box"]["loader"] = {"kind": "vllm", "copy_gbps": 10.0}
    raw["machines"]["box"]["startup"] = {"kv_alloc_s": 3.0, "compile_s": 20.0, "graph_capture_s": 5.0,
                                         "warmup_s": 1.0, "process_s": 2.0}
    m = validate(raw, "t").machines["box"]
    out = startup_metrics("box", m, cold_s=12.0, hot_s=4.0)
    assert out["startup.box.vllm.loading_weights_s"] == 12.0
    assert out["startup.box.vllm.init_engine_s"] == pytest.approx(3.0 + 20.0 + 1.0 + 5.0)
    assert out["startup.box.cold_s"] == pytest.approx(2.0 + 12.0 + 3.0 + 1.0 + 20.0 + 5.0)
    assert {f"startup.box.vllm.{k}" for k in VLLM_PHASES} <= set(out)
    raw["machines"]["box"]["loader"] = {"kind": "llamacpp_mmap", "copy_gbps": 10.0}
    m = validate(raw, "t").machines["box"]
    assert not any(".vllm." in k for k in startup_metrics("box", m, 12.0, 4.0))  # other engines: no vLLM names


def test_start_up_phases_count_in_the_dispatchers_estimate_and_in_the_run():
    base = sim.load(os.path.join(ROOT, "scenarios", "home_lab.yaml"))
    slow = base.set("machines.rtx4090_box.startup.process_s", 7).set("machines.rtx4090_box.startup.warmup_s", 3)
    a, b = base.run(seed=0), slow.run(seed=0)
    assert b.metrics["startup.rtx4090_box.cold_s"] == pytest.approx(a.metrics["startup.rtx4090_box.cold_s"] + 10)
    ja, jb = a.summary["jobs"], b.summary["jobs"]
    short_a = next(j for j in ja if j["id"] == "short_with_load")
    short_b = next(j for j in jb if j["id"] == "short_with_load")
    assert short_b["machine"] == "rtx4090_box"  # the break-even still holds with 10 s more
    assert short_b["load_s"] == pytest.approx(short_a["load_s"] + 10)
    assert short_b["predicted_s"] == pytest.approx(short_b["completed_s"])


def test_public_loads_kept_out_of_the_fit_are_within_20_percent_median():
    result = fit(load_raw_for_fit(PUBLIC), PUBLIC, TABLE)
    assert result.check_median_abs_error < 0.20
    shipped = read_yaml(os.path.join(CALIBRATION, "public_loads.yaml"))
    assert shipped["parameters"] == result.parameters  # the shipped file is what the fit gives
    assert len(result.check_rows) >= 7 and all(r["row_id"] not in {f["row_id"] for f in result.fit_rows}
                                              for r in result.check_rows)
    # the PCIe efficiency fitted on BV's pinned copy, against the seed's two links (calibration/loading.yaml)
    seed = read_yaml(os.path.join(CALIBRATION, "loading.yaml"))
    assert result.parameters["pcie.efficiency"] == pytest.approx(seed["parameters"]["pcie.efficiency"], rel=0.03)


def test_model_size_dependence_comes_from_the_fixed_start_and_the_bytes():
    scn = sim.load(PUBLIC).config
    rows = {r.row_id: r for r in read_rows(TABLE, scn)}
    small, large = predict(scn, rows["WL0059"]), predict(scn, rows["WL0061"])  # 2.9 GB and 6.0 GB off one stick
    fixed = scn.machines["hr_laptop"].startup.process_s
    assert (large - fixed) / (small - fixed) == pytest.approx(6.0 / 2.9)
    assert large / small < 6.0 / 2.9  # the start costs the same for both: a small model loads at a lower GB/s


KINDS = ("generic", "safetensors", "vllm", "vllm_prefetch", "fastsafetensors", "fastsafetensors_gds", "llamacpp_mmap",
         "llamacpp_no_mmap", "llamacpp_direct_io", "runai_streamer", "instanttensor")


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(KINDS), warm=st.booleans(), gb=st.floats(0.5, 40),
       read=st.floats(0.02, 20), latency=st.floats(0, 0.05), copy=st.floats(1, 50), faster=st.floats(1, 4),
       stream=st.floats(0.01, 20),
       knob=st.sampled_from(["read", "latency", "copy", "depth", "link", "stream"]))
def test_a_faster_disk_host_or_link_never_loads_slower(kind, warm, gb, read, latency, copy, faster, stream, knob):
    """Metamorphic: more bandwidth, less latency, more requests in flight or a faster stream never lengthen a load,
    whatever the loader's kind, the page cache and the model's size (more ranks can: sim.lab.ranks)."""

    def load(read_gbps, latency_s, copy_gbps, depth, readers, link, stream_gbps):
        raw = tiny_scenario()
        raw["disks"]["d"] = {"read_gbps": read_gbps, "latency_s": latency_s, "stream_gbps": stream_gbps}
        raw["machines"]["box"]["loader"] = {"kind": kind, "copy_gbps": copy_gbps, "queue_depth": depth,
                                            "readers": readers, "s_per_gb": 0.01}
        raw["machines"]["box"]["gpus"]["g0"]["measured_link_gbps"] = link
        scn = validate(raw, "t")
        return load_s(scn, scn.machines["box"], warm, gb)

    base = dict(read_gbps=read, latency_s=latency, copy_gbps=copy, depth=1, readers=1, link=10.0, stream_gbps=stream)
    better = dict(base)
    if knob == "read":
        better["read_gbps"] = read * faster
    elif knob == "latency":
        better["latency_s"] = latency / faster
    elif knob == "copy":
        better["copy_gbps"] = copy * faster
    elif knob == "depth":
        better["depth"] = int(1 + faster)
    elif knob == "link":
        better["link"] = 10.0 * faster
    else:
        better["stream_gbps"] = stream * faster
    assert load(**better) <= load(**base) * (1 + 1e-12)


def test_a_stream_limit_holds_every_kind_of_loader():
    for kind in KINDS:
        raw = tiny_scenario()
        raw["disks"]["d"] = {"read_gbps": 3.0, "stream_gbps": 0.5}
        raw["machines"]["box"]["loader"] = {"kind": kind, "copy_gbps": 10.0, "s_per_gb": 0.0}
        scn = validate(raw, "t")
        assert stage_costs(scn, scn.machines["box"]).disk_gbps_effective() <= 0.5, kind


@pytest.mark.parametrize("row, where", [
    ("X1,bv_3070ti,,llamacpp_nommap,start_s,,1,,cold,1,check,", "row 1.loader"),
    ("X1,bv_3070ti,,,start_s,,1,,cold,1,fit,disks.bv_nvme.latncy_s", "row 1.parameters"),
    ("X1,bv_3070ti,,,start_s,,1,,cold,1,fit,disks.nodisk.latency_s", "row 1.parameters"),
    ("X1,hr_laptop,,,h2d_pinned_gbps,,,,,1,check,", "row 1.machine"),
    ("X1,bv_3070ti,,,start_s,,,,cold,1,check,", "row 1.file_gb"),
    ("X1,bv_3070ti,,,start_s,,1,,lukewarm,1,check,", "row 1.cache"),
])
def test_a_bad_row_of_load_times_is_a_one_line_error(tmp_path, row, where):
    from sim.core.errors import ScenarioError

    head = "row_id,machine,disk,loader,quantity,request_kib,file_gb,gpu_gb,cache,measured,role,parameters\n"
    path = tmp_path / "t.csv"
    path.write_text(head + row + "\n")
    with pytest.raises(ScenarioError, match=where.replace(".", r"\.")):
        read_rows(str(path), sim.load(PUBLIC).config)
    path.write_text(head + row.replace(",check,", ",fit,") + "\n" + row + "\n")
    with pytest.raises(ScenarioError):
        read_rows(str(path), sim.load(PUBLIC).config)  # and a repeated row id
