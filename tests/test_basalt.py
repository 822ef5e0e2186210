"""Basalt multi-GPU expert tiers (FIELD_NOTES section 4): placement, bench, context sweep, the headroom cliff,
vision placement and layer split, against calibration/basalt_*.csv."""

from __future__ import annotations

import os

import pytest
from conftest import CALIBRATION, ROOT

import sim
from sim.formats.measured_tables import read_measured

THREE = os.path.join(ROOT, "scenarios", "basalt_3gpu.yaml")
TWO = os.path.join(ROOT, "scenarios", "basalt_2gpu_vision.yaml")
ENGINE = "machines.basalt_box.engine."
SEED = 11  # not the fit's seed (sim.calibration.validate.SEED)


def table(name: str) -> list[dict]:
    return read_measured(os.path.join(CALIBRATION, name))[1]


def quantity(rows: list[dict], name: str) -> str:
    return next(r["value"] for r in rows if r["quantity"] == name)


def run(path: str, *sets: str, requests: int = 40, prompt: int = 26, output: int = 512,
        acceptance: float | None = None) -> dict:
    """Metrics of ``requests`` sequential requests of fixed lengths on a Basalt scenario (seed 11)."""
    over = ["serve.workload.kind=sequential", f"serve.requests={requests}", f"serve.prompt_tokens={prompt}",
            f"serve.output_tokens_min={output}", f"serve.output_tokens_max={output}", *sets]
    if acceptance is not None:
        over.append(f"models.basalt_pack.moe.draft.acceptance={acceptance}")
    return sim.load(path, over).run(seed=SEED).metrics


def test_placement_follows_the_start_up_arithmetic():
    """cuda0 resident + cuda1-copy 10.7 GiB + cuda2-copy 5.0 GiB, and the VRAM each card reports in use. The copies
    are set in the scenario from the start-up line, and the 5090's overhead and the 5060 Ti's other use were derived
    from these same VRAM figures: this checks the arithmetic is consistent (resident + copies = every expert, 15.7
    GiB in RAM, each card's use), not an independent prediction."""
    main = table("basalt_3gpu.csv")
    eng = sim.load(THREE).engine()
    experts = eng.moe.layers * eng.moe.experts_per_layer
    gib = eng.moe.expert_mib / 1024
    assert eng.peer_slots[0] * gib == pytest.approx(10.7, abs=0.05)
    assert eng.peer_slots[1] * gib == pytest.approx(5.0, abs=0.05)
    assert eng.expert_slots + sum(eng.peer_slots) == experts  # every expert not resident has a GPU copy
    assert (experts - eng.expert_slots) * gib == pytest.approx(15.7, abs=0.1)  # the start-up line's ram=15.7GiB
    used = {name: mib for name, mib, _ in eng.vram}
    for gpu, key in (("gpu0", "vram_used_5090"), ("gpu1", "vram_used_5080"), ("gpu2", "vram_used_5060ti")):
        assert used[gpu] == pytest.approx(float(quantity(main, key)), abs=3)


def test_bench_decode_and_cold_prefill():
    main = table("basalt_3gpu.csv")
    # the bench's acceptance is not reported; the log's requests decoding at its rate had 88-89% acceptance
    m = run(THREE, acceptance=0.885)
    assert m["decode_tok_s"] == pytest.approx(float(quantity(main, "bench_decode")), rel=0.15)
    # the bench's cold pp16384 is not claimed (the scenario's calibrate.unclaimed): measured, it is slower than the
    # log's cold 11,951-token prompt, while streaming each expert once makes longer prompts faster in the mechanism
    bench = float(quantity(main, "bench_prefill_16k_cold"))
    log_12k = next(r for r in table("basalt_serve_requests.csv") if r["prompt_tokens"] == "11951")
    assert bench < float(log_12k["prefill_tok_s"])
    m16 = run(THREE, requests=3, prompt=16384, output=1)
    m12 = run(THREE, requests=3, prompt=11951, output=1)
    assert m16["prefill_tok_s"] > m12["prefill_tok_s"]


@pytest.mark.parametrize("tier", ["32K", "64K", "128K", "256K"])
def test_context_sweep_prefill_and_decode(tier):
    row = next(r for r in table("basalt_context_sweep.csv") if r["tier"] == tier)
    acceptance = (float(row["acceptance_min_pct"]) + float(row["acceptance_max_pct"])) / 200
    m = run(THREE, requests=12, prompt=int(row["prompt_tokens"]), acceptance=acceptance)
    assert m["prefill_tok_s"] == pytest.approx(float(row["prefill_tok_s_median"]), rel=0.10)
    for kind in ("cold", "cached"):
        assert m["decode_tok_s_median"] == pytest.approx(float(row[f"decode_{kind}_median"]), rel=0.15)
    # the prompt-cache rerun: only the new tokens are prefilled, so the first token comes in well under a second
    cached = run(THREE, f"serve.cached_tokens={int(row['prompt_tokens']) - 64}", requests=3,
                 prompt=int(row["prompt_tokens"]), output=8, acceptance=acceptance)
    assert cached["ttft_p50_s"] < 0.9


def reserve_values(reserve: int) -> list[float]:
    row = next(r for r in table("basalt_peer_reserve.csv") if int(r["peer_reserve_mib"]) == reserve)
    text = row["decode_tok_s_values"]
    return [float(x) for x in (text.split("-") if "-" in text else text.split(";"))]


def test_peer_reserve_headroom_cliff_with_prefill_unchanged():
    runs = {r: run(TWO, f"{ENGINE}peers.gpu1.reserve_mib={r}", requests=20, prompt=6867, output=200)
            for r in (600, 1536, 2048)}
    band = reserve_values(600)
    assert 0.75 * min(band) <= runs[600]["decode_tok_s_median"] <= 1.25 * max(band)
    for r in (1536, 2048):
        values = reserve_values(r)
        assert 0.75 * min(values) <= runs[r]["decode_tok_s_median"] <= 1.25 * max(values)
        assert runs[r]["decode_tok_s_median"] > 5 * runs[600]["decode_tok_s_median"]  # a cliff, not a slope
        assert runs[r]["prefill_tok_s"] == pytest.approx(runs[600]["prefill_tok_s"], rel=1e-9)
    # free VRAM on the peer as measured: 552 MiB and 1.06 GiB left; at 600 the card is oversubscribed
    assert runs[1536]["vram.gpu1.free_mib"] == pytest.approx(552, abs=5)
    assert runs[2048]["vram.gpu1.free_mib"] == pytest.approx(1062, abs=5)
    assert runs[600]["vram.gpu1.free_mib"] < 0


@pytest.mark.parametrize("placement,sets", [
    ("on_5090_primary", ["machines.basalt_box.gpus.gpu1.reserved_gib=0", f"{ENGINE}peers.gpu1.runtime_mib=0",
                         "machines.basalt_box.gpus.gpu0.reserved_gib=1.78"]),
    ("cpu_16_threads", ["machines.basalt_box.gpus.gpu1.reserved_gib=0", f"{ENGINE}peers.gpu1.runtime_mib=0"]),
])
def test_vision_encoder_off_the_peer_runs_at_full_speed(placement, sets):
    row = next(r for r in table("basalt_vision_placement.csv") if r["vision_placement"] == placement)
    values = [float(x) for x in row["decode_tok_s_values"].split(";")]
    m = run(TWO, *sets, requests=20, prompt=6867, output=200)
    assert 0.75 * min(values) <= m["decode_tok_s_median"] <= 1.25 * max(values)


def test_layer_split_gains_nothing_on_x4_links_but_would_on_x16():
    split = [f"{ENGINE}placement=layer_split", f"{ENGINE}peers={{}}",
             f"{ENGINE}layer_split={{hop_s: 30e-6, activation_kib_per_token: 4, gpus: [gpu1, gpu2], "
             "layer_s_scale: [1.87, 4.0]}"]
    offload = run(THREE, requests=10)
    layer_split = run(THREE, *split, requests=10)
    assert layer_split["expert_hit_rate"] == 1.0  # every expert on some card ...
    assert layer_split["decode_tok_s"] < offload["decode_tok_s"]  # ... and still slower: x4 round trips every layer
    gpus = "machines.basalt_box.gpus."
    wide = [*split, f"{gpus}gpu1.slot_lanes=16", f"{gpus}gpu2.slot_lanes=16", f"{gpus}gpu1.measured_link_gbps=25",
            f"{gpus}gpu2.measured_link_gbps=25"]
    assert run(THREE, *wide, requests=10)["decode_tok_s"] > layer_split["decode_tok_s"]


def test_log_replay_matches_the_engine_log_per_request():
    """The 12 completion lines replayed one after another, each at its own acceptance: prefill within 20% for the
    cold prompts and decode within 30% (the fit's tolerance for single log lines), but for the one request the fit
    leaves out (108.9 tok/s at 60% acceptance, where the others run near 290); no queue; every request completes."""
    requests = sim.load(THREE).run(seed=SEED).requests
    rows = table("basalt_serve_requests.csv")
    assert len(requests) == len(rows) == 12 and (requests["end"] == "stop").all()
    for (_, rec), row in zip(requests.iterrows(), rows, strict=True):
        assert rec.queue_wait_s == 0
        if int(row["cached_tokens"]) == 0:
            assert rec.prefill_s == pytest.approx(float(row["prefill_s"]), rel=0.20)
        if float(row["decode_tok_s"]) != 108.9:
            assert rec.decode_tok_s == pytest.approx(float(row["decode_tok_s"]), rel=0.30)
