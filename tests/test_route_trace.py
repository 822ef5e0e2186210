"""Route traces: reading both formats, refusing bad input line by line, the statistics against direct reference
implementations (the trace study's own LRU), and replaying a trace as a scenario's routing."""

import json
import sys

import numpy as np
import pytest

from sim import ScenarioError
from sim.calibration.route_sampler import sampled_trace
from sim.formats.route_trace import read_route_trace
from sim.moe.routing import RoutingLaw, consecutive_overlap, inclusion_probabilities
from sim.moe.trace_replay import lru_hit_rates, replay_law, trace_summary

sys.path.insert(0, "tests")


def write_csv(path, trace) -> None:
    lines = ["# a comment line", "request,token,layer,experts"]
    for r, t, layer, ex in zip(trace.request, trace.token, trace.layer, trace.experts, strict=True):
        lines.append(f"{r},{t},{layer},{' '.join(map(str, ex))}")
    path.write_text("\n".join(lines) + "\n")


def write_jsonl(path, trace) -> None:
    path.write_text("".join(json.dumps({"request": int(r), "pos": int(t), "layer": int(layer),
                                        "experts": [int(x) for x in ex]}) + "\n"
                            for r, t, layer, ex in zip(trace.request, trace.token, trace.layer, trace.experts,
                                                       strict=True)))


@pytest.fixture(scope="module")
def sampled():
    law = RoutingLaw(layers=3, experts=32, top_k=4, exponent=1.1, locality=0.3, drift_weight=0.3,
                     drift_hot_experts=6)
    return law, sampled_trace(law, np.array([60, 45, 70]), np.array([0.9, 1.0, 1.2]), np.random.default_rng(4))


def reference_lru(seq: list[list[int]], capacity: int) -> tuple[int, int]:
    """The trace study's per-layer LRU (analyze_locality.py): insert each expert at the front, cut at the token's
    end."""
    cache: list[int] = []
    hits = total = 0
    for experts in seq:
        for e in dict.fromkeys(experts):
            total += 1
            if e in cache:
                hits += 1
                cache.remove(e)
            cache.insert(0, e)
        del cache[capacity:]
    return hits, total


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_trace_reads_back_as_written(tmp_path, sampled, fmt):
    _, trace = sampled
    path = tmp_path / f"t.{fmt}"
    (write_csv if fmt == "csv" else write_jsonl)(path, trace)
    back = read_route_trace(str(path))
    for field in ("request", "token", "layer", "experts"):
        assert np.array_equal(getattr(back, field), getattr(trace, field)), field
    assert back.top_k == 4 and back.layers == 3


def test_statistics_against_direct_computations(sampled):
    law, trace = sampled
    groups = {(r, layer): [list(trace.experts[i]) for i in range(a, b)] for r, layer, a, b in trace.groups()}
    for cap in (4, 8, 16):
        h = t = 0
        for seq in groups.values():
            hh, tt = reference_lru(seq, cap)
            h, t = h + hh, t + tt
        assert lru_hit_rates(trace, [cap])[0] == pytest.approx(h / t, abs=1e-12)
    o, who = trace.overlap(1)
    direct = [len(set(s[i]) & set(s[i + 1])) / 4 for s in groups.values() for i in range(len(s) - 1)]
    assert o.mean() == pytest.approx(np.mean(direct), abs=1e-12) and set(who.tolist()) == {0, 1, 2}
    d = np.concatenate(trace.reuse_distances())
    assert d.min() >= 1 and d.size == sum(len(s) * 4 for s in groups.values()) - sum(
        len({e for x in s for e in x}) for s in groups.values())  # every use after an expert's first is a reuse
    stats = trace.per_request_layer()
    assert stats["distinct"].shape == (3, 3) and (stats["distinct"] <= 32).all() and (stats["top1"] <= 0.25).all()
    pi = trace.inclusion(32)
    assert pi.sum(axis=1) == pytest.approx(np.full(3, 4.0)) and (pi > 0).all() and (pi < 1).all()
    summary = trace_summary(trace, capacities=(4, 8))
    assert summary["requests"] == 3 and 0 < summary["overlap"][1] < 1


def test_overlap_pairs_only_tokens_present(tmp_path):
    path = tmp_path / "gap.csv"
    path.write_text("request,token,layer,experts\n0,0,0,1 2\n0,1,0,1 3\n0,3,0,1 2\n")
    o, _ = read_route_trace(str(path)).overlap(1)
    assert o.tolist() == [0.5]  # tokens 1 and 3 are not consecutive


@pytest.mark.parametrize("text, where, words", [
    ("request,token,layer\n0,0,0\n", "line 1", "missing: experts"),
    ("request,token,layer,experts\n0,0,0,1 2\n0,1,0,1 x\n", "line 3", "expert id 'x'"),
    ("request,token,layer,experts\n0,0,0,1 2\n0,1,0,3 3\n", "line 3", "appears twice"),
    ("request,token,layer,experts\n0,0,0,1 2\n0,1,0,1 2 3\n", "line 3", "expected 2 as on line 2"),
    ("request,token,layer,experts\n0,0,0,1 2\n# note\n0,0,0,3 4\n", "line 4", "appears twice (also on line 2)"),
    ("request,token,layer,experts\n0,-1,0,1 2\n", "line 2", "token '-1'"),
    ("request,token,layer,experts\n0,0,0\n", "line 2", "3 fields"),
    ("request,token,layer,experts\n0,0,0,\n", "line 2", "no experts"),
    ('{"token": 0, "layer": 0, "experts": [1, 2]}\n{"token": 1, "layer": 0}\n', "line 2", "keys token"),
    ('{"token": 0, "layer": 0, "experts": [1, 2]}\n{not json\n', "line 2", "not valid JSON"),
    ('{"token": 0, "layer": true, "experts": [1, 2]}\n', "line 1", "layer"),
    ("# only a comment\n", "routing.trace", "no routes"),
    ("request,token,layer,experts\n", "routing.trace", "a header only"),
])
def test_bad_lines_are_one_line_errors_naming_file_and_line(tmp_path, text, where, words):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        read_route_trace(str(path))
    msg = str(err.value)
    assert msg.startswith(str(path)) and f": {where}: " in msg and words in msg and "\n" not in msg, msg


def test_a_missing_or_binary_file_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="file not found"):
        read_route_trace(str(tmp_path / "none.csv"))
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ScenarioError, match="not (UTF-8 )?text"):
        read_route_trace(str(tmp_path / "bin.csv"))


def test_replay_serves_the_traces_frequencies_and_reuse(tmp_path, sampled):
    law, trace = sampled
    q, reuse = replay_law(trace, law)
    pi = inclusion_probabilities(q, 4)
    assert pi == pytest.approx(trace.inclusion(32), rel=1e-6)  # the smoothed frequencies, exactly
    o, _ = trace.overlap(1)
    assert float(consecutive_overlap(pi, reuse, 4).mean()) == pytest.approx(o.mean(), abs=1e-6)
    with pytest.raises(ScenarioError, match="layers in the trace"):
        replay_law(trace, RoutingLaw(layers=4, experts=32, top_k=4))
    with pytest.raises(ScenarioError, match="top_k"):
        replay_law(trace, RoutingLaw(layers=3, experts=32, top_k=2))
    with pytest.raises(ScenarioError, match="experts per layer"):
        replay_law(trace, RoutingLaw(layers=3, experts=8, top_k=4))


def test_a_scenario_replays_a_trace(tmp_path):
    """routing.trace makes the served law the trace's (8 layers, 64 experts, top-4 as the test engine)."""
    from test_moe_serve import moe_scenario, serve, serve_metrics

    from sim.moe.setup import setup_engine

    law = RoutingLaw(layers=8, experts=64, top_k=4, exponent=1.4, locality=0.4)
    trace = sampled_trace(law, np.array([300, 300]), np.ones(2), np.random.default_rng(2))
    path = tmp_path / "routes.csv"
    write_csv(path, trace)
    eng = setup_engine(moe_scenario(models__moe__moe__routing__trace=str(path)), "server")
    assert inclusion_probabilities(eng.popularity, 4) == pytest.approx(trace.inclusion(64), rel=1e-6)
    assert 0.25 < eng.law.locality < 0.55  # the trace's reuse replaces the scenario's (0)
    m = serve_metrics(*serve(moe_scenario(models__moe__moe__routing__trace=str(path)), np.random.default_rng(0)))
    assert 0 < m["expert_hit_rate"] < 1
    bad = tmp_path / "bad.csv"
    bad.write_text("request,token,layer,experts\n0,0,0,1 1 2 3\n")
    with pytest.raises(ScenarioError, match=r"bad.csv: line 2: an expert id appears twice"):
        setup_engine(moe_scenario(models__moe__moe__routing__trace=str(bad)), "server")


def test_sim_run_with_a_bad_trace_exits_2_with_one_line(tmp_path):
    from bounded import run_bounded

    bad = tmp_path / "bad.csv"
    bad.write_text("request,token,layer,experts\n0,0,0,1 2 3 x\n")
    out = run_bounded(["run", "scenarios/gen3_5090.yaml", "--set", f"models.moe125b.moe.routing.trace={bad}"])
    assert out.one_line_error(), (out.code, out.stderr)
    assert "bad.csv: line 2: expert id 'x'" in out.stderr
