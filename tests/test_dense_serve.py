"""A dense model under continuous batching (sim.batching): the per-operator rooflines in closed form against
iteration-by-iteration sums, the fast event loop against the per-iteration reference, a lone request's time, the
memory-bound/compute-bound knee, the KV pool, an M/D/1 oracle and Little's law."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

from sim import ScenarioError
from sim.batching.cost import KIB, StepCost
from sim.config.load import validate
from sim.config.paths import set_dotted
from sim.core.units import GIB
from sim.dense.serve import dense_metrics, serve_dense
from sim.dense.setup import setup_dense


def dense_scenario(**over):
    """A 6.7B dense model (12.5 GiB) on an 80 GiB card with round specs (1,000 GB/s, 100 TFLOP/s, efficiencies 1)."""
    raw = dense_raw()
    for path, value in over.items():
        set_dotted(raw, path.replace("__", "."), value, "test")
    return validate(raw, "test")


def dense_raw() -> dict:
    """The mapping of :func:`dense_scenario`."""
    return {
        "name": "dense",
        "gpus": {"card": {"vram_gib": 80, "pcie_max_gen": 4, "hbm_gbps": 1000.0, "tflops": 100.0}},
        "models": {"d7": {"weights_gib": 12.5, "dense": {"params_b": 6.7, "layers": 32, "hidden": 4096,
                                                          "kv_kib_per_token": 512}}},
        "machines": {"box": {"gpus": {"g0": {"type": "card", "slot_gen": 4}},
                             "engine": {"model": "d7", "gpu": "g0", "parallel": 64, "runtime_gib": 2.0,
                                        "iteration": {"memory_efficiency": 1.0, "compute_efficiency": 1.0,
                                                      "overhead_s": 0.001, "token_budget": 512}}}},
        "serve": {"machine": "box", "requests": 300, "prompt_tokens": 1000, "output_tokens_min": 100,
                  "output_tokens_max": 200, "workload": {"kind": "open", "rate_per_s": 2.0}},
    }


def run(scn, seed=0, exact=False):
    served = serve_dense(scn, np.random.default_rng(seed), exact=exact)
    return served.setup, served.requests, dense_metrics(served)


# --- the roofline in closed form ------------------------------------------------------------------------------------

@given(k=st.integers(1, 300), context=st.integers(0, 2_000_000), n=st.integers(1, 2000),
       weights=st.floats(1e-4, 0.05), kv=st.floats(1e-9, 1e-5), token=st.floats(1e-6, 1e-3),
       pair=st.floats(1e-11, 1e-7), overhead=st.floats(0.0, 0.01), q=st.integers(1, 4),
       growth=st.floats(0.0, 4.0))
def test_a_decode_run_in_closed_form_is_the_sum_of_its_iterations(k, context, n, weights, kv, token, pair, overhead,
                                                                  q, growth):
    c = StepCost(overhead, weights, token, kv, pair, positions_per_step=q)
    g = growth * k  # tokens the batch's KV grows by per iteration
    times = [c.iteration_s(k, context + g * s) for s in range(n)]
    brute = float(np.sum([t for t, _ in times]))
    assert c.run_s(k, context, n, g) == pytest.approx(brute, rel=1e-9)
    assert c.memory_bound_steps(k, n) == sum(bound for _, bound in times)
    for seconds in (0.0, brute / 3, brute / 2, brute * 0.999, brute):
        m = c.steps_within(k, context, n, seconds, g)
        assert c.run_s(k, context, m, g) <= seconds and (m == n or c.run_s(k, context, m + 1, g) > seconds)


def test_an_iteration_adds_its_operators_rooflines():
    """Reads of one operator do not hide under another's arithmetic: a chunk's products, the decoders' KV reads and
    the chunk's attention each take their own roofline, and the iteration is their sum."""
    c = StepCost(0.001, 0.010, 1e-4, 1e-7, 1e-9)
    t, bound = c.iteration_s(16, 50_000, chunk_tokens=496, chunk_reads=2_000, chunk_pairs=600_000)
    linear = max(0.010, 1e-4 * 512)
    assert t == pytest.approx(0.001 + linear + max(1e-7, 1e-9) * 50_000 + max(1e-7 * 2_000, 1e-9 * 600_000))
    assert not bound  # 512 positions: the products outlast the weights' read
    assert t > 0.001 + max(0.010 + 1e-7 * 52_000, 1e-4 * 512 + 1e-9 * 650_000)  # more than one roofline over all


# --- the event loop -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("over", [
    {},  # open loop, chunked prefill mixing with decode
    {"machines__box__gpus__g0__reserved_gib": 64.0, "serve__workload__rate_per_s": 8.0,
     "serve__prompt_tokens_mean": 800.0},  # a KV pool of 3,072 tokens: admission waits and preemptions
    {"serve__workload__kind": "closed", "serve__workload__clients": 40, "serve__workload__think_s": 0.5,
     "machines__box__engine__iteration__token_budget": 48},  # a budget the batch can fill: prefill waits
])
def test_runs_in_closed_form_give_the_iteration_by_iteration_reference(over):
    scn = dense_scenario(**over)
    _, fast, mf = run(scn)
    _, slow, ms = run(scn, exact=True)
    assert mf["iterations"] == ms["iterations"] and mf["kv_preemptions"] == ms["kv_preemptions"]
    for key in ("end_s", "ttft_s", "decode_s", "queue_wait_s", "compute_s"):
        a, b = (np.array([getattr(r, key) for r in recs]) for recs in (fast, slow))
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9, nan_ok=True), key
    if over.get("machines__box__gpus__g0__reserved_gib"):
        assert mf["kv_preemptions"] > 0 and mf["queue_wait_mean_s"] > 0


def test_a_lone_request_takes_its_roofline_time():
    scn = dense_scenario(serve__requests=1, serve__output_tokens_min=50, serve__output_tokens_max=50)
    setup, recs, m = run(scn)
    c = setup.cost
    # prefill: 1,000 tokens in chunks of 512 and 488; each reads the KV before it and its own, attends to both
    first = c.iteration_s(0, 0, 512, 512, 512 * 513 / 2)[0] \
        + c.iteration_s(0, 0, 488, 1000, 488 * 512 + 488 * 489 / 2)[0]
    assert recs[0].ttft_s == pytest.approx(first, rel=1e-12)
    # decode: 49 more tokens, one per iteration, the context growing from 1,001
    decode = sum(c.overhead_s + max(c.weights_s, c.token_s) + max(c.kv_s_per_token, c.pair_s) * (1001 + s)
                 for s in range(49))
    assert recs[0].decode_s == pytest.approx(decode, rel=1e-12)
    assert m["iterations"] == 2 + 49
    assert c.weights_s == pytest.approx(12.5 * GIB / 1e12) and c.token_s == pytest.approx(2 * 6.7e9 / 100e12)


def closed_loop(clients: int, output: int = 100):
    """``clients`` clients sending 10-token prompts for ``output`` tokens, three each, back to back."""
    return dense_scenario(serve__workload__kind="closed", serve__workload__clients=clients, serve__prompt_tokens=10,
                          serve__output_tokens_min=output, serve__output_tokens_max=output,
                          serve__requests=clients * 3, machines__box__engine__parallel=256)


def test_small_batches_are_bound_by_reading_the_weights_large_ones_by_arithmetic():
    c = setup_dense(closed_loop(1), "box").cost
    knee = c.weights_s / c.token_s  # the batch at which the products take as long as reading the weights
    assert 90 < knee < 110
    small = {k: run(closed_loop(k))[2] for k in (1, 4, 16)}
    for m in small.values():  # memory-bound: each sequence decodes at nearly the single-stream rate
        assert m["memory_bound_share"] > 0.95
        assert m["decode_tok_s"] == pytest.approx(small[1]["decode_tok_s"], rel=0.15)
    assert small[16]["throughput_tok_s"] > 10 * small[1]["throughput_tok_s"]
    big = run(closed_loop(256))[2]  # compute-bound: the products of 256 tokens, whatever the weights, then the
    assert big["memory_bound_share"] < 0.05  # KV reads of 256 contexts of about 60 tokens (their own kernels)
    iteration = c.overhead_s + 256 * c.token_s + c.kv_s_per_token * 256 * 60
    assert big["throughput_tok_s"] == pytest.approx(256 / iteration, rel=0.12)
    assert big["throughput_tok_s"] < 1 / c.token_s


def test_another_tenant_shrinks_the_kv_pool_and_the_batch_waits_for_memory():
    over = {"serve__workload__rate_per_s": 1.5, "serve__prompt_tokens": 2000, "serve__requests": 400}
    roomy = run(dense_scenario(**over))
    tight = run(dense_scenario(machines__box__gpus__g0__reserved_gib=60.0, **over))
    assert tight[0].kv_pool_tokens == int((80 - 60 - 12.5 - 2) * GIB // (512 * KIB))
    assert roomy[2]["kv_preemptions"] == 0 and roomy[2]["queue_wait_mean_s"] == 0
    assert tight[2]["queue_wait_mean_s"] > 0 and tight[2]["ttft_p99_s"] > 2 * roomy[2]["ttft_p99_s"]
    assert tight[2]["kv_peak_share"] <= 1.0


def test_a_prompt_the_pool_cannot_hold_is_rejected_at_once():
    scn = dense_scenario(machines__box__engine__iteration__kv_pool_gib=0.25, serve__requests=5,
                         serve__prompt_tokens=600)  # 512 tokens of KV
    _, recs, m = run(scn)
    assert m["requests_rejected"] == 5 and all(r.end == "rejected" for r in recs)


def test_an_engine_too_large_for_its_card_cannot_start():
    from sim import SimulationError

    with pytest.raises(SimulationError, match="does not fit"):
        setup_dense(dense_scenario(machines__box__gpus__g0__reserved_gib=70.0), "box")


@pytest.mark.slow
def test_one_sequence_at_a_time_queues_as_m_d_1():
    """Fixed lengths and one sequence at a time: deterministic service, Poisson arrivals (Pollaczek-Khinchine)."""
    base = {"machines__box__engine__parallel": 1, "serve__prompt_tokens": 100, "serve__output_tokens_min": 20,
            "serve__output_tokens_max": 20}
    service = run(dense_scenario(serve__requests=1, **base))[1][0]
    s = service.end_s - service.sent_s
    rho = 0.5
    # 30,000 requests: a standard error of about 1.5% of the mean wait (seeds 1-3 of 20,000 gave +1.5 to +3.4%)
    m = run(dense_scenario(serve__requests=30_000, serve__workload__rate_per_s=rho / s, **base), seed=3)[2]
    assert m["queue_wait_mean_s"] == pytest.approx(rho * s / (2 * (1 - rho)), rel=0.06)
    assert m["gpu_active_share"] == pytest.approx(rho, rel=0.02)


def test_littles_law_and_determinism():
    scn = dense_scenario()
    _, recs, m = run(scn, seed=4)
    assert m["requests_in_engine_mean"] == pytest.approx(m["little_lambda_w"], rel=1e-9)
    assert run(scn, seed=4)[2] == m
    assert run(scn, seed=5)[2] != m
    assert m["requests_completed"] == 300 and m["decode_tok_s"] > 0


# --- scenario checks ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("over,key", [
    ({"gpus__card__hbm_gbps": None}, "gpus.card.hbm_gbps"),
    ({"machines__box__engine__host_ram_gib": 64}, "machines.box.engine.host_ram_gib"),
    ({"machines__box__engine__step__dense_s": 0.01}, "machines.box.engine.step"),
    ({"machines__box__engine__power": {"idle_w": 30, "busy_w": 400, "stalled_w": 200}}, "machines.box.engine.power"),
    ({"models__d7__moe": {"layers": 2, "experts_per_layer": 8, "top_k": 2, "expert_mib": 1.0}},
     "machines.box.engine.model"),
])
def test_a_dense_engine_names_what_it_is_missing(over, key):
    with pytest.raises(ScenarioError) as err:
        dense_scenario(**over)
    assert err.value.path == key


@pytest.mark.parametrize("over", [{"machines__box__engine__iteration": None},
                                  {"machines__box__engine__iteration__overhead_s": None}])
def test_iteration_costs_left_out_take_the_family_and_engine_defaults(over):
    """An iteration section or cost left out is no error: the card family's fitted efficiencies and the engine's
    overhead fill it (sim.batching.families), and the set-up says where they came from."""
    from sim.dense.setup import setup_dense

    scn = dense_scenario(**over)
    s = setup_dense(scn, "box")
    assert s.costs is not None and any("overhead_s" in line for line in s.costs.sources)


@pytest.mark.slow
def test_sim_run_serves_the_shipped_dense_scenario(monkeypatch):
    from click.testing import CliRunner

    from sim.cli import main

    monkeypatch.chdir(ROOT)  # the command as run from the project root (in process: a child costs 1 s to start)
    out = CliRunner().invoke(main, ["run", "scenarios/a100_llama2_7b.yaml", "--json", "--set", "serve.requests=300"])
    assert out.exit_code == 0, out.output
    m = json.loads(out.stdout)["metrics"]
    assert m["requests_completed"] == 300 and m["kv_pool_tokens"] > 100_000
    assert 0 < m["ttft_p50_s"] < 2 and m["memory_bound_share"] > 0.5
    shown = CliRunner().invoke(main, ["run", "scenarios/a100_llama2_7b.yaml", "--set", "serve.requests=50"])
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert "continuous batching" in text and "KV pool" in text
    assert os.path.exists(os.path.join(ROOT, "scenarios", "traces", "arxiv_summarization_lengths.csv"))


def trace_scenario(tmp_path, rows: str, **over):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    return dense_scenario(serve__workload__kind="trace", serve__workload__trace=str(path),
                          machines__box__engine__iteration__kv_pool_gib=2000 * 512 / 2**20, **over)  # 2,000 tokens


def test_an_arrival_during_a_decode_run_is_admitted_against_the_kv_at_that_iteration(tmp_path):
    """A decodes alone for a while; B's prompt fits in the pool A left at the start of the run, not in what A holds
    when B arrives: B waits for A instead of being admitted and forcing A out."""
    scn = trace_scenario(tmp_path, "0,100,1500\n15,1000,10\n")
    setup, recs, m = run(scn)
    assert setup.kv_pool_tokens == 2000
    assert m["kv_preemptions"] == 0 and m["kv_peak_share"] <= 1.0
    assert recs[1].start_s >= recs[0].end_s - 1e-9  # B started once A's KV was free
    _, slow, ms = run(scn, exact=True)
    assert ms["iterations"] == m["iterations"] and slow[1].start_s == pytest.approx(recs[1].start_s, rel=1e-9)


def test_the_request_that_arrived_last_is_preempted_even_while_it_prefills(tmp_path):
    """A decodes; B is admitted (its prompt fits) and prefills 2 tokens an iteration while A's KV grows into B's
    reservation: B, the later arrival, gives its place back, not A."""
    scn = trace_scenario(tmp_path, "0,100,1800\n5.5,1400,10\n", machines__box__engine__iteration__token_budget=2)
    _, recs, m = run(scn)
    assert m["kv_preemptions"] >= 1 and m["kv_peak_share"] <= 1.0
    assert recs[0].end_s < recs[1].end_s
    _, slow, ms = run(scn, exact=True)
    assert ms["kv_preemptions"] == m["kv_preemptions"] and ms["iterations"] == m["iterations"]
    assert [r.end_s for r in slow] == pytest.approx([r.end_s for r in recs], rel=1e-9)


def test_a_pool_smaller_than_a_token_cannot_start():
    from sim import SimulationError

    with pytest.raises(SimulationError, match="holds no token"):
        setup_dense(dense_scenario(machines__box__engine__iteration__kv_pool_gib=1e-4), "box")
