"""sim capacity: goals, the paired bisection, steady-state statistics, the closed loop's ramp."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from click.testing import CliRunner

from sim.capacity import Outcome, find_capacity, parse_goal, search_seed, steady_outcome
from sim.cli import main
from sim.core.errors import ScenarioError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A100 = os.path.join(ROOT, "scenarios", "a100_llama3_8b.yaml")
CLOSED = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")


@pytest.mark.parametrize("text, key, bound, inclusive", [
    ("ttft_p99<1s", "ttft_p99", 1.0, False),
    ("tpot_p99<50ms", "tpot_p99", 0.05, False),
    ("e2e_p50<=20s", "e2e_p50", 20.0, True),
    ("queue_wait_mean < 250us", "queue_wait_mean", 250e-6, False),
    ("TTFT_P90<2", "ttft_p90", 2.0, False),
    ("rejected_share<0.01", "rejected_share", 0.01, False),
])
def test_goals_parse(text, key, bound, inclusive):
    g = parse_goal(text)
    assert (g.key, g.inclusive) == (key, inclusive) and g.bound == pytest.approx(bound)


@pytest.mark.parametrize("text", ["ttft<1s", "ttft_p99>1s", "speed_p99<1s", "ttft_p99<1h", "ttft_p99<-1s",
                                  "ttft_p99<0s", "rejected_share<2", "rejected_share_p99<0.1", "", "ttft_p99<nan"])
def test_bad_goals_are_one_line_errors(text):
    with pytest.raises(ScenarioError) as err:
        parse_goal(text)
    assert "\n" not in str(err.value) and "--goal" in str(err.value)


def _threshold(limit: float):
    """An evaluator meeting its goal exactly up to ``limit`` (different per seed)."""
    calls = []

    def evaluate(load: float, seed: int) -> Outcome:
        calls.append((load, seed))
        return Outcome(load, seed, {}, load <= limit * (1 + 0.1 * seed), 0.0, 0.0, 0.0, 0)

    return evaluate, calls


@pytest.mark.parametrize("start", [0.01, 1.0, 3.7, 500.0])
def test_bisection_finds_the_threshold_within_rtol(start):
    evaluate, _ = _threshold(3.7)
    s = search_seed(evaluate, start, 0, integer=False, rtol=0.01, ceiling=1e6)
    assert s.bounded and 3.7 / 1.011 <= s.capacity <= 3.7


def test_integer_search_finds_the_last_passing_count():
    evaluate, _ = _threshold(13)
    for start in (1, 4, 13, 14, 100):
        assert search_seed(evaluate, start, 0, integer=True, rtol=0.01, ceiling=1e6).capacity == 13


def test_no_load_and_every_load():
    never, _ = _threshold(-1)
    assert search_seed(never, 1.0, 0, integer=False, rtol=0.02, ceiling=1e6).capacity == 0
    always, _ = _threshold(1e12)
    s = search_seed(always, 1.0, 0, integer=False, rtol=0.02, ceiling=1e3)
    assert not s.bounded and s.capacity == 1e3


def test_answer_is_the_median_of_paired_seeds_with_their_spread():
    evaluate, calls = _threshold(10)  # seed k passes up to 10 x (1 + 0.1 k)
    c = find_capacity(evaluate, [], [0, 1, 2, 3, 4], 1.0, "clients")
    assert (c.capacity, c.low, c.high) == (12, 10, 14)
    assert len(c.at_answer) == 5 and all(o.load == 12 for o in c.at_answer)
    assert {seed for _, seed in calls} == {0, 1, 2, 3, 4}


def _columns(n: int, ttft: float, tpot: float) -> dict[str, np.ndarray]:
    sent = np.arange(n, dtype=float)
    out = np.full(n, 11)
    return {"sent_s": sent, "ttft_s": np.full(n, ttft), "end_s": sent + ttft + 10 * tpot, "output_tokens": out,
            "decode_s": np.full(n, 10 * tpot), "queue_wait_s": np.zeros(n), "end": np.array(["stop"] * n, object)}


def test_steady_window_leaves_out_the_start_and_the_end():
    cols = _columns(101, 0.5, 0.02)
    cols["ttft_s"][:5] = 100.0  # a cold start and a drained end: outside the 10-90% window
    cols["ttft_s"][-5:] = 100.0
    goals = [parse_goal("ttft_max<1s"), parse_goal("tpot_p99<21ms")]
    o = steady_outcome(cols, goals, 1.0, 0)
    assert o.met and o.values["ttft_max"] == 0.5 and o.values["tpot_p99"] == pytest.approx(0.02)
    assert o.window_requests == 81 and o.goodput_per_s == pytest.approx(81 / 80)
    late = steady_outcome(cols, goals, 1.0, 0, ramp_s=50.0)  # the ramp moves the window's start
    assert late.window_requests == 41


def test_goodput_counts_requests_meeting_every_bound_themselves():
    cols = _columns(101, 0.5, 0.02)
    cols["ttft_s"][20:40] = 2.0  # 20 requests inside the window miss the TTFT bound
    o = steady_outcome(cols, [parse_goal("ttft_p50<1s")], 1.0, 0)
    assert o.met and o.goodput_per_s == pytest.approx((81 - 20) / 80)


def test_capacity_of_the_a100_question_from_the_command_line():
    res = CliRunner().invoke(main, ["capacity", A100, "--goal", "ttft_p99<1s", "--goal", "tpot_p99<50ms",
                                    "--seeds", "2", "--rtol", "0.05", "--set", "serve.requests=400", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["axis"] == "rate_per_s" and d["bounded"] and 0 < d["low"] <= d["capacity"] <= d["high"]
    assert d["goals"]["ttft_p99<1s"]["at_capacity"] < 1.0 * 1.2
    assert 0 < d["goodput_per_s"] <= d["requests_per_s"] * 1.000001
    tight = CliRunner().invoke(main, ["capacity", A100, "--goal", "ttft_p99<0.3s", "--goal", "tpot_p99<50ms",
                                      "--seeds", "2", "--rtol", "0.05", "--set", "serve.requests=400", "--json"])
    assert json.loads(tight.output)["capacity"] <= d["capacity"]  # a tighter goal never admits more


def test_closed_loop_capacity_says_how_users_start():
    res = CliRunner().invoke(main, ["capacity", CLOSED, "--goal", "ttft_p99<3s", "--seeds", "1",
                                    "--set", "serve.requests=60", "--set", "serve.workload.runs=1",
                                    "--set", "serve.workload.ramp_s=10"])
    assert res.exit_code == 0, res.output
    assert "concurrent users" in res.output and "started over a 10 s ramp" in res.output


def test_capacity_refuses_what_it_cannot_search():
    res = CliRunner().invoke(main, ["capacity", CLOSED, "--goal", "ttft_p99<3s", "--load", "rate"])
    assert res.exit_code == 2 and "rate_per_s" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["capacity", A100, "--goal", "ttft<3s"])
    assert res.exit_code == 2 and "expected STATISTIC_AGGREGATE" in res.output


def test_ramp_spreads_the_first_requests():
    from sim.config.load import load_scenario
    from sim.runner import run

    scn, _ = load_scenario(CLOSED, ["serve.requests=8", "serve.workload.runs=1", "serve.workload.clients=4",
                                    "serve.workload.ramp_s=12"])
    res = run(scn, 0)
    cols = res.serving.requests.columns
    first = sorted(float(np.nanmin(cols["sent_s"][cols["client"] == c])) for c in range(4)) \
        if "client" in cols else sorted(cols["sent_s"])[:4]
    assert first == pytest.approx([0.0, 3.0, 6.0, 9.0])
    assert all(math.isfinite(x) for x in cols["ttft_s"])


def test_capacity_from_catalog_names_and_a_model_config_only(tmp_path):
    """The lab's question with nothing hand-written: a vLLM command line on a catalog A100, then its capacity."""
    path = str(tmp_path / "lab.yaml")
    res = CliRunner().invoke(main, ["vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct", "--gpu", "a100_80gb_sxm",
                                    "--rate", "4", "--requests", "400", "--write", path, "--no-run"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["capacity", path, "--goal", "ttft_p99<1s", "--goal", "tpot_p99<50ms", "--seeds",
                                    "2", "--rtol", "0.05", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["bounded"] and d["capacity"] > 1 and d["low"] <= d["capacity"] <= d["high"]


def test_chat_sessions_are_searched_over_users_and_the_text_says_what_they_share():
    chat = os.path.join(ROOT, "scenarios", "a100_llama3_8b_chat.yaml")
    res = CliRunner().invoke(main, ["capacity", chat, "--goal", "ttft_p99<1s", "--seeds", "1", "--set",
                                    "serve.requests=300", "--set", "serve.workload.ramp_s=30", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["axis"] == "clients"
    text = CliRunner().invoke(main, ["run", chat, "--set", "serve.requests=200"]).output
    assert "chat clients" in text and "resending the conversation" in text and "shared system prompt" in text
    assert "prefix cache:" in text and "found cached" in text
