"""The hardware catalog shipped with the package (sim/catalog/data/*.yaml) and `sim catalog`: every entry names its
source, carries only known keys with plausible, self-consistent numbers (bandwidth against memory type, INT8 against
FP16, PCIe against sim.core.units), the vendor anchors hold, the API hands out copies, and the command prints tables
within 120 columns, one entry in full, JSON that round-trips, and a one-line did-you-mean for an unknown name."""

from __future__ import annotations

import json
import math
import re
from importlib import resources

import pytest
from click.testing import CliRunner

from sim import catalog
from sim.catalog import (
    GPU_INFO_KEYS,
    GPU_SPEC_KEYS,
    HOST_INFO_KEYS,
    HOST_SPEC_KEYS,
    ISAS,
    KINDS,
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
    store,
)
from sim.cli import main
from sim.core.text import WIDTH
from sim.core.units import PCIE_LANE_GBPS, pcie_paper_gbps

GPUS, HOSTS, LINKS = gpu_entries(), host_entries(), link_entries()
ALL = {"gpus": GPUS, "hosts": HOSTS, "links": LINKS}

REQUIRED_GPUS = {
    "gtx1650super", "rtx2060", "rtx2070", "rtx2080", "rtx2080ti",
    "rtx3060", "rtx3060ti", "rtx3070", "rtx3070ti", "rtx3080", "rtx3080_12gb", "rtx3090", "rtx3090ti",
    "rtx4060", "rtx4060ti_8gb", "rtx4060ti_16gb", "rtx4070", "rtx4070super", "rtx4070ti", "rtx4070tisuper", "rtx4080",
    "rtx4080super", "rtx4090", "rtx5060ti_16gb", "rtx5070", "rtx5070ti", "rtx5080", "rtx5090",
    "rtx_a1000", "rtx_a4000", "rtx_a6000", "rtx6000_ada", "rtx_pro_6000",
    "a100_40gb_pcie", "a100_80gb_pcie", "a100_40gb_sxm", "a100_80gb_sxm", "h100_pcie", "h100_sxm", "l40s",
    "rx7900xtx", "rx7900xt", "rx7800xt", "rx9070xt", "mi300x", "arc_a770",
    "m1_max", "m1_ultra", "m2_max", "m2_ultra", "m3_max", "m3_ultra", "m4_max", "gb10",
    # the public tables' cards (calibration/public/*.csv, gpu column)
    "rx480", "rx580", "rx5700xt", "rx6700xt", "rx6800xt", "rx9060xt_16gb", "radeon_8060s", "radeon_8050s",
    "arc_a310", "arc_pro_b50", "arc_pro_b60", "arc_pro_b70", "arc_b580", "m2", "m2_pro", "m2_max_30c", "m3_pro",
    "m3_max_30c", "m4_pro", "m4_max_32c", "m5", "h200", "a10g",
    "m1_pro",  # the unified-memory additions
}
REQUIRED_HOSTS = {"ddr4_3200_2ch", "ddr4_3600_2ch", "ddr5_5600_2ch", "ddr5_6000_2ch", "ddr5_6400_2ch", "ryzen5_5600x",
                  "ryzen7_5800x", "ryzen9_7950x", "ryzen7_9700x", "ryzen9_9950x", "i9_10900x", "epyc_9355",
                  "xeon_gold_6454s", "xeon_platinum_8480", "threadripper_pro_7975wx", "i7_8550u",
                  # the public tables' CPUs (cpu column)
                  "ryzen5_3500", "ryzen7_3700x", "ryzen7_5700x", "ryzen5_7500f", "ryzen9_5950x", "i5_4278u",
                  "i9_9900t", "core_ultra7_265k", "xeon_e5_2680v4_2s", "xeon_e5_2696v4_2s", "threadripper_pro_3975wx",
                  "xeon_platinum_8581c_2s", "raspberry_pi5", "hifive_premier_p550", "ryzen_ai_max_395", "grace_gb10",
                  # the CPU sides of the unified-memory chips
                  "ryzen_ai_max_390", "ryzen_ai_max_385", "apple_m1_pro", "apple_m1_max", "apple_m1_ultra",
                  "apple_m2", "apple_m2_pro", "apple_m2_max", "apple_m2_ultra", "apple_m3_pro", "apple_m3_max",
                  "apple_m3_max_14c", "apple_m3_ultra", "apple_m4_pro", "apple_m4_max", "apple_m4_max_14c"}
REQUIRED_LINKS = {"pcie1", "pcie2", "pcie3", "pcie4", "pcie5", "nvlink_rtx3090", "nvlink_a100", "nvlink_h100"}

STRING_KEYS = {"name", "source", "note", "memory", "vendor", "dram", "kind", "encoding", "matrix_units", "fp32_basis",
               "family", "isa"}
# per-pin data rate (Gbit/s) the memory type spans, and the bus widths (bits) it comes in
MEMORY = {
    "GDDR5": ((6.0, 9.0), (128, 256, 384)),
    "GDDR6": ((12.0, 20.0), (64, 128, 192, 256, 320, 352, 384)),
    "GDDR6X": ((19.0, 24.0), (192, 256, 320, 384)),
    "GDDR7": ((28.0, 32.0), (128, 192, 256, 384, 512)),
    "HBM2": ((1.6, 2.5), (3072, 4096, 5120, 6144, 8192)),
    "HBM2e": ((2.4, 3.6), (3072, 4096, 5120, 6144, 8192)),
    "HBM3": ((4.8, 6.4), (3072, 4096, 5120, 6144, 8192)),
    "HBM3e": ((6.0, 9.8), (4096, 5120, 6144, 8192)),
    "LPDDR5X": ((7.5, 9.6), (128, 256, 512, 1024)),
}


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def numbers(entry):
    return {k: v for k, v in entry.items() if k not in STRING_KEYS and k not in ("unified", "vram_gib_options")}


# --- the data ------------------------------------------------------------------------------------------------------

def test_the_sanity_anchors_hold():
    assert {k: GPUS["rtx5090"][k] for k in ("vram_gib", "hbm_gbps", "pcie_max_gen", "pcie_max_lanes",
                                            "board_power_w")} == {"vram_gib": 32, "hbm_gbps": 1792, "pcie_max_gen": 5,
                                                                  "pcie_max_lanes": 16, "board_power_w": 575}
    assert {k: GPUS["rtx4090"][k] for k in ("vram_gib", "hbm_gbps", "pcie_max_gen", "pcie_max_lanes",
                                            "board_power_w")} == {"vram_gib": 24, "hbm_gbps": 1008, "pcie_max_gen": 4,
                                                                  "pcie_max_lanes": 16, "board_power_w": 450}
    assert GPUS["rtx4090"]["tflops"] == 165.2 and GPUS["rtx5090"]["tflops"] == 209.5  # dense, FP32 accumulate
    assert GPUS["a100_80gb_sxm"]["hbm_gbps"] == 2039 and GPUS["a100_80gb_sxm"]["tflops"] == 312
    assert GPUS["h100_sxm"]["hbm_gbps"] == 3350 and GPUS["mi300x"]["vram_gib"] == 192
    assert GPUS["gb10"]["unified"] is True and GPUS["gb10"]["hbm_gbps"] == 273


def test_the_required_entries_are_there():
    assert REQUIRED_GPUS <= set(GPUS), REQUIRED_GPUS - set(GPUS)
    assert REQUIRED_HOSTS <= set(HOSTS), REQUIRED_HOSTS - set(HOSTS)
    assert REQUIRED_LINKS <= set(LINKS), REQUIRED_LINKS - set(LINKS)


def test_ids_are_lowercase_and_unique_across_kinds():
    ids = [i for data in ALL.values() for i in data]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", i) for i in ids)


@pytest.mark.parametrize("kind", KINDS)
def test_every_entry_names_its_source_with_https_and_only_known_keys(kind):
    for ident, e in ALL[kind].items():
        assert set(e) <= set(store.FILE_KEYS[kind]), (ident, set(e) - set(store.FILE_KEYS[kind]))
        assert isinstance(e.get("name"), str) and e["name"].strip(), ident
        assert isinstance(e.get("source"), str) and re.fullmatch(r"https://\S+", e["source"]), ident
        for url in re.findall(r"\b[a-z]+://\S*", e.get("note", "")):
            assert url.startswith("https://"), (ident, url)
        for key in set(e) & STRING_KEYS:
            assert isinstance(e[key], str) and e[key].strip(), (ident, key)
        for key, value in numbers(e).items():
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (ident, key)
            assert math.isfinite(value) and value > 0, (ident, key)


@pytest.mark.parametrize("kind", KINDS)
def test_each_file_header_explains_every_key_it_uses(kind):
    text = (resources.files("sim.catalog") / "data" / f"{kind}.yaml").read_text(encoding="utf-8")
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if re.match(r"[a-z]", line))  # the header: what precedes entries
    header = "\n".join(line for line in lines[:first] if line.startswith("#"))
    used = {k for e in ALL[kind].values() for k in e}
    assert all(re.search(rf"#\s+{k}\s", header) for k in used), [k for k in used if f" {k} " not in header]


def test_gpu_numbers_are_plausible():
    for ident, e in GPUS.items():
        assert e["vendor"] in ("nvidia", "amd", "intel", "apple"), ident
        assert e["name"].lower().startswith(e["vendor"]), ident
        assert 2 <= e["vram_gib"] <= 600 and 100 <= e["hbm_gbps"] <= 10_000, ident
        assert 1 <= e.get("tflops", 1) <= 5000 and 1 <= e.get("int8_tops", 1) <= 10_000, ident
        assert 10 <= e.get("board_power_w", 10) <= 1500, ident
        if "GeForce" in e["name"]:
            assert e["board_power_w"] <= 600, ident  # one 12V-2x6 connector at most
        if e.get("unified"):
            assert e["unified"] is True and "pcie_max_gen" not in e and "pcie_max_lanes" not in e, ident
            assert "largest" in e["note"] or "only configuration" in e["note"], ident
        else:
            assert isinstance(e["pcie_max_gen"], int) and 1 <= e["pcie_max_gen"] <= 5, ident
            assert e["pcie_max_lanes"] in (1, 2, 4, 8, 16), ident
            assert "memory" in e, ident
            assert "board_power_w" in e or "board_power_w left out" in e["note"], ident


def test_a_key_left_out_is_said_in_the_note():
    for ident, e in GPUS.items():
        for key in ("memory", "tflops", "int8_tops", "board_power_w", "fp32_tflops"):
            if key not in e:
                assert key in e.get("note", ""), (ident, key)


def test_bandwidth_fits_the_memory_type():
    """Some bus width of the memory type at a data rate within its range gives the stated bandwidth."""
    for ident, e in GPUS.items():
        if "memory" not in e:
            continue
        (low, high), widths = MEMORY[e["memory"]]
        rates = [e["hbm_gbps"] * 8 / w for w in widths]
        assert any(low * 0.99 <= r <= high * 1.01 for r in rates), (ident, e["memory"], e["hbm_gbps"])


def test_int8_and_fp16_rates_agree():
    """Dense INT8 is twice dense FP16 (FP32 accumulate) on workstation and data-centre cards, four times on GeForce
    (which accumulates FP16 in FP32 at half rate), the same on CDNA 2 (MI250X: INT8 MFMA at the FP16 rate)."""
    for ident, e in GPUS.items():
        if "tflops" in e and "int8_tops" in e:
            ratio = e["int8_tops"] / e["tflops"]
            expected = 4.0 if "GeForce" in e["name"] else 1.0 if e["family"] == "cdna2" else 2.0
            assert abs(ratio / expected - 1) < 0.03, (ident, ratio)  # L40S's datasheet: 733 / 362.05


# The entries whose FP32 rate no source in reach gives: each note says why (test_a_key_left_out_is_said_in_the_note)
FP32_OPEN = {"m3_pro", "m4_max", "m4_max_32c", "m5", "a10g"}


def test_every_gpu_has_matrix_units_and_an_fp32_rate():
    for ident, e in GPUS.items():
        assert e["matrix_units"] in MATRIX_UNITS, ident
        assert ("fp32_tflops" in e) == (ident not in FP32_OPEN), ident
        assert ("fp32_basis" in e) == ("fp32_tflops" in e), ident
        if "fp32_tflops" in e:
            assert e["fp32_basis"] in ("vendor", "derived"), ident
            assert 1 <= e["fp32_tflops"] <= 300, ident
            if "tflops" in e:
                assert e["fp32_tflops"] < e["tflops"], ident  # matrix units outrun the shaders on every card here


def test_tflops_only_where_there_are_matrix_units():
    for ident, e in GPUS.items():
        if e["matrix_units"] == "none":
            assert "tflops" not in e and "int8_tops" not in e, ident
        elif "tflops" not in e:
            assert "tflops" in e["note"] and "left out" in e["note"], ident
    assert {i for i, e in GPUS.items() if e["matrix_units"] == "none"} >= {
        "gtx1650super", "rx480", "rx580", "rx5700xt", "rx6700xt", "rx6800xt", "m1_max", "m2", "m4_max"}
    assert GPUS["m5"]["matrix_units"] == "neural_accelerator" and GPUS["mi300x"]["matrix_units"] == "mfma"
    assert GPUS["rx7900xtx"]["matrix_units"] == "wmma" and GPUS["arc_pro_b60"]["matrix_units"] == "xmx"


def test_derived_fp32_rates_reproduce_their_inputs():
    """A derived fp32_tflops is shaders x shader_flop_per_clk x boost_mhz to the second decimal; a vendor figure
    stored with its inputs agrees with them to 1%; the note says which."""
    derived = 0
    for ident, e in GPUS.items():
        calc = gpu_fp32_from_shaders(e)
        assert ("shaders" in e) == ("boost_mhz" in e) == (calc is not None), ident
        if e.get("fp32_basis") == "derived":
            assert calc is not None and round(calc, 2) == e["fp32_tflops"], (ident, calc)
            assert "fp32_tflops derived as" in " ".join(e["note"].split()), ident
            derived += 1
        elif calc is not None:
            assert abs(calc / e["fp32_tflops"] - 1) < 0.01, (ident, calc)
        if "shader_flop_per_clk" in e:  # dual issue: RDNA 3, 3.5 and 4 only
            assert e["shader_flop_per_clk"] == 4 and e["vendor"] == "amd" and e["matrix_units"] == "wmma", ident
    assert derived >= 30
    assert GPUS["rtx4090"]["fp32_tflops"] == 82.6 and GPUS["rtx5090"]["fp32_tflops"] == 104.8  # the whitepapers
    assert GPUS["rx7900xtx"]["fp32_tflops"] == 61.44 and GPUS["rx9070xt"]["fp32_tflops"] == 48.66  # dual issue
    assert GPUS["rx9070xt"]["tflops"] == 194.6  # the WMMA rate, not the 97.3 packed-FP16 shader figure


def test_unified_chips_list_the_sizes_sold_and_binned_chips_their_own_bandwidth():
    for ident, e in GPUS.items():
        options = e.get("vram_gib_options")
        if not e.get("unified"):
            assert options is None, ident
            continue
        assert options == sorted(set(options)) and options[-1] == e["vram_gib"], ident
        assert all(isinstance(o, int) and o > 0 for o in options), ident
    assert GPUS["m3_max_30c"]["hbm_gbps"] == 300 < GPUS["m3_max"]["hbm_gbps"] == 400
    assert GPUS["m4_max_32c"]["hbm_gbps"] == 410 < GPUS["m4_max"]["hbm_gbps"] == 546
    assert GPUS["m2_max_30c"]["hbm_gbps"] == GPUS["m2_max"]["hbm_gbps"] == 400  # Apple bins the M2 Max by cores only
    assert GPUS["radeon_8060s"]["hbm_gbps"] == 256 and GPUS["gb10"]["vram_gib_options"] == [128]


def test_discrete_gpus_fit_the_scenario_schema():
    from sim.config.machines import GpuType

    for ident, e in GPUS.items():
        if not e.get("unified"):
            GpuType(**{k: e[k] for k in GPU_SPEC_KEYS if k in e})
            assert set(GpuType.model_fields) - {"vram_gib"} <= set(GPU_SPEC_KEYS), ident


# per DRAM kind: the MT/s range of its speed bins, and the most a CPU vendor rates it at
DRAM = {"DDR4": ((1600, 3600), 3200), "DDR5": ((4000, 8800), 6400), "LPDDR3": ((1333, 2133), 2133),
        "LPDDR4X": ((3200, 4267), 4267), "LPDDR5": ((5500, 6400), 6400), "LPDDR5X": ((6400, 10700), 9600)}


def test_host_numbers_are_plausible():
    for ident, e in HOSTS.items():
        assert e["dram"] in DRAM, ident
        (low, high), rated = DRAM[e["dram"]]
        assert low <= e["mt_s"] <= high, ident
        if "channels" in e:
            assert "bus_bits" not in e, ident
            # 3: the M3 Pro's 192-bit LPDDR5 bus (three 64-bit equivalents)
            assert isinstance(e["channels"], int) and e["channels"] in (1, 2, 3, 4, 6, 8, 12, 16, 24), ident
            assert e["channels"] % e.get("sockets", 1) == 0, ident
        elif "bus_bits" in e:
            assert isinstance(e["bus_bits"], int) and 8 <= e["bus_bits"] < 64, ident
        else:
            assert "channels" in e["note"] and "left out" in e["note"], ident
        assert ("cores" in e) == ("threads" in e), ident
        if "isa" in e:  # a CPU: the rate its vendor supports, never an overclocking profile
            assert e["mt_s"] <= rated, ident
        if "cores" in e:
            assert "isa" in e, ident
            smt_on_p_cores = 2 * (e["cores"] - e.get("e_cores", 0)) + e.get("e_cores", 0)  # a hybrid part's SMT
            assert e["threads"] in (e["cores"], 2 * e["cores"], smt_on_p_cores), ident


def test_every_cpu_has_clocks_flops_and_isa_or_says_why():
    cpus = {i: e for i, e in HOSTS.items() if "isa" in e}
    assert len(cpus) >= 26
    for ident, e in HOSTS.items():
        if "isa" not in e:  # a DRAM configuration: no CPU keys
            assert not set(e) & {"cores", "base_ghz", "boost_ghz", "fp32_flops_per_cycle", "e_cores"}, ident
    for ident, e in cpus.items():
        assert e["isa"] in ISAS, ident
        for key in ("base_ghz", "boost_ghz", "fp32_flops_per_cycle", "cores"):
            assert key in e or f"{key}" in e["note"] and "left out" in e["note"], (ident, key)
        if "base_ghz" in e and "boost_ghz" in e:
            assert 1.0 <= e["base_ghz"] <= e["boost_ghz"] <= 6.5, ident
        flops = e.get("fp32_flops_per_cycle")
        if flops is not None:  # 2 x FMA units x FP32 lanes of the ISA's widest vector
            assert flops == {"avx2": 32, "neon": 16}.get(e["isa"], flops), ident
            assert flops in ((32, 64) if e["isa"] == "avx512" else (2, 4, 8, 16, 32, 64)), ident
        if e.get("e_cores"):
            assert 0 < e["e_cores"] < e["cores"], ident
            for key in ("e_boost_ghz", "e_fp32_flops_per_cycle"):
                assert key in e or key in e["note"], (ident, key)
        else:
            assert not {"e_boost_ghz", "e_fp32_flops_per_cycle"} & set(e), ident
        if e.get("sockets", 1) > 1:
            assert e["name"].startswith(f"{e['sockets']}x "), ident


def test_the_anchor_cpus():
    assert {k: HOSTS["ryzen9_9950x"][k] for k in ("base_ghz", "boost_ghz", "fp32_flops_per_cycle", "isa")} == {
        "base_ghz": 4.3, "boost_ghz": 5.7, "fp32_flops_per_cycle": 64, "isa": "avx512"}  # Zen 5: 2 x 512-bit FMA
    assert HOSTS["ryzen5_5600x"]["fp32_flops_per_cycle"] == 32 and HOSTS["ryzen9_7950x"]["fp32_flops_per_cycle"] == 32
    assert HOSTS["raspberry_pi5"]["fp32_flops_per_cycle"] == 16 and HOSTS["raspberry_pi5"]["isa"] == "neon"
    assert HOSTS["i9_10900x"]["fp32_flops_per_cycle"] == 64  # Cascade Lake-X: two AVX-512 FMA units
    assert host_dram_gbps(HOSTS["raspberry_pi5"]) == pytest.approx(17.068)  # 32-bit LPDDR4X-4267
    assert host_dram_gbps(HOSTS["ryzen_ai_max_395"]) == pytest.approx(256.0)  # 256-bit LPDDR5X-8000
    assert host_dram_gbps(HOSTS["grace_gb10"]) == pytest.approx(GPUS["gb10"]["hbm_gbps"], rel=0.001)
    assert host_dram_gbps(HOSTS["xeon_e5_2680v4_2s"]) == pytest.approx(2 * 4 * 8 * 2.4)  # two sockets of four
    assert host_dram_gbps(HOSTS["hifive_premier_p550"]) is None  # no published bus width
    for bad in ({"mt_s": 3200, "bus_bits": 0}, {"mt_s": 3200, "bus_bits": 32.0}, {"mt_s": 0, "bus_bits": 32}):
        with pytest.raises(ValueError):
            host_dram_gbps(bad)


def test_catalog_hosts_fit_the_scenario_schema():
    from sim.config.machines import Host

    for ident, e in HOSTS.items():
        host = Host(**{k: e[k] for k in HOST_SPEC_KEYS if k in e})
        assert host.paper_gbps == (None if host_dram_gbps(e) is None else pytest.approx(host_dram_gbps(e))), ident
    assert set(Host.model_fields) >= set(HOST_SPEC_KEYS)


def test_pcie_agrees_with_the_simulators_table():
    for gen in range(1, 6):
        e = LINKS[f"pcie{gen}"]
        assert e["kind"] == "pcie" and e["lanes"] == 16
        assert abs(e["lane_gbps"] - PCIE_LANE_GBPS[gen]) < 5e-5, gen
        assert abs(e["gbps"] - pcie_paper_gbps(gen, e["lanes"])) < 0.01, gen
        efficiency = 0.8 if e["encoding"] == "8b/10b" else 128 / 130
        assert abs(e["gt_s"] * efficiency / 8 - e["lane_gbps"]) < 5e-5, gen


def test_nvlink_figures():
    assert LINKS["nvlink_rtx3090"]["bidirectional_gbps"] == 112.5
    assert LINKS["nvlink_a100"]["bidirectional_gbps"] == 600 and LINKS["nvlink_h100"]["bidirectional_gbps"] == 900
    for ident, e in LINKS.items():
        assert e["kind"] in ("pcie", "nvlink"), ident
        if "bidirectional_gbps" in e:
            assert e["bidirectional_gbps"] == 2 * e["gbps"], ident


# --- the API -------------------------------------------------------------------------------------------------------

def test_the_spec_keys_are_the_agreed_ones():
    assert GPU_SPEC_KEYS == ("vram_gib", "hbm_gbps", "tflops", "int8_tops", "pcie_max_gen", "pcie_max_lanes",
                             "board_power_w", "memory", "vendor", "unified", "name", "source", "note",
                             "fp32_tflops", "matrix_units", "family")
    assert GPU_INFO_KEYS == ("shaders", "boost_mhz", "shader_flop_per_clk", "fp32_basis", "vram_gib_options")
    assert HOST_SPEC_KEYS == ("name", "source", "note", "dram", "mt_s", "channels", "cores", "threads", "bus_bits",
                              "base_ghz", "boost_ghz", "fp32_flops_per_cycle", "isa", "e_cores", "e_boost_ghz",
                              "e_fp32_flops_per_cycle")
    assert HOST_INFO_KEYS == ("sockets",)
    assert set(catalog.__all__) >= {"gpu_entries", "host_entries", "link_entries", "GPU_SPEC_KEYS", "HOST_SPEC_KEYS",
                                    "dram_paper_gbps", "closest"}


def test_the_schema_takes_the_catalogs_enumerations():
    import typing

    from sim.config.machines import GpuType, Host

    def choices(field):
        return tuple(a for a in typing.get_args(typing.get_args(field.annotation)[0]))

    assert choices(GpuType.model_fields["matrix_units"]) == MATRIX_UNITS
    assert choices(Host.model_fields["isa"]) == ISAS
    assert gpu_fp32_from_shaders({"shaders": 6144, "shader_flop_per_clk": 4, "boost_mhz": 2500}) == 61.44
    assert gpu_fp32_from_shaders({"shaders": 16384, "boost_mhz": 2520}) == pytest.approx(82.57536)
    assert gpu_fp32_from_shaders({"fp32_tflops": 1.0}) is None


def test_entries_are_fresh_copies():
    a = gpu_entries()
    a["rtx4090"]["vram_gib"] = 1
    a.pop("rtx5090")
    assert gpu_entries()["rtx4090"]["vram_gib"] == 24 and "rtx5090" in gpu_entries()
    h = host_entries()
    h["epyc_9355"]["mt_s"] = 1
    assert host_entries()["epyc_9355"]["mt_s"] == 6000 and entries("links") == LINKS


def test_dram_paper_bandwidth():
    assert dram_paper_gbps(2, 3200) == pytest.approx(51.2)
    assert dram_paper_gbps(12, 6000) == pytest.approx(576.0)  # the EPYC 9355's stated 576 GB/s per socket
    e = HOSTS["ryzen9_7950x"]
    assert dram_paper_gbps(e["channels"], e["mt_s"]) == pytest.approx(83.2)
    assert dram_paper_gbps(e["channels"], 6000) == pytest.approx(96.0)  # an overridden rate changes it
    for bad in ((0, 3200), (2, 0), (2, -1), (True, 3200), (2.5, 3200), (2, float("nan"))):
        with pytest.raises(ValueError):
            dram_paper_gbps(*bad)


def test_closest():
    assert closest("gpus", "rtx4091") == "rtx4090"
    assert closest("gpus", "RTX 4090") == "rtx4090"
    assert closest("gpus", "NVIDIA GeForce RTX 3090 Ti") == "rtx3090ti"
    assert closest("gpus", "h100") == "h100_pcie"
    assert closest("hosts", "epyc9355") == "epyc_9355"
    assert closest("links", "pcie4") == "pcie4"
    assert closest("hosts", "zzzzzzzz") is None
    with pytest.raises(ValueError):
        closest("cpus", "epyc_9355")


def test_a_broken_file_is_one_clear_error(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "gpus.yaml").write_text("rtx4090: {vram_gib: 24, vram_gb: 24}\n")
    (tmp_path / "data" / "hosts.yaml").write_text("a: 1\na: 2\n")
    monkeypatch.setattr(store.resources, "files", lambda package: tmp_path)
    store._entries.cache_clear()
    try:
        with pytest.raises(CatalogError, match=r"gpus\.yaml: rtx4090: unknown key 'vram_gb'"):
            gpu_entries()
        with pytest.raises(CatalogError, match=r"hosts\.yaml: cannot be read: .*duplicate key"):
            host_entries()
        (tmp_path / "data" / "gpus.yaml").write_text("rtx4090: {vram_gib: 24, matrix_units: tensor}\n")
        store._entries.cache_clear()
        with pytest.raises(CatalogError, match=r"gpus\.yaml: rtx4090\.matrix_units: bad value 'tensor'; expected"):
            gpu_entries()
    finally:
        store._entries.cache_clear()


# --- the command ---------------------------------------------------------------------------------------------------

def fits(line: str) -> bool:
    """Within the width, or over it only by a URL that cannot be broken."""
    return len(line) <= WIDTH or (line.split()[-1].startswith("https://") and len(line.split()) <= 2)


def test_json_round_trips():
    r = invoke("catalog", "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert list(out) == list(KINDS)
    assert out["gpus"] == GPUS and out["links"] == LINKS
    hosts = {i: {**e, "dram_gbps": host_dram_gbps(e)} for i, e in HOSTS.items()}
    assert out["hosts"] == hosts
    only = json.loads(invoke("catalog", "--kind", "links", "--json").stdout)
    assert only == {"links": LINKS}
    one = json.loads(invoke("catalog", "RTX4090", "--json").stdout)
    assert one == {"gpus": {"rtx4090": GPUS["rtx4090"]}}
    assert one["gpus"]["rtx4090"]["fp32_tflops"] == 82.6 and one["gpus"]["rtx4090"]["matrix_units"] == "tensor_core"
    assert out["hosts"]["raspberry_pi5"]["isa"] == "neon" and out["hosts"]["hifive_premier_p550"]["dram_gbps"] is None


def test_tables_have_units_and_stay_within_the_width():
    r = invoke("catalog")
    assert r.exit_code == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    for unit in ("GiB", "GB/s", "TFLOP/s", "TOPS", "W", "PCIe", "MT/s", "derived", "FP32", "matrix", "FLOP/cyc", "ISA",
                 "GHz"):
        assert unit in r.stdout, unit
    for ident in [*GPUS, *HOSTS, *LINKS]:
        assert any(line.startswith(f"  {ident} ") for line in lines), ident
    hosts = invoke("catalog", "--kind", "hosts").stdout
    assert "GPUs" not in hosts and "576" in hosts and "derived" in hosts
    gpus = [line for line in invoke("catalog", "--kind", "gpus").stdout.splitlines() if line.startswith("  ")]
    row = {line.split()[0]: line.split() for line in gpus}
    assert "82.6" in row["rtx4090"] and "tensor" in row["rtx4090"]  # the FP32 column and the matrix kind
    assert "5.83*" in row["rx480"] and "none" in row["rx480"]  # a derived rate is starred
    assert "3.6/4.1" in hosts and "8+12/20" in hosts and "avx512" in hosts


def test_one_entry_in_full():
    r = invoke("catalog", "rtx4090")
    assert r.exit_code == 0
    assert GPUS["rtx4090"]["source"] in r.stdout and "1008" in r.stdout and "165.2" in r.stdout
    assert "NVIDIA GeForce RTX 4090" in r.stdout
    assert "fp32_tflops" in r.stdout and "82.6" in r.stdout and "matrix_units" in r.stdout
    derived = invoke("catalog", "rx480").stdout
    assert "5.83 (derived: 2304 shaders x 2 FLOP/clk x 1266 MHz)" in derived and "Polaris" in derived
    host = invoke("catalog", "--kind", "hosts", "epyc_9355").stdout
    assert "dram_gbps" in host and "576" in host and "derived" in host
    for kind, data in ALL.items():
        for ident in data:
            out = invoke("catalog", "--kind", kind, ident)
            assert out.exit_code == 0 and data[ident]["source"] in out.stdout, ident
            assert all(fits(line) for line in out.stdout.splitlines()), ident


def test_an_unknown_name_is_one_line_with_a_did_you_mean():
    r = CliRunner().invoke(main, ["catalog", "rtx4091"])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and r.stdout == ""
    assert lines[0].startswith("sim: error: catalog: ") and "did you mean 'rtx4090'" in lines[0]
    wrong_kind = CliRunner().invoke(main, ["catalog", "--kind", "hosts", "rtx4090"])
    assert wrong_kind.exit_code == 2 and len(wrong_kind.stderr.strip().splitlines()) == 1
    nothing = CliRunner().invoke(main, ["catalog", "qqqqqqqqqq", "--json"])
    assert nothing.exit_code == 2 and nothing.stdout == "" and "sim catalog" in nothing.stderr
    bad_kind = CliRunner().invoke(main, ["catalog", "--kind", "cpus"])
    assert bad_kind.exit_code == 2 and len(bad_kind.stderr.strip().splitlines()) == 1


def test_the_shipped_parse_of_every_catalog_file_is_current_and_a_stale_one_is_never_read(monkeypatch):
    import json
    from importlib import resources

    from ruamel.yaml import YAML

    from sim.catalog import store

    for kind in store.KINDS:
        text = (resources.files("sim.catalog") / "data" / f"{kind}.yaml").read_text(encoding="utf-8")
        shipped = json.loads((resources.files("sim.catalog") / "data" / f"{kind}.json").read_text(encoding="utf-8"))
        assert shipped["yaml_blake2b"] == store._digest(text), (
            f"sim/catalog/data/{kind}.json is stale: python -c 'from sim.catalog.store import write_parsed; "
            "write_parsed()'")
        assert shipped["entries"] == YAML(typ="safe").load(text)
        assert store._parsed_copy(kind, text + "# edited\n") is None  # the YAML read instead
