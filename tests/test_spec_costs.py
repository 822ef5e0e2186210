"""Step costs from specs (sim.moe.spec_costs, sim.moe.stepcost): a card named from the catalog changes bandwidth,
compute, VRAM and power together; a scenario of catalog names and a model file runs with no step seconds; a miss
never costs less than a hit; and the metamorphic relations over wide sweeps (more free VRAM, a faster link, more
bandwidth or compute never slow anything; a higher top-k never raises the hit rate at fixed slots)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.catalog import gpu_entries
from sim.config.load import load_scenario
from sim.config.yaml_io import read_yaml
from sim.core.units import GB, GIB, MIB
from sim.moe.setup import setup_engine
from sim.moe.spec_costs import DEFAULTS
from sim.moe.stepcost import cpu_budget_experts, step_times

GEN3 = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
HOME = os.path.join(ROOT, "scenarios", "rtx4090_qwen3_30b.yaml")
CARD = "machines.strata_box.gpus.gpu0.type"


def engine(path: str, *sets: str):
    scn = load_scenario(path, sets)[0]
    return scn, setup_engine(scn, scn.serve.machine)


def metrics(path: str, *sets: str, requests: int = 40) -> dict[str, float]:
    return sim.run(sim.load(path, [*sets, f"serve.requests={requests}"]), seed=0).metrics


def test_a_catalog_card_changes_bandwidth_compute_vram_and_power_together():
    _, e5090 = engine(GEN3)
    _, e4090 = engine(GEN3, f"{CARD}=rtx4090")
    spec = gpu_entries()["rtx4090"]
    assert e4090.vram_gib == spec["vram_gib"] and e5090.vram_gib == 31.8  # the scenario's own usable VRAM wins
    # bytes over bandwidth: a resident expert costs in proportion to 1 / hbm_gbps
    assert e4090.params.gpu_expert_s / e5090.params.gpu_expert_s == pytest.approx(1792 / spec["hbm_gbps"])
    assert e4090.specs.compute_tflops / e5090.specs.compute_tflops == pytest.approx(spec["tflops"] / 209.5, rel=0.02)
    assert e4090.power.busy_w == spec["board_power_w"] and e5090.power.busy_w == 575
    assert e4090.params.dense_s > e5090.params.dense_s  # the dense read is slower, its fixed part the same


def test_the_power_of_a_run_never_exceeds_its_card():
    for card in ("rtx5090", "rtx4090", "rtx3090", "rtx4080"):
        m = metrics(GEN3, f"{CARD}={card}", "machines.strata_box.gpus.gpu0.reserved_gib=0")
        assert 0 < m["gpu_power_w"] <= gpu_entries()[card]["board_power_w"]


def test_a_scenario_of_catalog_names_and_a_config_file_runs_within_the_roofline():
    raw = read_yaml(HOME)
    assert "step" not in raw["machines"]["home_box"]["engine"]  # no step seconds written
    scn, eng = engine(HOME)
    m = metrics(HOME)
    assert m["decode_tok_s"] > 0 and m["requests"] == 40
    moe = eng.moe
    read = (moe.dense_gib * GIB + moe.layers * moe.top_k * moe.expert_mib * MIB)  # bytes a token reads, at least
    assert m["decode_tok_s"] < gpu_entries()["rtx4090"]["hbm_gbps"] * GB / read
    names = {s.name for s in eng.specs.sources if s.how.startswith("default")}
    assert {"memory_efficiency", "layer_s", "cpu_efficiency"} <= names  # what the run says it assumed
    assert any(p.startswith("gpus.rtx4090.") for p in scn._defaults)
    assert any(p.startswith("models.qwen3_30b.moe") for p in scn._defaults)


def test_defaults_are_the_shipped_strata_fit():
    cal = read_yaml(os.path.join(ROOT, "calibration", "strata_moe.yaml"))["parameters"]
    for name in ("layer_s", "cpu_efficiency", "cpu_sync_s", "cpu_budget_s", "graph_break_s", "memory_efficiency",
                 "pcie_latency_s"):
        assert DEFAULTS[name][0] == pytest.approx(cal[f"machines.strata_box.engine.step.{name}"], rel=1e-6), name
    assert DEFAULTS["stalled_share"][0] == pytest.approx(cal["machines.strata_box.engine.power.stalled_share"])


@pytest.mark.parametrize("path", [GEN3, HOME])
def test_a_miss_never_costs_less_than_a_hit(path):
    """On the fused path (the misses within the CPU's budget, nothing read over PCIe), moving one touched expert of a
    layer-step from VRAM to host RAM never shortens the step, for every count up to where the GPU's own expert work
    outlasts a host round trip and one CPU expert (beyond it a saturated GPU gains from handing work to an idle CPU,
    as hybrid engines do); the engine's mean resident count lies well inside that range. Each row is a request of
    its own (eagerness does not carry over)."""
    _, eng = engine(path)
    p, moe = eng.params, eng.moe
    most = int((p.cpu_sync_s + p.cpu_expert_s) // p.gpu_expert_s)
    assert most >= moe.top_k * (1 + moe.draft.tokens) * 0.7  # distinct experts a layer-step touches, about
    budget = int(cpu_budget_experts(p))
    assert budget >= 1
    r, m = np.meshgrid(np.arange(1, most + 1), np.arange(0, budget))
    r, m = r.ravel()[:, None].astype(float), m.ravel()[:, None].astype(float)
    rows = np.arange(r.shape[0])
    hit = step_times(r, m, p, starts=rows)
    miss = step_times(r - 1, m + 1, p, starts=rows)
    assert not hit.pcie_reads.any() and not miss.pcie_reads.any()
    assert np.all(miss.total_s >= hit.total_s - 1e-15)
    # the fast path's table gives the expressions' values on every cell
    cells = step_times(r.astype(np.int64), m.astype(np.int64), p, starts=rows).total_s
    assert np.array_equal(cells, hit.total_s)


def decode_along(path: str, key: str, values, metric: str = "decode_tok_s", *sets: str) -> list[float]:
    return [metrics(path, f"{key}={v}", *sets)[metric] for v in values]


NOISE = 0.01  # common random numbers, not identical draws: a relation holds to this relative noise


def never_lower(values: list[float]) -> bool:
    return all(b >= a * (1 - NOISE) for a, b in zip(values, values[1:], strict=False))


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.lists(st.floats(0, 16), min_size=2, max_size=3, unique=True))
def test_more_free_vram_never_lowers_decode(tenants):
    tenants = sorted(tenants, reverse=True)  # less of the card taken, more free VRAM
    assert never_lower(decode_along(GEN3, "machines.strata_box.gpus.gpu0.reserved_gib", tenants))


def test_more_free_vram_never_lowers_decode_on_the_catalog_box():
    assert never_lower(decode_along(HOME, "machines.home_box.gpus.gpu0.reserved_gib", [16, 12, 8, 4, 0]))


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.lists(st.floats(1, 60), min_size=2, max_size=3, unique=True))
def test_a_faster_link_never_slows_decode(rates):
    assert never_lower(decode_along(GEN3, "machines.strata_box.gpus.gpu0.measured_link_gbps", sorted(rates)))


@pytest.mark.parametrize("path,card", [(GEN3, "rtx5090"), (HOME, "rtx4090")])
def test_more_bandwidth_or_compute_never_slows_anything(path, card):
    for key, values in (("hbm_gbps", [400, 1000, 3000]), ("tflops", [50, 150, 500])):
        runs = [metrics(path, f"gpus.{card}.{key}={v}") for v in values]
        assert never_lower([r["decode_tok_s"] for r in runs]), key
        ttft = [r["ttft_s_median"] for r in runs]
        assert all(b <= a * (1 + NOISE) for a, b in zip(ttft, ttft[1:], strict=False)), key


def test_higher_top_k_never_raises_the_hit_rate_at_fixed_slots():
    key = "models.qwen3_30b.moe.top_k"
    rates = [metrics(HOME, f"{key}={k}", "machines.home_box.engine.expert_cache=3000")["expert_hit_rate"]
             for k in (2, 4, 8, 16)]
    assert all(b <= a + 1e-9 for a, b in zip(rates, rates[1:], strict=False)), rates
