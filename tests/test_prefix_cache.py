"""The continuous-batching engine's prefix cache (sim.batching.prefix) and the workloads that share prefixes
(sim.serving.workload: system prompts, chat sessions): analytic oracles of its hits (a fixed system prompt, two that
thrash a pool holding one, chat histories), the what-if's gain following the shared share of the prompt, the warning
of a cache that can never hit, determinism, and runs without shared prefixes as they were."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT
from test_dense_serve import dense_scenario, run

import sim.dense.serve as dense_serve
from sim import ScenarioError
from sim.batching.prefix import PrefixCache
from sim.cli import main
from sim.config.load import load_scenario
from sim.config.plausibility import plausibility_warnings
from sim.dense.serve import DenseEngine
from sim.serving.workload import RequestTable, build_table

CHAT = os.path.join(ROOT, "scenarios", "a100_llama3_8b_chat.yaml")
DENSE = os.path.join(ROOT, "scenarios", "a100_llama2_7b.yaml")
PATH = "machines.box.engine.scheduler.enable_prefix_caching"


def sequential(**over):
    """One client, one request after another: 100 new tokens behind the workload's system prompt, 20-40 out."""
    base = {"serve__workload__kind": "sequential", "serve__prompt_tokens": 100, "serve__output_tokens_min": 20,
            "serve__output_tokens_max": 40, "serve__requests": 30}
    return dense_scenario(**(base | over))


def cached(scn, seed=0) -> np.ndarray:
    return np.asarray(run(scn, seed)[1].cached_tokens)


# --- analytic oracles ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [16, 64])
def test_a_fixed_system_prompt_hits_its_full_blocks_after_the_first_request(block):
    scn = sequential(serve__workload__system_prompt_tokens=1000,
                     machines__box__engine__scheduler={"block_size": block})
    hits = cached(scn)
    assert hits[0] == 0 and (hits[1:] == 1000 // block * block).all()
    _, recs, m = run(scn)
    assert (np.asarray(recs.prompt_tokens) == 1100).all()  # the system prompt comes before the 100 drawn tokens
    assert m["prefix_hit_rate"] == pytest.approx(29 * (1000 // block * block) / (30 * 1100))
    assert m["prefix_cached_tokens_mean"] == pytest.approx(29 * (1000 // block * block) / 30)


def test_prefix_caching_off_caches_nothing_and_a_hand_set_count_still_counts():
    off = sequential(serve__workload__system_prompt_tokens=1000,
                     machines__box__engine__scheduler={"enable_prefix_caching": False})
    assert (cached(off) == 0).all()
    both = sequential(serve__workload__system_prompt_tokens=1000, serve__cached_tokens=50)
    hits = cached(both)  # the more of the two: hand-set tokens, or what the cache found
    assert hits[0] == 50 and (hits[1:] == 992).all()


def alternating(n: int, tokens: int = 1024) -> RequestTable:
    """``n`` requests of one client, their system prompts (``tokens`` each) alternating between two, 32 new
    tokens and 32 out each."""
    segment = np.stack([np.arange(n) % 2, np.full(n, -1)], axis=1).astype(np.int32)
    length = np.stack([np.full(n, tokens), np.zeros(n)], axis=1).astype(np.int32)
    return RequestTable(np.full(n, np.nan), np.full(n, tokens + 32), cached_tokens=np.zeros(n, dtype=np.int64),
                        output_tokens=np.full(n, 32), acceptance=np.full(n, np.nan), client=np.zeros(n, dtype=np.int64),
                        run=np.zeros(n, dtype=np.int64), prefix_segment=segment, prefix_tokens=length)


@pytest.mark.parametrize("pool, expected", [
    (1096, [0] * 12),  # one system prompt and one request's own 64 tokens: each evicts the other, LRU thrashes
    (4096, [0, 0] + [1024] * 10),  # both fit: every request after the first of its prompt hits all of it
])
def test_two_alternating_system_prompts_thrash_a_pool_holding_one(pool, expected):
    scn = sequential(machines__box__engine__iteration__kv_pool_gib=pool / 2048)  # 512 KiB a token
    served = DenseEngine().replay(scn, alternating(12), np.random.default_rng(0))
    assert served.setup.kv_pool_tokens == pool
    assert list(served.requests.cached_tokens) == expected
    assert all(e == "stop" for e in served.requests.columns["end"])


def test_drawn_system_prompts_hit_when_the_cache_still_holds_theirs():
    """Four system prompts drawn per request: with a pool holding one, a request hits when the one before drew the
    same; with a pool holding all four, when any before drew it."""
    over = {"serve__workload__system_prompt_tokens": 1024, "serve__workload__system_prompts": 4,
            "serve__prompt_tokens": 32, "serve__output_tokens_min": 32, "serve__output_tokens_max": 32}
    for pool, seen in ((1096, lambda ids, i: ids[i - 1] == ids[i]), (8192, lambda ids, i: ids[i] in ids[:i])):
        scn = sequential(machines__box__engine__iteration__kv_pool_gib=pool / 2048, **over)
        ids = build_table(scn.serve, np.random.default_rng(0)).prefix_segment[:, 0].tolist()
        assert len(set(ids)) == 4
        expected = [1024 if i and seen(ids, i) else 0 for i in range(len(ids))]
        assert list(cached(scn)) == expected


def test_chat_turns_hit_their_session_history_and_the_shared_system_prompt():
    for system in (0, 500):
        scn = dense_scenario(serve__workload={"kind": "chat", "clients": 3, "turns": 4, "think_s": 0.5,
                                              "system_prompt_tokens": system},
                             serve__requests=36, serve__prompt_tokens=70)
        table = build_table(scn.serve, np.random.default_rng(0))
        history = table.prefix_tokens[:, 1].astype(np.int64)
        answered = table.output_tokens
        assert (table.prompt_tokens == system + history + 70).all()
        first = history == 0
        assert first.sum() == 9  # 3 clients x 3 sessions of 4 turns
        # a turn's history is its session's earlier prompts (less the system prompt) and answers
        for i in np.flatnonzero(~first):
            j = max(k for k in range(i) if table.client[k] == table.client[i])
            assert history[i] == history[j] + 70 + answered[j]
        hits = cached(scn)
        expected = np.where(first, system // 16 * 16, (system + history) // 16 * 16)
        expected[0] = 0  # nothing is cached before the first request
        if system:  # the first turns of the two other clients' first sessions went in with the first
            assert (hits[first][3:] == expected[first][3:]).all()
            assert (hits[~first] == expected[~first]).all()
        else:
            assert (hits == expected).all()


def test_a_segment_is_held_once_and_evicted_from_its_tail_lru():
    c = PrefixCache(16)
    a, b = ((0, 64), (-1, 0)), ((1, 64), (-1, 0))
    for segs in (a, b):
        assert c.lookup(segs) == 0
        c.acquire(segs)
        c.insert(segs[0][0], 64)
    c.acquire(a)  # a second reader of segment 0: no more KV
    assert c.referenced_tokens == 128 and c.idle_tokens == 0
    c.release(a)
    c.release(a)
    c.release(b)
    assert c.idle_tokens == 128 and list(c.idle) == [0, 1]
    c.fit(100)  # 28 tokens too many: two blocks off the least recently released, from its tail
    assert c.resident == {0: 32, 1: 64} and c.lookup(a) == 32 and c.lookup(b) == 64
    c.fit(0)
    assert c.resident == {} and c.evicted_tokens == 128


# --- the what-if ------------------------------------------------------------------------------------------------------

def test_the_gain_follows_the_system_prompts_share_of_the_prompt():
    """A 2,048-token prompt of which the system prompt is 0, 25, 50 or 75%: prefix caching saves that share of the
    prefill and the TTFT gained grows with it; with no shared share it changes nothing."""
    saved, gain = [], []
    for share in (0.0, 0.25, 0.5, 0.75):
        system = int(2048 * share)
        over = {"serve__prompt_tokens": 2048 - system, "serve__workload__system_prompt_tokens": system,
                "serve__requests": 200, "serve__workload__rate_per_s": 6.0}
        on = run(dense_scenario(**over))
        off = run(dense_scenario(**over, machines__box__engine__scheduler={"enable_prefix_caching": False}))
        saved.append(int(np.sum(on[1].cached_tokens)))
        gain.append(off[2]["ttft_mean_s"] - on[2]["ttft_mean_s"])
        assert int(np.sum(off[1].cached_tokens)) == 0
        if share == 0:
            assert on[2] == off[2]
    assert saved[0] == 0 and gain[0] == 0.0
    assert all(b > a for a, b in zip(saved, saved[1:], strict=False))
    assert all(b > a for a, b in zip(gain, gain[1:], strict=False))
    assert saved[-1] == pytest.approx(199 * 1536, rel=0.01)  # every request after the first


def test_the_chat_scenarios_compare_shows_ttft_and_throughput_gained():
    r = CliRunner().invoke(main, ["compare", CHAT, "--json", "--set",
                                  "machines.a100_box.engine.scheduler.enable_prefix_caching=false"])
    assert r.exit_code == 0, r.output
    assert "ttft_p50_s" in r.stdout and "throughput_tok_s" in r.stdout and "prefix_hit_rate" in r.stdout
    scn = load_scenario(CHAT)[0]
    on = DenseEngine().metrics(DenseEngine().serve(scn, np.random.default_rng(0)))
    off_scn = load_scenario(CHAT, ["machines.a100_box.engine.scheduler.enable_prefix_caching=false"])[0]
    off = DenseEngine().metrics(DenseEngine().serve(off_scn, np.random.default_rng(0)))
    assert on["prefix_hit_rate"] > 0.5 and off["prefix_hit_rate"] == 0
    assert on["ttft_p50_s"] < off["ttft_p50_s"] / 2 and on["throughput_tok_s"] > 1.3 * off["throughput_tok_s"]


# --- the warning ------------------------------------------------------------------------------------------------------

def warnings_of(**over) -> list[str]:
    return [w.split(": ", 2)[1] for w in plausibility_warnings(dense_scenario(**over), "f.yaml")]


def test_an_explicit_prefix_cache_that_can_never_hit_is_warned_about_once():
    explicit = {"machines__box__engine__scheduler": {"enable_prefix_caching": True}}
    line = plausibility_warnings(dense_scenario(**explicit), "f.yaml")
    assert len(line) == 1 and line[0].startswith(f"f.yaml: {PATH}: on, but this workload shares no prefix")
    assert warnings_of() == []  # vLLM's default, not written out: nothing to say
    assert warnings_of(machines__box__engine__scheduler={"block_size": 32}) == []
    assert warnings_of(**explicit, serve__workload__system_prompt_tokens=100) == []
    assert warnings_of(**explicit, serve__cached_tokens=100) == []
    assert warnings_of(**explicit, serve__workload={"kind": "chat", "clients": 2}) == []
    assert warnings_of(machines__box__engine__scheduler={"enable_prefix_caching": False}) == []
    acknowledged = dense_scenario(**explicit, acknowledged_warnings={PATH: "known"})
    assert plausibility_warnings(acknowledged, "f.yaml") == []


def test_the_warning_reaches_the_command_line_and_changes_nothing_of_the_run():
    args = ["run", DENSE, "--json", "--set", "serve.requests=50"]
    quiet = CliRunner().invoke(main, args)
    loud = CliRunner().invoke(main, [*args, "--set", "machines.a100_box.engine.scheduler.enable_prefix_caching=true"])
    assert quiet.stderr == "" and loud.stdout == quiet.stdout
    assert loud.stderr.count("sim: warning: ") == 1
    assert "machines.a100_box.engine.scheduler.enable_prefix_caching: on, but" in loud.stderr


def test_a_system_prompt_with_an_agent_or_of_no_tokens_is_refused():
    with pytest.raises(ScenarioError, match="system_prompt_tokens: not with kind agent"):
        dense_scenario(serve__workload={"kind": "agent", "clients": 2, "system_prompt_tokens": 100})
    with pytest.raises(ScenarioError, match="system_prompts: 3 system prompts of no tokens"):
        dense_scenario(serve__workload__system_prompts=3)


# --- determinism and runs without shared prefixes ---------------------------------------------------------------------

def test_same_seed_same_bytes():
    runs = [CliRunner().invoke(main, ["run", CHAT, "--json", "--seed", str(s)]).stdout for s in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    scn = dense_scenario(serve__workload__system_prompt_tokens=500, serve__workload__system_prompts=3)
    a, b = (build_table(scn.serve, np.random.default_rng(7)) for _ in range(2))
    assert (a.prefix_segment == b.prefix_segment).all() and (a.prompt_tokens == b.prompt_tokens).all()


def test_the_system_prompt_is_drawn_last_and_the_rest_of_the_workload_stays():
    plain = build_table(dense_scenario(serve__prompt_tokens_mean=300.0).serve, np.random.default_rng(1))
    shared = build_table(dense_scenario(serve__prompt_tokens_mean=300.0, serve__workload__system_prompt_tokens=64,
                                        serve__workload__system_prompts=5).serve, np.random.default_rng(1))
    assert (shared.arrival_s == plain.arrival_s).all() and (shared.output_tokens == plain.output_tokens).all()
    assert (shared.prompt_tokens == plain.prompt_tokens + 64).all()
    assert plain.prefix_segment is None and set(shared.prefix_segment[:, 0].tolist()) == set(range(5))


def test_a_million_requests_carry_their_prefix_in_16_bytes_each():
    scn = dense_scenario(serve__requests=1_000_000, serve__workload__system_prompt_tokens=100,
                         serve__prompt_tokens=10, serve__output_tokens_min=1, serve__output_tokens_max=1)
    table = build_table(scn.serve, np.random.default_rng(0))
    assert table.prefix_segment.nbytes + table.prefix_tokens.nbytes == 16_000_000


def test_the_closed_form_matches_the_reference_with_the_prefix_cache():
    scn = dense_scenario(serve__workload={"kind": "chat", "clients": 8, "turns": 3, "think_s": 0.2,
                                          "system_prompt_tokens": 700},
                         serve__requests=96, serve__prompt_tokens=300,
                         machines__box__engine__iteration__kv_pool_gib=6000 / 2048)
    _, fast, mf = run(scn)
    _, slow, ms = run(scn, exact=True)
    assert mf["prefix_evicted_tokens"] > 0 and mf["kv_preemptions"] == ms["kv_preemptions"]
    assert list(fast.cached_tokens) == list(slow.cached_tokens)
    for key in ("end_s", "ttft_s"):
        a, b = (np.array([getattr(r, key) for r in recs]) for recs in (fast, slow))
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9, nan_ok=True), key


def test_without_shared_prefixes_the_cache_path_changes_nothing(monkeypatch):
    """A shipped dense scenario (fewer requests) as it runs, and with the prefix cache's accounting forced on for a
    workload that shares nothing: the same metrics, and no prefix keys in the plain run's."""
    scn = load_scenario(DENSE, ["serve.requests=1500"])[0]
    plain = DenseEngine().metrics(DenseEngine().serve(scn, np.random.default_rng(0)))
    assert not [k for k in plain if k.startswith("prefix_")]
    build = dense_serve.build_table

    def nothing_shared(sv, rng):
        t = build(sv, rng)
        n = len(t)
        return replace(t, prefix_segment=np.full((n, 2), -1, dtype=np.int32),
                       prefix_tokens=np.zeros((n, 2), dtype=np.int32))

    monkeypatch.setattr(dense_serve, "build_table", nothing_shared)
    forced = DenseEngine().metrics(DenseEngine().serve(scn, np.random.default_rng(0)))
    assert forced["prefix_hit_rate"] == 0 and forced["prefix_evicted_tokens"] == 0
    assert {k: v for k, v in forced.items() if not k.startswith("prefix_")} == pytest.approx(plain, rel=1e-12)


def test_the_chat_scenario_is_clean_as_every_shipped_one():
    """Its schema, its text within 120 columns, and no warning: nor on a100_llama3_8b, whose prefix caching written
    out on with lengths that share nothing is acknowledged."""
    import jsonschema

    from sim.config.load import json_schema
    from sim.config.yaml_io import read_yaml

    assert list(jsonschema.Draft202012Validator(json_schema()).iter_errors(read_yaml(CHAT))) == []
    a100 = os.path.join(ROOT, "scenarios", "a100_llama3_8b.yaml")
    for path in (CHAT, a100):
        assert plausibility_warnings(load_scenario(path)[0], path) == []
    bare = load_scenario(a100, ["acknowledged_warnings={}"])[0]
    assert [w.split(": ")[1] for w in plausibility_warnings(bare, a100)] == [
        "machines.a100_box.engine.scheduler.enable_prefix_caching"]
    r = CliRunner().invoke(main, ["run", CHAT], catch_exceptions=False)
    assert r.exit_code == 0 and r.stderr == ""
    assert max(len(line) for line in r.stdout.splitlines()) <= 120
