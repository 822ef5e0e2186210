"""vLLM's start-up phase lines in `sim logs` (sim.formats.engine_logs): each phase read with its seconds, counted per
phase, and no line (however odd) raising."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.formats.engine_logs import read_logs, summary_lines

LINES = {
    "loading_weights_s": "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:20 [default_loader.py:267] Loading weights took "
                         "{} seconds",
    "model_loading_s": "INFO [gpu_model_runner.py:2653] Model loading took 15.2689 GiB and {} seconds",
    "dynamo_s": "(EngineCore pid=594) INFO [backends.py:550] Dynamo bytecode transform time: {} s",
    "compile_graph_s": "INFO [backends.py:218] Compiling a graph for compile range (1, 2048) takes {} s",
    "cached_graph_s": "INFO [backends.py:161] Directly load the compiled graph(s) for dynamic shape from the cache, "
                      "took {} s",
    "torch_compile_s": "INFO [monitor.py:34] torch.compile takes {} s in total",
    "graph_capturing_s": "INFO [gpu_model_runner.py:3480] Graph capturing finished in {} secs, took 1.92 GiB",
    "init_engine_s": "INFO [core.py:210] init engine (profile, create kv cache, warmup model) took {} seconds",
}


def parse(*lines: str):
    return read_logs([("t.log", list(lines))])


def test_each_phase_line_is_a_fact_with_its_seconds_and_counted():
    t = parse(*(line.format(f"{i + 1}.5") for i, line in enumerate(LINES.values())),
              "Model loading took 5.29 GiB memory and 541.268852 seconds",
              "init engine (profile, create kv cache, warmup model) took 60.86 s (compilation: 30.08 s)")
    assert t.not_understood == 0 and t.row_count == 0
    got = {(f["phase"], f["seconds"]) for f in t.facts}
    assert got >= {(phase, i + 1.5) for i, phase in enumerate(LINES)}
    assert t.phases["model_loading_s"] == 2 and t.phases["init_engine_s"] == 2 and t.phases["dynamo_s"] == 1
    newer = [f for f in t.facts if f.get("compilation_s") is not None]
    assert newer and newer[0]["compilation_s"] == 30.08 and newer[0]["seconds"] == 60.86
    assert any(f.get("gib") == 5.29 for f in t.facts)  # the newer "GiB memory" form
    assert any("vLLM start-up phases" in line for line in summary_lines(t))


def test_a_phase_line_among_statistics_lines_leaves_them_rows():
    stats = ("Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
             "Waiting: 0 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 0.0%")
    t = parse(LINES["loading_weights_s"].format("3.25"), stats)
    assert t.row_count == 1 and t.phases == {"loading_weights_s": 1} and t.not_understood == 0


@settings(max_examples=200, deadline=None)
@given(phase=st.sampled_from(sorted(LINES)),
       seconds=st.one_of(st.floats(0, 1e6, allow_nan=False).map(lambda x: f"{x:.3f}"),
                         st.sampled_from(["nan", "inf", "-1", "", "1e999", "1,5", "..", "12abc"])),
       prefix=st.text(max_size=30), suffix=st.text(max_size=30))
def test_odd_phase_lines_never_raise_and_a_number_read_is_the_one_printed(phase, seconds, prefix, suffix):
    line = prefix + LINES[phase].format(seconds) + suffix
    t = parse(line)
    assert t.lines == 1 and t.not_understood + len(t.facts) >= 1
    for f in t.facts:
        assert f["seconds"] >= 0 and f["seconds"] == f["seconds"]  # finite, never negative


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_any_text_is_read_without_raising(lines):
    t = parse(*lines)
    assert t.lines == len(lines) and sum(t.phases.values()) <= len(t.facts)
