"""The continuous-batching engine dense and MoE models share (sim.batching): the KV-limited regime (running and
queued sequences, preemptions, TTFT growing once the pool is full), the scheduler's knobs as vLLM names them
(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, num_gpu_blocks_override, chunked prefill, prefix
caching, swap preemption) and MoE models in the same loop (speculative decoding's verification steps, the union of
the batch's experts)."""

from __future__ import annotations

import numpy as np
import pytest
from test_dense_serve import dense_scenario, run
from test_moe_serve import moe_scenario

from sim import SimulationError
from sim.core.units import GIB


def kv_limited(**over):
    """A pool of 3,072 tokens (64 GiB taken by another tenant) under 1,000-token prompts at 4 requests/s."""
    return dense_scenario(machines__box__gpus__g0__reserved_gib=64.0, serve__prompt_tokens=1000, serve__requests=200,
                          serve__workload__rate_per_s=4.0, **over)


def test_a_kv_limited_run_runs_a_few_sequences_queues_the_rest_and_preempts():
    roomy = run(dense_scenario(serve__prompt_tokens=1000, serve__requests=200, serve__workload__rate_per_s=4.0))[2]
    tight = run(kv_limited())[2]
    assert tight["kv_pool_tokens"] == int((80 - 64 - 12.5 - 2) * GIB // (512 * 1024))
    assert tight["running_seqs_mean"] < 3.1  # at most three 1,000-token prompts fit, usually fewer
    assert tight["queued_seqs_mean"] > 5 and roomy["queued_seqs_mean"] == 0
    assert tight["kv_preemptions"] > 0 and roomy["kv_preemptions"] == 0
    assert tight["kv_peak_share"] <= 1.0
    assert tight["ttft_p50_s"] > 10 * roomy["ttft_p50_s"]
    # once the pool is full TTFT grows request after request (the queue builds up)
    _, recs, _ = run(kv_limited())
    ttft = np.array([r.ttft_s for r in recs])
    assert np.median(ttft[150:]) > 3 * np.median(ttft[:50])


def test_swap_preemption_keeps_the_progress_and_pays_the_link():
    recompute = run(kv_limited())[2]
    swap = run(kv_limited(machines__box__engine__scheduler={"preemption_mode": "swap"}))[2]
    assert swap["kv_swaps"] > 0 and recompute["kv_swaps"] == 0
    assert swap["requests_completed"] == recompute["requests_completed"] == 200


def test_the_closed_form_matches_the_reference_with_swaps_and_without_chunked_prefill():
    for sched in ({"preemption_mode": "swap"}, {"enable_chunked_prefill": False}):
        scn = kv_limited(machines__box__engine__scheduler=sched)
        _, fast, mf = run(scn)
        _, slow, ms = run(scn, exact=True)
        assert mf["iterations"] == ms["iterations"] and mf["kv_preemptions"] == ms["kv_preemptions"]
        for key in ("end_s", "ttft_s", "decode_s"):
            a, b = (np.array([getattr(r, key) for r in recs]) for recs in (fast, slow))
            assert a == pytest.approx(b, rel=1e-9, abs=1e-9, nan_ok=True), (sched, key)


def test_without_chunked_prefill_a_prompt_runs_whole_while_the_decoders_wait():
    base = {"serve__prompt_tokens": 3000, "serve__requests": 100, "serve__workload__rate_per_s": 3.0}
    chunked = run(dense_scenario(**base))[2]
    whole = run(dense_scenario(**base, machines__box__engine__scheduler={"enable_chunked_prefill": False}))[2]
    assert whole["tpot_p99_s"] > 1.5 * chunked["tpot_p99_s"]  # a 3,000-token prompt stalls every decoder
    assert whole["ttft_p50_s"] < chunked["ttft_p50_s"]  # ... and is done sooner itself


def test_prefix_caching_off_prefills_the_cached_tokens():
    base = {"serve__prompt_tokens": 2000, "serve__cached_tokens": 1500, "serve__requests": 50}
    on = run(dense_scenario(**base))[2]
    off = run(dense_scenario(**base, machines__box__engine__scheduler={"enable_prefix_caching": False}))[2]
    assert off["ttft_p50_s"] > 2 * on["ttft_p50_s"]


def test_max_num_seqs_and_max_num_batched_tokens_replace_the_older_keys():
    a = run(dense_scenario(machines__box__engine__parallel=4))[2]
    b = run(dense_scenario(machines__box__engine__scheduler={"max_num_seqs": 4}))[2]
    assert a == b
    c = run(dense_scenario(machines__box__engine__iteration__token_budget=64))[2]
    d = run(dense_scenario(machines__box__engine__scheduler={"max_num_batched_tokens": 64}))[2]
    assert c == d


def test_the_pool_as_vllm_sizes_it():
    from sim.dense.setup import setup_dense

    util = setup_dense(dense_scenario(machines__box__engine__scheduler={"gpu_memory_utilization": 0.5}), "box")
    assert util.kv_pool_gib == pytest.approx(0.5 * 80 - 12.5 - 2.0)
    blocks = setup_dense(dense_scenario(machines__box__engine__scheduler={"num_gpu_blocks_override": 1000}), "box")
    assert blocks.kv_pool_tokens == 16_000
    with pytest.raises(SimulationError, match="gpu_memory_utilization.*other tenants leave"):
        setup_dense(dense_scenario(machines__box__gpus__g0__reserved_gib=30.0,
                                   machines__box__engine__scheduler={"gpu_memory_utilization": 0.9}), "box")
    with pytest.raises(SimulationError, match="num_gpu_blocks_override"):
        setup_dense(dense_scenario(machines__box__engine__scheduler={"num_gpu_blocks_override": 10**7}), "box")


def test_an_moe_engine_batches_in_the_same_loop_with_its_pool():
    """MoE with batching: prompts in chunks mixed with decode (not alone while decode waits), TTFT well under
    c x one prefill, and a pool that limits the batch when it is small."""
    from test_moe_serve import serve

    from sim.moe.serve import MoeEngine

    base = {"serve__workload__kind": "closed", "serve__workload__clients": 16, "serve__requests": 160,
            "serve__prompt_tokens": 400, "machines__server__engine__batching": True,
            "machines__server__engine__parallel": 16}
    eng = MoeEngine()
    wide = eng.metrics(eng.serve(moe_scenario(**base), np.random.default_rng(1)))
    narrow = eng.metrics(eng.serve(moe_scenario(**base, machines__server__engine__context_tokens=1200),
                                   np.random.default_rng(1)))
    assert wide["kv_preemptions"] == 0 and wide["running_seqs_mean"] > 10
    assert narrow["running_seqs_mean"] < 3.5 and narrow["queued_seqs_mean"] > 10
    assert narrow["throughput_tok_s"] < wide["throughput_tok_s"]
    single = eng.metrics(eng.serve(moe_scenario(**{**base, "serve__requests": 1, "serve__workload__clients": 1}),
                                   np.random.default_rng(1)))
    assert wide["ttft_p50_s"] < 16 * single["ttft_p50_s"] / 2
    assert serve  # the module's helpers stay importable for the plain engine's tests


def test_slots_taking_turns_split_the_cache_or_share_it():
    """Four slots taking turns: split, each sequence caches a quarter (its hit rate falls, the aggregate with it);
    shared, every slot's steps use the whole cache (the single slot's hit rate, its throughput)."""
    from test_moe_serve import serve

    from sim.moe.serve import serve_metrics

    base = {"serve__workload__kind": "closed", "serve__workload__clients": 4, "serve__requests": 120,
            "machines__server__gpus__g0__reserved_gib": 15.4}
    one = serve_metrics(*serve(moe_scenario(**base), np.random.default_rng(2)))
    split = serve_metrics(*serve(moe_scenario(**base, machines__server__engine__parallel=4),
                                 np.random.default_rng(2)))
    shared = serve_metrics(*serve(moe_scenario(**base, machines__server__engine__parallel=4,
                                               machines__server__engine__slots="shared"), np.random.default_rng(2)))
    assert split["expert_hit_rate"] < one["expert_hit_rate"] == pytest.approx(shared["expert_hit_rate"], abs=0.02)
    assert split["throughput_tok_s"] < 0.95 * one["throughput_tok_s"]
    assert shared["throughput_tok_s"] == pytest.approx(one["throughput_tok_s"], rel=0.05)


def test_the_shipped_a100_efficiencies_are_the_kernel_fit():
    """calibration/a100_llama2_7b.yaml ships what benchmarks/fit_a100_kernels.py fits to the profiled kernels, and
    the fit's check rows stay within 15%."""
    import importlib.util
    import os

    from conftest import ROOT

    from sim.config.yaml_io import read_yaml

    spec = importlib.util.spec_from_file_location("fit", os.path.join(ROOT, "benchmarks", "fit_a100_kernels.py"))
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    out = fit.fit()
    shipped = read_yaml(os.path.join(ROOT, "calibration", "a100_llama2_7b.yaml"))
    it = "machines.a100_box.engine.iteration."
    assert shipped["parameters"][it + "memory_efficiency"] == out["memory_efficiency"]
    assert shipped["parameters"][it + "compute_efficiency"] == out["compute_efficiency"]
    assert all(abs(e) < 0.15 for e in out["check_error"].values())
