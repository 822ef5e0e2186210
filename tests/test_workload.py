"""Request workloads (sim.serving.workload): trace CSVs and their errors, agent contexts, and the tables scenarios
build."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_moe_serve import moe_scenario

from sim import ScenarioError
from sim.config.serve import Serve
from sim.serving.workload import RequestTable, agent_contexts, build_table, read_trace

AZURE = "arrived_at,num_prefill_tokens,num_decode_tokens"
OURS = "arrival_s,prompt_tokens,cached_tokens,output_tokens,acceptance"
PROPERTY = settings(max_examples=80, deadline=None)


def write(folder: Path, text: str, name: str = "trace.csv") -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def trace_error(path: str, limit: int = 100, time_scale: float = 1.0) -> ScenarioError:
    """The ScenarioError reading ``path`` raises; it is one line naming the file."""
    with pytest.raises(ScenarioError) as info:
        read_trace(path, limit, time_scale)
    err = info.value
    assert "\n" not in str(err) and str(err).startswith(f"{path}: ")
    assert err.source == path and str(err) == f"{path}: {err.path}: {err.problem}"
    return err


def assert_valid(t: RequestTable, limit: int) -> None:
    """What the server may rely on in any table a trace gives."""
    assert 1 <= len(t) <= limit and not t.closed_loop and t.run is None
    assert t.arrival_s.dtype == np.float64 and np.isfinite(t.arrival_s).all() and (t.arrival_s >= 0).all()
    assert (np.diff(t.arrival_s) >= 0).all()
    for col in (t.prompt_tokens, t.cached_tokens, t.output_tokens, t.client):
        assert col.dtype == np.int64 and col.shape == (len(t),)
    assert (t.cached_tokens >= 0).all() and (t.cached_tokens <= t.prompt_tokens).all()
    assert (t.output_tokens >= 1).all() and (t.client == -1).all()
    acc = t.acceptance[~np.isnan(t.acceptance)]
    assert ((acc >= 0) & (acc <= 1)).all()


# --- read_trace: the two layouts -----------------------------------------------------------------------------------


def test_azure_layout_reads_arrivals_and_lengths(tmp_path):
    t = read_trace(write(tmp_path, f"{AZURE}\n0.0,374,44\n4.314579,396,109\n4.314579,10,0\n"), 100)
    assert_valid(t, 100)
    np.testing.assert_allclose(t.arrival_s, [0.0, 4.314579, 4.314579])
    assert t.prompt_tokens.tolist() == [374, 396, 10]
    assert t.output_tokens.tolist() == [44, 109, 1]  # a request generates at least one token
    assert t.cached_tokens.tolist() == [0, 0, 0] and np.isnan(t.acceptance).all()


def test_project_layout_with_optional_columns(tmp_path):
    t = read_trace(write(tmp_path, f"{OURS}\n0.5,100,60,20,0.7\n1.25,80,0,1,\n2,50,50,0,1\n"), 100)
    assert_valid(t, 100)
    assert t.arrival_s.tolist() == [0.5, 1.25, 2.0]
    assert t.prompt_tokens.tolist() == [100, 80, 50] and t.cached_tokens.tolist() == [60, 0, 50]
    assert t.output_tokens.tolist() == [20, 1, 1]
    assert t.acceptance[0] == 0.7 and np.isnan(t.acceptance[1]) and t.acceptance[2] == 1.0  # empty: the model's


def test_project_layout_without_optional_columns(tmp_path):
    t = read_trace(write(tmp_path, "output_tokens,arrival_s,prompt_tokens\n7,0,3\n"), 100)  # any column order
    assert t.arrival_s.tolist() == [0.0] and t.prompt_tokens.tolist() == [3] and t.output_tokens.tolist() == [7]
    assert t.cached_tokens.tolist() == [0] and np.isnan(t.acceptance).all()


def test_azure_layout_takes_optional_project_columns_and_ignores_others(tmp_path):
    text = f"id,{AZURE},cached_tokens,acceptance,note\n0,0,10,5,4,0.5,x\n1,1,20,6,0,,y\n"
    t = read_trace(write(tmp_path, text), 100)
    assert t.cached_tokens.tolist() == [4, 0] and t.acceptance[0] == 0.5 and np.isnan(t.acceptance[1])


def test_limit_keeps_the_first_rows_and_does_not_check_the_rest(tmp_path):
    path = write(tmp_path, f"{AZURE}\n0,1,1\n1,2,2\n2,3,3\n1,bad,-1\n")
    t = read_trace(path, 2)
    assert len(t) == 2 and t.prompt_tokens.tolist() == [1, 2]
    assert len(read_trace(path, 3)) == 3
    assert trace_error(path, 4).path == "row 5.num_prefill_tokens"


def test_time_scale_multiplies_arrivals(tmp_path):
    path = write(tmp_path, f"{AZURE}\n0,1,1\n2,1,1\n5,1,1\n")
    assert read_trace(path, 10, 0.5).arrival_s.tolist() == [0.0, 1.0, 2.5]
    assert read_trace(path, 10, 3.0).arrival_s.tolist() == [0.0, 6.0, 15.0]


def test_comments_blank_lines_spaces_and_a_byte_order_mark_are_tolerated(tmp_path):
    text = "\ufeff# exported 2023-11-16\n\narrived_at, num_prefill_tokens, num_decode_tokens\n0, 5 ,2  # first\n\n" \
        "1,6,3\n"
    t = read_trace(write(tmp_path, text), 100)
    assert t.arrival_s.tolist() == [0.0, 1.0] and t.prompt_tokens.tolist() == [5, 6]
    assert t.output_tokens.tolist() == [2, 3]


# --- read_trace: bad input is one ScenarioError naming the file and the key -------------------------------------

BAD_TRACES = {
    "empty file": ("", "serve.workload.trace", "not a readable CSV"),
    "header only": (f"{AZURE}\n", "serve.workload.trace", "no requests"),
    "header and comments": (f"{AZURE}\n# nothing yet\n\n", "serve.workload.trace", "no requests"),
    "unclosed quote": (f'{AZURE}\n0,"1,1\n', "serve.workload.trace", "not a readable CSV"),
    "azure column missing": ("arrived_at,num_prefill_tokens\n0,1\n", "num_decode_tokens", "a column of the trace"),
    "our column missing": ("arrival_s,output_tokens\n0,1\n", "prompt_tokens", "a column of the trace"),
    "no known column": ("a,b,c\n1,2,3\n", "prompt_tokens", "a column of the trace"),
    "both layouts": ("arrived_at,arrival_s,prompt_tokens,output_tokens\n0,0,1,1\n", "arrived_at", "single column"),
    "column twice": ("arrival_s,prompt_tokens, prompt_tokens,output_tokens\n0,1,1,1\n", "prompt_tokens",
                     "single column"),
    "our names in an azure trace": (f"{AZURE},cached_tokens\n0,10,1,11\n", "row 2.cached_tokens",
                                    "at most num_prefill_tokens"),
    "more fields than columns": (f"{AZURE}\n0,1,1,9\n", "row 2", "no more fields"),
    "text for a number": (f"{AZURE}\n0,1,1\n1,many,1\n", "row 3.num_prefill_tokens", "'many'"),
    "empty cell": (f"{AZURE}\n0,1,1\n1,1,\n", "row 3.num_decode_tokens", "an empty cell"),
    "negative tokens": (f"{AZURE}\n0,1,1\n1,1,-3\n", "row 3.num_decode_tokens", "'-3'"),
    "fractional tokens": (f"{AZURE}\n0,1,1\n1,2.5,1\n", "row 3.num_prefill_tokens", "whole number"),
    "absurd tokens": (f"{AZURE}\n0,1,1\n1,1e30,1\n", "row 3.num_prefill_tokens", "whole number"),
    "boolean tokens": (f"{AZURE}\n0,True,1\n", "row 2.num_prefill_tokens", "'True'"),
    "negative arrival": (f"{AZURE}\n-1,1,1\n", "row 2.arrived_at", "non-negative"),
    "infinite arrival": (f"{AZURE}\n0,1,1\ninf,1,1\n", "row 3.arrived_at", "'inf'"),
    "date for an arrival": (f"{AZURE}\n2023-11-16 18:15:46,1,1\n", "row 2.arrived_at", "non-negative number"),
    "arrivals out of order": (f"{AZURE}\n0,1,1\n2,1,1\n1,1,1\n", "row 4.arrived_at", "non-decreasing"),
    "acceptance above 1": (f"{OURS}\n0,1,0,1,0.5\n1,1,0,1,1.5\n", "row 3.acceptance", "[0, 1]"),
    "acceptance below 0": (f"{OURS}\n0,1,0,1,-0.1\n", "row 2.acceptance", "[0, 1]"),
    "acceptance as text": (f"{OURS}\n0,1,0,1,high\n", "row 2.acceptance", "'high'"),
    "cached beyond prompt": (f"{OURS}\n0,10,10,1,\n1,10,11,1,\n", "row 3.cached_tokens", "at most prompt_tokens"),
    "negative cached": (f"{OURS}\n0,10,-1,1,\n", "row 2.cached_tokens", "'-1'"),
    "rows counted as file lines": (f"# a\n\n{AZURE}\n# b\n0,1,1\n\n1,-1,1\n", "row 7.num_prefill_tokens", "'-1'"),
}


@pytest.mark.parametrize("text,key,problem", BAD_TRACES.values(), ids=BAD_TRACES.keys())
def test_bad_trace_names_file_and_key(tmp_path, text, key, problem):
    err = trace_error(write(tmp_path, text))
    assert err.path == key
    assert problem in err.problem


def test_missing_file_directory_and_binary_file(tmp_path):
    for path, problem in ((str(tmp_path / "nope.csv"), "file not found"), (str(tmp_path), "is a directory")):
        err = trace_error(path)
        assert err.path == "serve.workload.trace" and problem in err.problem
    binary = tmp_path / "trace.csv.gz"
    binary.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe garbage")
    assert re.search("not (UTF-8 )?text", trace_error(str(binary)).problem)  # a binary file: not text


def test_arrival_overflowing_under_time_scale(tmp_path):
    err = trace_error(write(tmp_path, f"{AZURE}\n0,1,1\n1e308,1,1\n"), time_scale=10.0)
    assert err.path == "row 3.arrived_at" and "time_scale" in err.problem


# --- read_trace: properties ----------------------------------------------------------------------------------------

ROW = st.tuples(
    st.floats(0, 1e4, allow_nan=False, allow_infinity=False),  # gap to the previous arrival (s)
    st.integers(0, 10**7),  # prompt tokens
    st.floats(0, 1),  # share of the prompt cached
    st.integers(0, 10**6),  # output tokens
    st.none() | st.floats(0, 1),  # acceptance (None: an empty cell)
)


@PROPERTY
@given(rows=st.lists(ROW, min_size=1, max_size=25), azure=st.booleans(), with_cached=st.booleans(),
       with_acceptance=st.booleans(), limit=st.integers(1, 30),
       time_scale=st.sampled_from([1.0, 0.25, 3.0]) | st.floats(1e-3, 1e3))
def test_valid_tables_read_back_exactly(tmp_path_factory, rows, azure, with_cached, with_acceptance, limit,
                                        time_scale):
    arrival = np.cumsum([r[0] for r in rows])
    prompt = [r[1] for r in rows]
    cached = [int(r[1] * r[2]) if with_cached else 0 for r in rows]
    output = [r[3] for r in rows]
    acceptance = [r[4] if with_acceptance else None for r in rows]
    header = (AZURE.split(",") if azure else ["arrival_s", "prompt_tokens", "output_tokens"]) \
        + ["cached_tokens"] * with_cached + ["acceptance"] * with_acceptance
    lines = [",".join(header)]
    for i in range(len(rows)):
        cells = [repr(float(arrival[i])), str(prompt[i]), str(output[i])] + [str(cached[i])] * with_cached \
            + ([""] if acceptance[i] is None else [repr(acceptance[i])]) * with_acceptance
        lines.append(",".join(cells))
    t = read_trace(write(tmp_path_factory.mktemp("t"), "\n".join(lines) + "\n"), limit, time_scale)
    n = min(limit, len(rows))
    assert_valid(t, limit)
    assert len(t) == n
    np.testing.assert_allclose(t.arrival_s, arrival[:n] * time_scale, rtol=1e-12)
    assert t.prompt_tokens.tolist() == prompt[:n] and t.cached_tokens.tolist() == cached[:n]
    assert t.output_tokens.tolist() == [max(o, 1) for o in output[:n]]
    np.testing.assert_array_equal(t.acceptance, [np.nan if a is None else a for a in acceptance[:n]])


def check_garbage(folder: Path, data: bytes, limit: int) -> None:
    """Reading ``data`` as a trace either gives a valid table or one ScenarioError; nothing else."""
    path = folder / "garbage.csv"
    path.write_bytes(data)
    try:
        t = read_trace(str(path), limit)
    except ScenarioError as err:
        assert "\n" not in str(err) and str(err).startswith(f"{path}: ")
    else:
        assert_valid(t, limit)


CELL = st.text(max_size=6) | st.sampled_from(["", "0", "1", "-1", "0.5", "1e30", "nan", "inf", "-0", "True", "#",
                                               '"', "1,2", "\n", " 3 ", "0x1", "१२"])


@PROPERTY
@given(text=st.text(max_size=200), limit=st.integers(1, 5))
def test_garbage_text_reads_or_raises_scenario_error(tmp_path_factory, text, limit):
    check_garbage(tmp_path_factory.mktemp("g"), text.encode("utf-8"), limit)


@PROPERTY
@given(data=st.binary(max_size=200))
def test_garbage_bytes_read_or_raise_scenario_error(tmp_path_factory, data):
    check_garbage(tmp_path_factory.mktemp("g"), data, 10)


@PROPERTY
@given(header=st.sampled_from([AZURE, OURS, "arrival_s,prompt_tokens,output_tokens", f"{AZURE},acceptance",
                               f"{AZURE},arrival_s", "arrival_s,arrival_s,prompt_tokens,output_tokens"]),
       cells=st.lists(st.lists(CELL, min_size=0, max_size=7), min_size=0, max_size=6), limit=st.integers(1, 8))
def test_random_cells_read_or_raise_scenario_error(tmp_path_factory, header, cells, limit):
    text = "\n".join([header] + [",".join(row) for row in cells])
    check_garbage(tmp_path_factory.mktemp("c"), text.encode("utf-8"), limit)


# --- agent contexts ------------------------------------------------------------------------------------------------


def test_agent_contexts_by_hand():
    out = np.array([5, 6, 7, 8, 9, 10])
    prompt, cached = agent_contexts(out, np.array([0, 1, 0, 1, 0, 1]), turns=2, turn_tokens=10, first_prompt=100)
    # client 0: turn 1 (110 new), turn 2 (110 + 5 cached, 10 new), then a new session
    assert cached.tolist() == [0, 0, 115, 116, 0, 0]
    assert prompt.tolist() == [110, 110, 125, 126, 110, 110]
    assert prompt.dtype == cached.dtype == np.int64


def test_agent_contexts_of_no_requests():
    prompt, cached = agent_contexts(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 3, 10, 5)
    assert prompt.size == cached.size == 0


@PROPERTY
@given(data=st.data(), clients=st.integers(1, 5), turns=st.integers(1, 6), turn_tokens=st.integers(1, 5000),
       first_prompt=st.integers(0, 5000))
def test_agent_turns_grow_the_context(data, clients, turns, turn_tokens, first_prompt):
    client = np.array(data.draw(st.lists(st.integers(0, clients - 1), max_size=40)), dtype=np.int64)
    out = np.array(data.draw(st.lists(st.integers(1, 2000), min_size=client.size, max_size=client.size)),
                   dtype=np.int64)
    prompt, cached = agent_contexts(out, client, turns, turn_tokens, first_prompt)
    for c in range(clients):
        mine = np.flatnonzero(client == c)  # this client's turns, in order
        for k, i in enumerate(mine):
            if k % turns == 0:  # a session's first turn
                assert cached[i] == 0 and prompt[i] == first_prompt + turn_tokens
            else:
                prev = mine[k - 1]
                assert cached[i] == prompt[prev] + out[prev]
                assert prompt[i] - cached[i] == turn_tokens


# --- build_table from a validated scenario -------------------------------------------------------------------------


def table(seed: int = 0, **over) -> RequestTable:
    scn = moe_scenario(**over)
    assert isinstance(scn.serve, Serve)
    return build_table(scn.serve, np.random.default_rng(seed))


def assert_same(a: RequestTable, b: RequestTable) -> None:
    for name in ("arrival_s", "prompt_tokens", "cached_tokens", "output_tokens", "acceptance", "client", "run"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_open_loop_poisson_arrivals():
    t = table(serve__requests=20000, serve__workload__kind="open", serve__workload__rate_per_s=5.0)
    gaps = np.diff(t.arrival_s)
    assert t.arrival_s[0] == 0 and (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() == pytest.approx(0.2, rel=0.05)  # exponential gaps: sd = mean
    assert not t.closed_loop and (t.client == -1).all() and t.run is None and np.isnan(t.acceptance).all()


def test_open_loop_uniform_arrivals_are_evenly_spaced():
    t = table(serve__requests=50, serve__workload__kind="open", serve__workload__rate_per_s=4.0,
              serve__workload__arrival_law="uniform")
    np.testing.assert_allclose(t.arrival_s, np.arange(50) / 4.0)


def test_closed_loop_clients_cycle_within_each_run():
    t = table(serve__requests=12, serve__workload__kind="closed", serve__workload__clients=3,
              serve__workload__runs=2)
    assert t.closed_loop and np.isnan(t.arrival_s).all()
    assert t.client.tolist() == [0, 1, 2] * 4
    assert t.run.tolist() == [0] * 6 + [1] * 6
    t = table(serve__requests=10, serve__workload__kind="closed", serve__workload__clients=4,
              serve__workload__runs=2)
    assert t.client.tolist() == [0, 1, 2, 3, 0] * 2


def test_sequential_is_one_client_one_run():
    t = table(serve__requests=7)
    assert t.closed_loop and t.client.tolist() == [0] * 7 and t.run.tolist() == [0] * 7


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), runs=st.integers(1, 70), clients=st.integers(1, 9))
def test_runs_split_the_requests_evenly(n, runs, clients):
    assume(clients <= -(-n // min(runs, n)))  # more clients than a run's requests is a scenario error
    t = table(serve__requests=n, serve__workload__kind="closed", serve__workload__clients=clients,
              serve__workload__runs=runs)
    assert t.run is not None and (np.diff(t.run) >= 0).all()
    sizes = np.bincount(t.run)
    assert sizes.size == min(runs, n) and sizes.min() >= 1 and sizes.max() - sizes.min() <= 1
    for r in range(sizes.size):  # each run, the clients start together and take its requests in turn
        assert t.client[t.run == r].tolist() == [i % clients for i in range(sizes[r])]


def test_uniform_lengths_and_fixed_prompts():
    t = table(serve__requests=2000, serve__prompt_tokens=30, serve__cached_tokens=12)
    assert t.output_tokens.min() >= 50 and t.output_tokens.max() <= 80
    assert set(t.output_tokens.tolist()) == set(range(50, 81))
    assert (t.prompt_tokens == 30).all() and (t.cached_tokens == 12).all()


def test_exponential_lengths_have_the_mean_asked():
    t = table(serve__requests=40000, serve__output_tokens_mean=200.0, serve__prompt_tokens_mean=500.0,
              serve__prompt_tokens=500, serve__cached_tokens=100)
    assert t.output_tokens.mean() == pytest.approx(200, rel=0.03) and t.output_tokens.min() >= 1
    assert t.prompt_tokens.mean() == pytest.approx(500, rel=0.03) and t.prompt_tokens.min() >= 0
    assert t.output_tokens.dtype == t.prompt_tokens.dtype == np.int64
    assert (t.cached_tokens == np.minimum(100, t.prompt_tokens)).all()  # never more cached than the prompt


@pytest.mark.parametrize("over", [
    {},
    {"serve__workload__kind": "open", "serve__workload__rate_per_s": 2.0, "serve__output_tokens_mean": 90.0},
    {"serve__workload__kind": "closed", "serve__workload__clients": 3, "serve__prompt_tokens_mean": 40.0},
    {"serve__workload__kind": "agent", "serve__workload__clients": 2, "serve__workload__turns": 3},
], ids=["sequential", "open", "closed", "agent"])
def test_same_seed_same_table(over):
    assert_same(table(7, **over), table(7, **over))
    other = table(8, **over)
    assert not np.array_equal(table(7, **over).output_tokens, other.output_tokens)


def test_agent_workload_builds_growing_contexts():
    t = table(serve__requests=12, serve__prompt_tokens=300, serve__workload__kind="agent", serve__workload__clients=2,
              serve__workload__turns=3, serve__workload__turn_tokens=50)
    assert t.closed_loop and np.isnan(t.arrival_s).all() and t.client.tolist() == [0, 1] * 6
    prompt, cached = agent_contexts(t.output_tokens, t.client, 3, 50, 300)
    assert t.prompt_tokens.tolist() == prompt.tolist() and t.cached_tokens.tolist() == cached.tolist()
    assert t.cached_tokens[:2].tolist() == [0, 0] and t.prompt_tokens[:2].tolist() == [350, 350]
    assert t.cached_tokens[2] == 350 + t.output_tokens[0]


def test_trace_workload_reads_the_first_requests(tmp_path):
    path = write(tmp_path, f"{AZURE}\n0,10,5\n1,20,6\n2,30,7\n")
    t = table(serve__requests=2, serve__workload__kind="trace", serve__workload__trace=path,
              serve__workload__time_scale=2.0)
    assert t.arrival_s.tolist() == [0.0, 2.0] and t.prompt_tokens.tolist() == [10, 20]
    assert not t.closed_loop


# --- scenario validation of the workload ---------------------------------------------------------------------------


@pytest.mark.parametrize("over,key", [
    ({"serve__workload__kind": "open"}, "serve.workload.rate_per_s"),
    ({"serve__workload__kind": "trace"}, "serve.workload.trace"),
    ({"serve__prompt_tokens": 10, "serve__cached_tokens": 11}, "serve.cached_tokens"),
    ({"serve__workload__kind": "poisson"}, "serve.workload.kind"),
    ({"serve__workload__kind": "open", "serve__workload__rate_per_s": 0}, "serve.workload.rate_per_s"),
    ({"serve__workload__runs": 0}, "serve.workload.runs"),
    ({"serve__workload__clients": True}, "serve.workload.clients"),
    ({"serve__workload__rate": 1.0}, "serve.workload.rate"),
], ids=["open-without-rate", "trace-without-path", "cached-beyond-prompt", "unknown-kind", "zero-rate", "no-runs",
        "boolean-clients", "unknown-key"])
def test_scenario_validation_names_the_key(over, key):
    with pytest.raises(ScenarioError) as info:
        moe_scenario(**over)
    err = info.value
    assert err.source == "test" and err.path == key
    assert str(err).startswith(f"test: {key}: ") and "\n" not in str(err)


def test_trace_without_arrival_times_is_replayed_one_after_another(tmp_path):
    """An engine log's requests carry no arrival times: one client sends them in order."""
    t = read_trace(write(tmp_path, "prompt_tokens,cached_tokens,output_tokens,acceptance\n100,0,5,0.7\n200,150,6,\n"),
                   10)
    assert t.closed_loop and t.client.tolist() == [0, 0] and np.isnan(t.arrival_s).all()
    assert t.prompt_tokens.tolist() == [100, 200] and t.cached_tokens.tolist() == [0, 150]
    assert t.acceptance[0] == 0.7 and np.isnan(t.acceptance[1])


# --- lengths drawn from a table ---------------------------------------------------------------------------------

ARXIV = str(Path(__file__).resolve().parents[1] / "scenarios" / "traces" / "arxiv_summarization_lengths.csv")


def test_lengths_are_drawn_from_the_table_rows(tmp_path):
    path = write(tmp_path, "num_prefill_tokens,num_decode_tokens,pd_ratio\n100,10,10\n300,30,10\n")
    t = table(3, serve__requests=2000, serve__workload__kind="open", serve__workload__rate_per_s=1.0,
              serve__workload__lengths=path)
    pairs = set(zip(t.prompt_tokens.tolist(), t.output_tokens.tolist(), strict=True))
    assert pairs == {(100, 10), (300, 30)}  # whole rows, never a prompt of one row with the output of another
    assert (t.prompt_tokens == 300).mean() == pytest.approx(0.5, abs=0.05)
    assert_same(t, table(3, serve__requests=2000, serve__workload__kind="open", serve__workload__rate_per_s=1.0,
                         serve__workload__lengths=path))


def test_lengths_cap_shortens_the_prompt(tmp_path):
    path = write(tmp_path, "prompt_tokens,output_tokens\n4000,200\n50,5000\n10,10\n")
    t = table(1, serve__requests=300, serve__workload__lengths=path, serve__workload__lengths_max_tokens=1000)
    total = t.prompt_tokens + t.output_tokens
    assert total.max() <= 1000 and t.output_tokens.min() >= 1 and t.prompt_tokens.min() >= 0
    assert set(zip(t.prompt_tokens.tolist(), t.output_tokens.tolist(), strict=True)) == {(800, 200), (1, 999),
                                                                                           (10, 10)}


def test_the_arxiv_table_gives_the_reference_token_counts():
    """10,000 requests of the Vidur reference workload: 25.8M prefill and 2.9M decode tokens (traces README)."""
    t = table(0, serve__requests=10_000, serve__workload__kind="open", serve__workload__rate_per_s=1.0,
              serve__workload__lengths=ARXIV, serve__workload__lengths_max_tokens=4096)
    assert t.prompt_tokens.sum() / 1e6 == pytest.approx(25.8, abs=0.3)
    assert t.output_tokens.sum() / 1e6 == pytest.approx(2.9, abs=0.1)


def test_lengths_errors_name_their_key(tmp_path):
    with pytest.raises(ScenarioError, match="serve.workload.lengths: file not found"):
        table(serve__workload__lengths=str(tmp_path / "none.csv"))
    with pytest.raises(ScenarioError) as info:
        moe_scenario(serve__workload__kind="agent", serve__workload__lengths=ARXIV)
    assert info.value.path == "serve.workload.lengths"


def test_a_bad_cell_after_many_plain_rows_is_reported_at_once(tmp_path):
    """The plain-CSV fast path matches a row in one way only: a bad cell late in a long file does not send it
    backtracking through the rows before (it once took exponential time), and non-ASCII digits are not numbers."""
    import time

    path = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n" + "1000,12345,12345\n" * 2000 + "1000,6,x\n")
    start = time.perf_counter()
    with pytest.raises(ScenarioError, match=r"row 2002\.output_tokens: bad value 'x'"):
        read_trace(path, 10_000)
    assert time.perf_counter() - start < 5
    with pytest.raises(ScenarioError, match=r"row 3\.prompt_tokens"):
        read_trace(write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,1,2\n1,\u0663,4\n"), 10)
