"""Serving under load: queueing oracles, Little's law, workloads, admission, slots (sim.server, sim.workload)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import CALIBRATION, ROOT
from test_moe_serve import moe_scenario

from sim.moe_serve import serve, serve_metrics


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


def concurrency_scenario(clients: int):
    from sim.scenario import load_scenario

    path = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")
    return load_scenario(path, [f"serve.workload.clients={clients}"])[0]


@pytest.fixture(scope="module")
def concurrency_measured():
    from sim.tables import read_measured

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
