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
