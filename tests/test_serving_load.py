"""Serving under load: queueing oracles, Little's law, workloads, admission, slots (sim.serving.queue,
sim.serving.workload)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import CALIBRATION, ROOT
from test_moe_serve import moe_scenario, serve

import sim
from sim.moe.serve import serve_metrics


def queue_scenario(rho: float, law: str, requests: int, **over):
    """An engine whose service is its prefill alone: mean 1 s (10,000 tokens at 10,000 tok/s), exponential or fixed;
    decode is one token at a negligible cost. Poisson arrivals at rate rho."""
    prompt = {"serve__prompt_tokens_mean": 10_000.0} if law == "exponential" else {"serve__prompt_tokens": 10_000}
    return moe_scenario(**{
        "machines__server__engine__prefill_tok_s": 10_000, "machines__server__engine__step__dense_s": 1e-12,
        "machines__server__engine__step__gpu_expert_s": 0.0, "models__moe__moe__draft__tokens": 0,
        "machines__server__gpus__g0__reserved_gib": 0.0,  # every expert cached: no misses, no eager steps
        "serve__output_tokens_min": 1, "serve__output_tokens_max": 1, "serve__requests": requests,
        "serve__workload__kind": "open", "serve__workload__rate_per_s": rho, **prompt, **over})


@pytest.mark.slow
@pytest.mark.parametrize("law,rho", [(law, rho) for law in ("exponential", "fixed") for rho in (0.3, 0.5, 0.8)])
def test_mean_queue_wait_matches_m_m_1_and_m_d_1(law, rho):
    # M/M/1: Wq = rho / (mu - lambda); M/D/1: half of it (Pollaczek-Khinchine with no service variance); mu = 1/s
    expected = rho / (1 - rho) * (1.0 if law == "exponential" else 0.5)
    # the sample mean of queue waits converges slowly near saturation: enough requests for a standard error of
    # about 1% (0.3, 0.5) and 1.1% (0.8) of the mean (measured over seeds), so 3% is a real test, not luck
    requests = {0.3: 200_000, 0.5: 200_000, 0.8: 500_000}[rho]
    m = serve_metrics(*serve(queue_scenario(rho, law, requests), np.random.default_rng(1)))
    assert m["queue_wait_mean_s"] == pytest.approx(expected, rel=0.03)
    assert m["gpu_active_share"] == pytest.approx(rho, rel=0.02)
    # Little's law against the offered rate: time-averaged requests in the engine = rate x mean time in it
    assert m["requests_in_engine_mean"] == pytest.approx(rho * m["e2e_mean_s"], rel=0.02)


def concurrency_scenario(clients: int):

    path = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")
    return sim.load(path, [f"serve.workload.clients={clients}"]).config


@pytest.fixture(scope="module")
def concurrency_measured():
    from sim.formats.measured_tables import read_measured

    _, rows = read_measured(os.path.join(CALIBRATION, "strata_concurrency.csv"))
    return {int(r["clients"]): {k: float(v) for k, v in r.items()} for r in rows}


@pytest.mark.parametrize("clients", [1, 2, 4, 8])
def test_one_slot_keeps_throughput_flat_while_ttft_grows(clients, concurrency_measured):
    m = serve_metrics(*serve(concurrency_scenario(clients), np.random.default_rng(11)))
    row = concurrency_measured[clients]
    assert m["throughput_tok_s"] == pytest.approx(row["throughput_tok_s"], rel=0.10)
    assert m["ttft_mean_s"] == pytest.approx(row["ttft_s"], rel=0.20)
    assert m["requests_rejected"] == 0
    assert m["requests_in_engine_mean"] == pytest.approx(m["little_lambda_w"], rel=1e-9)


def load_scenario_small(**over):
    """The tiny MoE engine (test_moe_serve) under load: 0.5 GiB free, so misses and stalls happen."""
    return moe_scenario(**{"serve__requests": 300, "serve__output_tokens_min": 20, "serve__output_tokens_max": 60,
                           **over})


@pytest.mark.parametrize("workload", [
    {"serve__workload__kind": "closed", "serve__workload__clients": 4, "serve__workload__think_s": 0.02,
     "serve__workload__think_law": "exponential"},
    {"serve__workload__kind": "open", "serve__workload__rate_per_s": 8.0},
    {"serve__workload__kind": "open", "serve__workload__rate_per_s": 30.0, "serve__admission__queue_limit": 2},
    {"serve__workload__kind": "open", "serve__workload__rate_per_s": 30.0, "serve__admission__timeout_s": 0.2,
     "machines__server__engine__parallel": 2},
    {"serve__workload__kind": "agent", "serve__workload__clients": 3, "serve__workload__turns": 4,
     "serve__workload__turn_tokens": 50, "serve__request_overhead_s": 0.01},
    {"serve__workload__kind": "open", "serve__workload__rate_per_s": 30.0, "machines__server__engine__parallel": 4,
     "machines__server__engine__batching": True, "serve__admission__timeout_s": 0.3},
])
def test_littles_law_holds_on_every_run(workload):
    m = serve_metrics(*serve(load_scenario_small(**workload), np.random.default_rng(2)))
    # L is integrated over time from the engine's own count; lambda x W comes from the requests' own times
    assert m["requests_in_engine_mean"] == pytest.approx(m["little_lambda_w"], rel=1e-9)
    assert m["requests_completed"] + m["requests_rejected"] + m["requests_cancelled"] == 300


def test_admission_rejects_when_the_queue_is_full_and_cancels_on_timeout():
    flood = {"serve__workload__kind": "open", "serve__workload__rate_per_s": 40.0}
    unbounded = serve_metrics(*serve(load_scenario_small(**flood), np.random.default_rng(3)))
    assert unbounded["requests_rejected"] == 0 and unbounded["requests_cancelled"] == 0  # overload only queues
    assert unbounded["queue_peak"] > 20
    limited = serve(load_scenario_small(**flood, serve__admission__queue_limit=3), np.random.default_rng(3))
    m = serve_metrics(*limited)
    assert m["requests_rejected"] > 50 and m["queue_peak"] <= 3
    assert all(r.queue_wait_s == 0 and r.output_tokens == 0 for r in limited[1] if r.end == "rejected")
    timed = serve(load_scenario_small(**flood, serve__admission__timeout_s=0.5), np.random.default_rng(3))
    cancelled = [r for r in timed[1] if r.end == "cancelled"]
    assert cancelled and all(r.queue_wait_s == pytest.approx(0.5) for r in cancelled)
    assert max(r.queue_wait_s for r in timed[1] if r.end == "stop") <= 0.5 + 1e-9


def test_strata_engine_queues_32_clients_without_bound():
    """strata_overload.md: at 32 concurrent clients every request queued and finished (no admission control)."""

    path = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")
    scn = sim.load(path, ["serve.workload.clients=32", "serve.workload.runs=1", "serve.requests=96"]).config
    m = serve_metrics(*serve(scn, np.random.default_rng(1)))
    assert m["requests_rejected"] == 0 and m["requests_completed"] == 96
    assert m["queue_peak"] == 31  # all but the one in the slot wait
    assert m["queue_wait_mean_s"] > 10


def test_max_tokens_ends_requests_with_length():
    eng, recs, tl = serve(load_scenario_small(serve__max_tokens=30), np.random.default_rng(4))
    assert all(r.output_tokens <= 30 for r in recs)
    assert {r.end for r in recs} == {"stop", "length"}
    assert all((r.end == "length") == (r.output_tokens == 30) for r in recs if r.output_tokens < 30 or
               r.end == "length")


def test_prompt_cache_hits_prefill_only_new_tokens():
    agent = serve(load_scenario_small(serve__workload__kind="agent", serve__workload__turns=5,
                                      serve__workload__turn_tokens=100), np.random.default_rng(5))[1]
    first = [r for r in agent if r.cached_tokens == 0]
    later = [r for r in agent if r.cached_tokens > 0]
    assert later and all(r.prompt_tokens > f.prompt_tokens for r in later[:3] for f in first[:1])
    assert all(r.prefill_s == pytest.approx(100 / 500) for r in later)  # 100 new tokens at 500 tok/s
    assert np.mean([r.prompt_tokens for r in later]) > 3 * np.mean([r.prompt_tokens for r in first])


def test_decode_slots_divide_the_cache_and_can_lower_throughput():
    """FIELD_NOTES section 3: each of N slots caches about 1/N of the experts; slots share the GPU, so under full
    load aggregate throughput falls with more slots while the first token comes sooner (no waiting for a slot)."""
    busy = {"serve__workload__kind": "closed", "serve__workload__clients": 8}
    one = serve(load_scenario_small(**busy), np.random.default_rng(6))
    four = serve(load_scenario_small(**busy, machines__server__engine__parallel=4), np.random.default_rng(6))
    assert four[0].slots_per_sequence == one[0].slots_per_sequence // 4
    m1, m4 = serve_metrics(*one), serve_metrics(*four)
    assert m4["expert_hit_rate"] < m1["expert_hit_rate"] - 0.05
    assert m4["throughput_tok_s"] < m1["throughput_tok_s"]
    assert m4["slots_active_mean"] > 3.5
    assert m4["ttft_p50_s"] < m1["ttft_p50_s"]


def test_runs_are_deterministic_per_seed():
    scn = load_scenario_small(serve__workload__kind="open", serve__workload__rate_per_s=10.0)
    a = serve_metrics(*serve(scn, np.random.default_rng(9)))
    b = serve_metrics(*serve(scn, np.random.default_rng(9)))
    c = serve_metrics(*serve(scn, np.random.default_rng(10)))
    assert a == b and a != c


def test_azure_trace_replays_with_arrivals_and_lengths(tmp_path):
    trace = tmp_path / "azure.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n0.3,396,109\n0.31,879,55\n"
                     "5.0,91,16\n")
    scn = load_scenario_small(serve__workload__kind="trace", serve__workload__trace=str(trace), serve__requests=10)
    eng, recs, tl = serve(scn, np.random.default_rng(0))
    assert [r.sent_s for r in recs] == [0.0, 0.3, 0.31, 5.0]
    assert [r.prompt_tokens for r in recs] == [374, 396, 879, 91]
    assert [r.output_tokens for r in recs] == [44, 109, 55, 16]
    assert recs[2].queue_wait_s > 0 and recs[3].queue_wait_s == 0  # the burst queues; the late one does not


def test_cli_json_has_the_serving_contract():
    from click.testing import CliRunner

    from sim.cli import main

    path = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")
    r = CliRunner().invoke(main, ["run", path, "--json", "--set", "serve.requests=40", "--set",
                                  "serve.workload.runs=2"])
    assert r.exit_code == 0, r.output
    import json

    m = json.loads(r.output)["metrics"]
    for key in ("throughput_tok_s", "ttft_p50_s", "ttft_mean_s", "ttft_p99_s", "prefill_tok_s", "queue_wait_mean_s",
                "requests_completed", "requests_rejected", "vram.gpu0.used_mib", "vram.gpu0.free_mib"):
        assert key in m, key
    assert m["requests_completed"] == 40


def test_continuous_batching_serves_the_union_of_experts():
    """One iteration serves every decoding sequence: aggregate throughput grows with the batch, each sequence slows, and
    an iteration touches the distinct experts of k sequences' draws (the union law), not k times one step's."""
    from sim.moe.batch_cost import ExpertOperator
    from sim.moe.expert_counts import draws_per_step, step_law

    busy = {"serve__workload__kind": "closed", "serve__workload__clients": 8,
            "machines__server__engine__batching": True}
    runs = {k: serve(load_scenario_small(**busy, machines__server__engine__parallel=k), np.random.default_rng(7))
            for k in (1, 4)}
    m1, m4 = serve_metrics(*runs[1]), serve_metrics(*runs[4])
    assert m4["throughput_tok_s"] > 1.1 * m1["throughput_tok_s"]
    assert m4["decode_tok_s_median"] < m1["decode_tok_s_median"]
    assert runs[4][0].slots_per_sequence == runs[1][0].slots_per_sequence  # a batch shares the whole cache
    assert m4["requests_in_engine_mean"] == pytest.approx(m4["little_lambda_w"], rel=1e-9)
    # a batch of one is the single-slot server, but for its prefill (from the specs in one, the engine's rate in
    # the other)
    plain = serve_metrics(*serve(load_scenario_small(serve__workload__kind="closed", serve__workload__clients=8),
                                 np.random.default_rng(7)))
    assert m1["decode_tok_s_median"] == pytest.approx(plain["decode_tok_s_median"], rel=0.1)
    eng = runs[4][0]
    op = ExpertOperator(eng, np.random.default_rng(0))
    positions = 1 + eng.moe.draft.tokens
    routed = {}
    for k in (1, 4):
        law = step_law(eng.popularity, eng.resident, None, 0.0,
                       k * draws_per_step(eng.moe.top_k, positions, 0.0), eng.tier, eng.peers + 2, eng.peers)
        expected = law.resident_mean.sum() + law.missed_mean.sum()
        routed[k] = op.value(k * positions, "routed")
        assert routed[k] == pytest.approx(expected, rel=0.03)
    assert routed[1] < routed[4] < 4 * routed[1]


def test_more_clients_than_a_run_has_requests_is_an_error():
    from sim import ScenarioError

    with pytest.raises(ScenarioError, match="serve.workload.clients"):
        load_scenario_small(serve__workload__kind="closed", serve__workload__clients=40, serve__requests=60,
                            serve__workload__runs=2)


def test_batching_keeps_the_tier_telemetry_of_the_plain_engine():
    """A batch of one serves what one slot serves: the same share of experts off the engine GPU (peers, host)."""
    one = {"serve__workload__kind": "closed", "serve__workload__clients": 2, "serve__requests": 200}
    plain = serve_metrics(*serve(load_scenario_small(**one), np.random.default_rng(8)))
    batch = serve_metrics(*serve(load_scenario_small(**one, machines__server__engine__batching=True),
                                 np.random.default_rng(8)))
    assert plain["offload_share"] > 0.01
    assert batch["offload_share"] == pytest.approx(plain["offload_share"], rel=0.15)


def test_decode_of_a_long_request_does_not_depend_on_what_comes_before_it():
    """A request longer than one sampling batch is decoded in pieces (eager state carried), wherever it sits."""
    import sim.moe.decode_batch as db
    from sim.moe.setup import setup_engine

    eng = setup_engine(load_scenario_small(), "server")
    old = db.MAX_CELLS
    try:
        db.MAX_CELLS = 800  # 100 steps of 8 layers
        tokens = np.array([5, 5000, 7])
        d = db.decode_many(eng, tokens, np.full(3, np.nan), np.random.default_rng(0))
        swapped = db.decode_many(eng, tokens[[1, 0, 2]], np.full(3, np.nan), np.random.default_rng(0))
    finally:
        db.MAX_CELLS = old
    assert d["steps"][1] > 100
    rate = tokens[1] / d["decode_s"][1]
    assert rate == pytest.approx(tokens[1] / swapped["decode_s"][0], rel=0.05)
