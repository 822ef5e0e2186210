"""The catalog's dense FP16 tensor rates added for the GeForce cards, and the model files added to calibration/models:
each value has a source, every derived rate repeats its own arithmetic, and each model file reads to its published
size."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import CALIBRATION

from sim.catalog import gpu_entries
from sim.modelfiles import read_model_file

GPUS = gpu_entries()
MODELS = os.path.join(CALIBRATION, "models")

# The cards whose tflops were added: taken from a whitepaper table or derived from NVIDIA's spec page.
ADDED_TFLOPS = {
    "rtx2060", "rtx3060", "rtx3060ti", "rtx3070ti", "rtx3080_12gb", "rtx3090ti", "rtx4060", "rtx4060ti_8gb",
    "rtx4060ti_16gb", "rtx4070", "rtx4070super", "rtx4070ti", "rtx4070tisuper", "rtx4080super", "rtx5060ti_16gb",
    "rtx5070", "rtx5070ti", "rtx5080",
}
# Still without a vendor figure: the note must say so.
STILL_OPEN = {"gtx1650super", "rtx_a1000", "arc_a770"}

# Published totals and active parameters per token (model cards; B = 1e9). "no_embedding": the vendor leaves the
# input embedding table out of the active count (OpenAI, DeepSeek, Z.ai).
PUBLISHED = [
    ("gpt-oss-120b.json", 116.8e9, 5.1e9),
    ("deepseek-v2-lite.json", 15.7e9, 2.4e9),
    ("glm-4.5-air.json", 106e9, 12e9),
]

# Dense FP16 tensor throughput over DRAM bandwidth, TFLOP/s per GB/s (x 1000 = FLOP per byte). Every GeForce card
# from Turing to Blackwell sits between 0.067 (RTX 2070: 29.9 / 448) and 0.164 (RTX 4090: 165.2 / 1008): the
# tensor rate grew with each generation a little faster than the memory. 0.05-0.25 takes in all of them with room,
# and catches a value taken from the wrong column: the with-sparsity or FP16-accumulate figure of a card near the
# top (twice the dense FP32-accumulate one), or a GB/s-for-TB/s or TOPS-for-TFLOPS slip (a factor of 1000).
GEFORCE_FLOP_PER_BYTE_K = (0.05, 0.25)

DERIVED = re.compile(r"derived: (\d+) SMs .*? x (\d+) FLOP/clk/SM x ([\d.]+) GHz(?: boost)? = ([\d.]+)")


@pytest.mark.parametrize("name, total, active", PUBLISHED)
def test_model_files_read_to_their_published_size(name, total, active):
    g = read_model_file(os.path.join(MODELS, name), quant="Q4_K_M")
    assert g.total_params == pytest.approx(total, rel=0.05)
    assert g.active_params_per_token - g.embedding_params == pytest.approx(active, rel=0.10)
    assert g.is_moe and g.total_params == g.dense_params + g.expert_params * g.experts_per_layer * g.moe_layers


@pytest.mark.parametrize("name", [p[0] for p in PUBLISHED])
def test_model_files_name_their_source(name):
    with open(os.path.join(MODELS, name), encoding="utf-8") as fh:
        raw = json.load(fh)
    assert raw["_source"].startswith("https://huggingface.co/"), name
    assert next(iter(raw)) == "_source", name


def test_the_added_cards_have_tflops_and_a_source():
    for ident in ADDED_TFLOPS:
        e = GPUS[ident]
        assert isinstance(e.get("tflops"), (int, float)), ident
        assert e["source"].startswith("https://"), ident
    for ident, e in GPUS.items():
        if "tflops" in e:
            assert re.fullmatch(r"https://\S+", e["source"]), ident


def test_cards_still_without_a_figure_say_why():
    for ident in STILL_OPEN:
        e = GPUS[ident]
        assert "tflops" not in e and "tflops" in e["note"], ident


def test_each_derived_rate_repeats_its_arithmetic():
    derived = {i: e for i, e in GPUS.items() if "derived:" in e.get("note", "")}
    assert ADDED_TFLOPS <= set(derived), ADDED_TFLOPS - set(derived)
    for ident, e in derived.items():
        m = DERIVED.search(" ".join(e["note"].split()))
        assert m, (ident, e["note"])
        sms, rate, ghz, stated = int(m[1]), int(m[2]), float(m[3]), float(m[4])
        assert stated == e["tflops"], ident
        assert round(sms * rate * ghz / 1000, 1) == e["tflops"], ident
        assert "https://" in e["note"], ident  # the whitepaper the per-SM rate comes from


def test_geforce_rate_per_byte_is_plausible():
    low, high = GEFORCE_FLOP_PER_BYTE_K
    checked = 0
    for ident, e in GPUS.items():
        if "GeForce" in e["name"] and "tflops" in e:
            ratio = e["tflops"] / e["hbm_gbps"]
            assert low <= ratio <= high, (ident, round(ratio, 3))
            checked += 1
    assert checked >= len(ADDED_TFLOPS)


def test_one_generation_one_rate_per_sm():
    """Within a GeForce generation the derived cards use the per-SM rate of its whitepaper cards: 512 dense FP16
    FLOP per clock per SM with FP32 accumulate, on Turing, Ampere, Ada and Blackwell alike."""
    for ident, e in GPUS.items():
        m = DERIVED.search(" ".join(e.get("note", "").split()))
        if m:
            assert int(m[2]) == 512, ident


# --- the unified-memory chips -------------------------------------------------------------------------------------

from sim.catalog import host_dram_gbps, host_entries  # noqa: E402

HOSTS = host_entries()

AI_TOPS = re.compile(r"NVIDIA's ([\d,]+) AI TOPS")
FP4_OVER_16 = re.compile(r"([\d,]+) FP4 TOPS with sparsity / 16 = ([\d.]+)")
APPLE_FP32 = re.compile(r"fp32_tflops derived as (\d+) GPU cores x 128 FP32 ALUs x 2 x ([\d,]+) MHz")

# each unified chip's CPU-side host: its paper DRAM bandwidth is the GPU's memory bandwidth (Apple rounds: 204.8 GB/s
# of LPDDR5-6400 on 256 bits is its "200 GB/s", 2.4% below)
UNIFIED_HOSTS = {
    "apple_m1_pro": "m1_pro", "apple_m1_max": "m1_max", "apple_m1_ultra": "m1_ultra", "apple_m2": "m2",
    "apple_m2_pro": "m2_pro", "apple_m2_max": "m2_max", "apple_m2_ultra": "m2_ultra", "apple_m3_pro": "m3_pro",
    "apple_m3_max": "m3_max", "apple_m3_max_14c": "m3_max_30c", "apple_m3_ultra": "m3_ultra",
    "apple_m4_pro": "m4_pro", "apple_m4_max": "m4_max", "apple_m4_max_14c": "m4_max_32c",
    "ryzen_ai_max_395": "radeon_8060s", "ryzen_ai_max_390": "radeon_8050s", "ryzen_ai_max_385": "radeon_8050s",
    "grace_gb10": "gb10",
}


def test_blackwell_tflops_are_a_sixteenth_of_the_fp4_tops():
    """NVIDIA's Blackwell AI TOPS (FP4, with sparsity) are 16 times the dense FP16 rate with FP32 accumulate stored as
    tflops (x2 sparsity, x2 FP4/FP8, x2 FP8/FP16, x2 FP16/FP32 accumulate): every GeForce 50 entry that quotes them,
    and GB10, whose tflops is derived that way from its 1 PFLOP."""
    checked = 0
    for ident, e in GPUS.items():
        m = AI_TOPS.search(" ".join(e.get("note", "").split()))
        if m and "RTX 50" in e["name"]:
            ratio = int(m[1].replace(",", "")) / e["tflops"]
            assert abs(ratio / 16 - 1) < 0.01, (ident, ratio)
            checked += 1
    assert checked >= 5
    gb10 = GPUS["gb10"]
    m = FP4_OVER_16.search(" ".join(gb10["note"].split()))
    assert m, gb10["note"]
    assert float(m[2]) == gb10["tflops"] == int(m[1].replace(",", "")) / 16
    assert gb10["fp32_tflops"] < gb10["tflops"]


def test_apple_fp32_rates_repeat_their_arithmetic():
    """A derived Apple FP32 rate names its GPU cores x 128 FP32 ALUs x 2 x the clock, and those are the stored
    shaders and boost_mhz."""
    derived = 0
    for ident, e in GPUS.items():
        if e["vendor"] != "apple" or e.get("fp32_basis") != "derived":
            continue
        m = APPLE_FP32.search(" ".join(e["note"].split()))
        assert m, ident
        cores, mhz = int(m[1]), int(m[2].replace(",", ""))
        assert cores * 128 == e["shaders"] and mhz == e["boost_mhz"], ident
        assert round(cores * 128 * 2 * mhz / 1e6, 2) == e["fp32_tflops"], ident
        assert "https://" in e["note"], ident  # where the clock comes from
        derived += 1
    assert derived >= 10


def test_unified_hosts_match_their_gpus_bandwidth():
    for host, gpu in UNIFIED_HOSTS.items():
        h, g = HOSTS[host], GPUS[gpu]
        assert g.get("unified") is True, gpu
        assert host_dram_gbps(h) == pytest.approx(g["hbm_gbps"], rel=0.025), (host, host_dram_gbps(h))
        if host.startswith("apple_"):
            assert h["isa"] == "neon" and 0 < h["e_cores"] < h["cores"] == h["threads"], host
            assert f"gpus.{gpu}" in h["note"], host  # names its GPU entry


def test_every_gpu_names_its_family_and_an_unknown_one_is_refused(monkeypatch):
    from sim.catalog import store

    entries = store.gpu_entries()
    assert all(e.get("family") in store.FAMILIES for e in entries.values())
    assert entries["a100_80gb_sxm"]["family"] == "ampere" and entries["gb10"]["family"] == "blackwell"
    assert entries["radeon_8060s"]["family"] == "rdna3.5" and entries["h100_sxm"]["family"] == "hopper"
    from sim.config.machines import GpuType

    with pytest.raises(Exception, match="family"):
        GpuType(vram_gib=8, pcie_max_gen=4, family="fermi")


# --- the data-centre cards small labs own -------------------------------------------------------------------------

# id -> the published figures entered (datasheets and vendor pages; the with-sparsity NVIDIA figures halved)
DATACENTRE = {
    "t4": {"family": "turing", "vram_gib": 16, "tflops": 65, "int8_tops": 130, "fp32_tflops": 8.1,
           "pcie_max_gen": 3, "board_power_w": 70, "memory": "GDDR6"},
    "l4": {"family": "ada", "vram_gib": 24, "hbm_gbps": 300, "tflops": 121, "int8_tops": 242.5, "board_power_w": 72,
           "pcie_max_gen": 4},
    "a10": {"family": "ampere", "vram_gib": 24, "hbm_gbps": 600, "tflops": 125, "fp32_tflops": 31.2,
            "board_power_w": 150},
    "a30": {"family": "ampere", "memory": "HBM2", "vram_gib": 24, "hbm_gbps": 933, "tflops": 165, "int8_tops": 330,
            "board_power_w": 165},
    "v100_16gb_pcie": {"family": "volta", "vram_gib": 16, "hbm_gbps": 900, "tflops": 112, "fp32_tflops": 14,
                       "pcie_max_gen": 3, "board_power_w": 250},
    "v100_32gb_sxm": {"family": "volta", "vram_gib": 32, "hbm_gbps": 900, "tflops": 125, "fp32_tflops": 15.7,
                      "board_power_w": 300},
    "p100_16gb": {"family": "pascal", "matrix_units": "none", "vram_gib": 16, "hbm_gbps": 732, "fp32_tflops": 9.3,
                  "pcie_max_gen": 3, "board_power_w": 250},
    "b200": {"family": "blackwell", "memory": "HBM3e", "vram_gib": 180, "hbm_gbps": 7700, "tflops": 2250,
             "int8_tops": 4500, "fp32_tflops": 75, "pcie_max_gen": 5, "board_power_w": 1000},
    "mi250x": {"family": "cdna2", "matrix_units": "mfma", "memory": "HBM2e", "vram_gib": 128, "hbm_gbps": 3276.8,
               "tflops": 383, "int8_tops": 383, "fp32_tflops": 47.9, "pcie_max_gen": 4, "board_power_w": 560},
}

SPARSE_ONLY = {"l4", "b200"}


@pytest.mark.parametrize("ident", sorted(DATACENTRE))
def test_the_datacentre_cards_carry_their_published_figures(ident):
    e = GPUS[ident]
    assert {k: e.get(k) for k in DATACENTRE[ident]} == DATACENTRE[ident]
    assert e["source"].startswith("https://") and e["pcie_max_lanes"] == 16, ident
    if ident in SPARSE_ONLY:  # the vendor gives its tensor rates with sparsity only: halved, and the note says so
        assert "with sparsity" in e["note"] and "halved" in e["note"], ident


def test_the_datacentre_cards_follow_the_module_and_tensor_conventions():
    assert "tflops" not in GPUS["p100_16gb"] and "int8_tops" not in GPUS["p100_16gb"]  # Pascal: no tensor cores
    for ident in ("v100_16gb_pcie", "v100_32gb_sxm"):  # Volta: FP16 tensor with FP32 accumulate, no INT8 figure
        assert "FP32 accumulate" in GPUS[ident]["note"] and "int8_tops left out" in GPUS[ident]["note"], ident
    for ident in ("v100_32gb_sxm", "b200", "mi250x"):  # SXM / OAM modules: the host interface, as h100_sxm
        note = " ".join(GPUS[ident]["note"].split())
        assert re.search(rf"host interface (is )?PCIe {GPUS[ident]['pcie_max_gen']}\.0 x16", note), ident
    mi250x, mi300x = GPUS["mi250x"], GPUS["mi300x"]
    note = " ".join(mi250x["note"].split())
    assert "two GPUs of 64 GiB each" in note and "as mi300x is" in note  # the module's figures, the halves in the note
    assert mi250x["vram_gib"] == 2 * 64 and mi250x["tflops"] == 2 * 191.5
    assert mi300x["vram_gib"] == 192 and mi300x["tflops"] == 1307.4  # unchanged
    assert GPUS["h200"]["vram_gib"] == 141 and GPUS["a10g"]["hbm_gbps"] == 600  # the existing ones left as they were


def test_every_gpu_family_is_one_the_schema_takes():
    import typing

    from sim.catalog import store
    from sim.config.machines import GpuType

    schema = typing.get_args(typing.get_args(GpuType.model_fields["family"].annotation)[0])
    assert schema == store.FAMILIES and GpuType(vram_gib=8, pcie_max_gen=4).family is None  # optional, default None
    for ident, e in GPUS.items():
        assert e.get("family") in store.FAMILIES, ident
        assert GpuType(**{k: e[k] for k in store.GPU_SPEC_KEYS if k in e}).family == e["family"], ident
    by_family = {f: {i for i, e in GPUS.items() if e["family"] == f} for f in store.FAMILIES}
    assert {"p100_16gb"} <= by_family["pascal"] and {"v100_16gb_pcie", "v100_32gb_sxm"} <= by_family["volta"]
    assert {"gb10", "rtx5090", "rtx_pro_6000", "b200"} <= by_family["blackwell"]
    assert by_family["rdna3.5"] == {"radeon_8060s", "radeon_8050s"} and by_family["cdna2"] == {"mi250x"}


def test_an_unknown_family_in_the_catalog_is_one_clear_line(tmp_path, monkeypatch):
    from sim.catalog import CatalogError, store

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "gpus.yaml").write_text("old: {vram_gib: 6, family: fermi}\n")
    monkeypatch.setattr(store.resources, "files", lambda package: tmp_path)
    store._entries.cache_clear()
    try:
        with pytest.raises(CatalogError) as err:
            store.gpu_entries()
    finally:
        store._entries.cache_clear()
    message = str(err.value)
    assert "\n" not in message and message.startswith("sim/catalog/data/gpus.yaml: old.family: bad value 'fermi'")
    assert "expected one of pascal, volta" in message and "apple_m5" in message


def test_the_command_lists_the_new_cards_with_their_family():
    from click.testing import CliRunner

    from sim.cli import main

    listing = CliRunner().invoke(main, ["catalog", "--kind", "gpus"])
    assert listing.exit_code == 0
    rows = {line.split()[0] for line in listing.stdout.splitlines() if line.startswith("  ")}
    assert set(DATACENTRE) <= rows
    one = CliRunner().invoke(main, ["catalog", "mi250x"])
    assert one.exit_code == 0 and re.search(r"^  family +cdna2$", one.stdout, re.M)


def test_an_unknown_family_in_a_scenario_is_one_line():
    from click.testing import CliRunner
    from conftest import ROOT

    from sim.cli import main

    scenario = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
    r = CliRunner().invoke(main, ["run", scenario, "--set", "gpus.rtx5090.family=fermi"])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and r.stdout == "" and len(lines) == 1
    assert "gpus.rtx5090.family: bad value 'fermi'" in lines[0] and "'cdna2'" in lines[0]
