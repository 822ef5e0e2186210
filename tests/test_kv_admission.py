"""KV-limited admission under the pool of an engine's own log (sim.batching.admission): a request starts only while
the pool holds its whole sequence beside the running ones', the rest queue; in every engine path that can hold such a
pool (MoE continuous batching, MoE slots taking turns, dense continuous batching), by one rule. Without a pool from a
log, each engine admits as it did."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT

import sim
from sim.batching.admission import sequence_tokens
from sim.core.errors import ScenarioError

MOE = os.path.join(ROOT, "scenarios", "dgx_spark_vllm_qwen3_6.yaml")  # vLLM's MoE engine, batching
DENSE = os.path.join(ROOT, "scenarios", "a100_llama2_7b.yaml")
PROMPT, OUTPUT = 256, 64
SEQUENCE = PROMPT + OUTPUT
ENGINE = {MOE: "machines.spark.engine", DENSE: "machines.a100_box.engine"}


def load(path: str, clients: int, requests: int, pool: dict | None, **more) -> sim.Scenario:
    """``clients`` closed-loop clients with no think time (all sending at once) of fixed-length requests on the
    scenario's engine, 256 sequences at most; ``pool``: its scheduler section beside that."""
    e = ENGINE[path]
    changes = {"serve.prompt_tokens": PROMPT, "serve.output_tokens_min": OUTPUT, "serve.output_tokens_max": OUTPUT,
               "serve.workload": {"kind": "closed", "clients": clients, "think_s": 0}, "serve.requests": requests,
               f"{e}.parallel": 256, f"{e}.scheduler": {"max_num_seqs": 256, **(pool or {})}}
    if path == MOE:
        changes[f"{e}.scheduler"] |= {"max_num_batched_tokens": 32768, "enable_prefix_caching": False}
    return sim.load(path, changes | more)


def log_pool(sequences: int) -> dict:
    """A pool of exactly ``sequences`` whole sequences, as a log's block count (16-token blocks)."""
    assert sequences * SEQUENCE % 16 == 0
    return {"num_gpu_blocks_override": sequences * SEQUENCE // 16}


def slots(scn: sim.Scenario) -> sim.Scenario:
    """The MoE engine as slots taking turns, its scheduler only the pool (what a slot engine may carry)."""
    sc = {k: v for k, v in scn.get("machines.spark.engine.scheduler").items()
          if k == "num_gpu_blocks_override" and v is not None}
    return scn.set({"machines.spark.engine.batching": False, "machines.spark.engine.scheduler": sc or None})


PATHS = {"moe batching": lambda s: s, "moe slots": slots}


@pytest.mark.parametrize("path", PATHS)
def test_256_requests_on_a_pool_of_49_sequences_run_49_and_queue_207(path):
    m = PATHS[path](load(MOE, 256, 256, log_pool(49))).run(seed=0).metrics
    assert m["running_peak"] == 49 and m["queued_peak"] == 207 and m["queue_peak"] == 207
    assert m["kv_pool_tokens"] == 49 * SEQUENCE and m["kv_booked_peak_share"] == 1.0
    assert m["requests_completed"] == 256 and m["requests_rejected"] == 0
    assert 0 < m["running_mean"] <= 49 and m["queued_mean"] > 0
    if path == "moe batching":  # the booked KV bounds what the sequences hold: nothing is preempted
        assert m["kv_preemptions"] == 0 and m["kv_peak_share"] <= 1.0 and m["batch_mean"] <= 49


def test_dense_engine_under_its_log_pool_follows_the_same_rule():
    m = load(DENSE, 256, 256, log_pool(49)).run(seed=0).metrics
    assert m["running_peak"] == 49 and m["queued_peak"] == 207 and m["kv_preemptions"] == 0


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("path", [*PATHS, "dense"])
def test_a_pool_of_exactly_k_sequences_runs_k_at_most(path, k):
    scn = load(DENSE, 16, 32, log_pool(k)) if path == "dense" else PATHS[path](load(MOE, 16, 32, log_pool(k)))
    m = scn.run(seed=1).metrics
    assert m["running_peak"] == k and m["queued_peak"] == 16 - k and m["requests_completed"] == 32
    assert m["kv_booked_peak_share"] == 1.0


def test_lengths_that_differ_book_what_each_sequence_will_hold():
    """Outputs of 16-64 tokens after 256-token prompts on a pool of 1,600 tokens: five fit whatever their lengths
    (5 x 320), six never (6 x 272); never more booked than the pool."""
    scn = load(MOE, 12, 40, {"num_gpu_blocks_override": 100}, **{"serve.output_tokens_min": 16})
    m = scn.run(seed=2).metrics
    assert m["running_peak"] == 5 and m["queued_peak"] == 7 and m["requests_completed"] == 40
    assert m["kv_booked_peak_share"] <= 1.0 and m["kv_preemptions"] == 0
    assert list(sequence_tokens([10, 10], [0, 5])) == [11, 15]  # an empty output still holds its first place


def test_a_request_longer_than_the_pool_is_rejected_at_once():
    m = slots(load(MOE, 2, 2, {"num_gpu_blocks_override": SEQUENCE // 16 - 1})).run(seed=0).metrics
    assert m["requests_rejected"] == 2 and m["running_peak"] == 0


def test_without_a_pool_from_a_log_nothing_changes():
    """Slots keep their own context each (every slot runs: no pool limits them); the batching engines keep their own
    admission, the prompt's KV now (vLLM V1), over a pool of the same size given otherwise: more run at first, and
    the newest are preempted as the KV grows."""
    free = slots(load(MOE, 256, 256, None)).run(seed=0).metrics
    assert free["running_peak"] == 256 and free["queued_peak"] == 0 and "kv_pool_tokens" not in free
    same = load(MOE, 256, 256, None, **{"machines.spark.engine.context_tokens": 49 * SEQUENCE}).run(seed=0).metrics
    assert same["kv_pool_tokens"] == 49 * SEQUENCE and "kv_booked_peak_share" not in same
    assert same["running_peak"] > 49 and same["kv_preemptions"] > 0
    dense = load(DENSE, 256, 256, None).run(seed=0).metrics
    assert "kv_booked_peak_share" not in dense and dense["running_peak"] == 256


def test_a_slot_engine_carries_only_the_pool_of_a_scheduler():
    scn = slots(load(MOE, 4, 4, log_pool(2)))
    assert scn.get("machines.spark.engine.batching") is False
    with pytest.raises(ScenarioError, match="batching: true beside max_num_seqs"):
        scn.set("machines.spark.engine.scheduler.max_num_seqs", 4)
