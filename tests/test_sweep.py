"""`sim sweep`: ranges and axes, resumable runs keyed by the resolved scenario, the same table on one worker, two
workers and a Dask cluster, Ctrl-C and kill -9 mid-sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import HOME_LAB, ROOT
from docs_text import all_docs_text
from hypothesis import given
from hypothesis import strategies as st

from sim import ScenarioError
from sim.cli import main
from sim.sweeps.backends import pool_backend, serial_backend
from sim.sweeps.keys import run_key
from sim.sweeps.run import Store, run_sweep
from sim.sweeps.spec import build_plan, expand_range, parse_values
from sim.sweeps.tasks import prepare_tasks

GEN3 = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
SWEEPS = os.path.join(ROOT, "scenarios", "sweeps")
ONE_JOB = 'jobs={"j": {"model": "9B", "tokens": 100, "resident_on": ["rtx4090_box"]}}'
FAST = ["serve.requests=12", "serve.output_tokens_min=20", "serve.output_tokens_max=40"]


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def gen3_plan(**kw):
    return build_plan(GEN3, ["machines.strata_box.gpus.gpu0.reserved_gib=0,8,16",
                             "machines.strata_box.engine.policy=static,lru"], kw.get("zip", False), kw.get("seeds"),
                      kw.get("uncertainty"), FAST)


# --- values and axes -------------------------------------------------------------------------------------------

def test_ranges():
    assert expand_range("16..48:4", "t", "k") == [16, 20, 24, 28, 32, 36, 40, 44, 48]
    assert expand_range("3..5", "t", "k") == [3, 4, 5]
    assert expand_range("1..32*2", "t", "k") == [1, 2, 4, 8, 16, 32]
    assert expand_range("0.1..0.5:0.1", "t", "k") == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert expand_range("0..10:4", "t", "k") == [0, 4, 8]  # the end only when the step lands on it
    assert expand_range("lru", "t", "k") is None
    assert parse_values("static,lru,1..3,null,[1, 2]", "t", "k") == ["static", "lru", 1, 2, 3, None, [1, 2]]


@pytest.mark.parametrize("text, words", [("5..1", "below the start"), ("1..5:0", "positive"),
                                         ("0..8*2", "A > 0"), ("1..1e9:1", "more than")])
def test_bad_ranges_are_one_line(text, words):
    with pytest.raises(ScenarioError, match=words):
        expand_range(text, "--axis", "x")


@given(start=st.integers(-1000, 1000), step=st.integers(1, 50), n=st.integers(0, 200))
def test_integer_ranges_hold_every_step(start, step, n):
    values = expand_range(f"{start}..{start + n * step}:{step}", "t", "k")
    assert values == list(range(start, start + n * step + 1, step))


@given(start=st.floats(-100, 100, allow_nan=False), step=st.floats(0.01, 10), n=st.integers(0, 60))
def test_float_ranges_land_on_their_end(start, step, n):
    start, step = round(start, 3), round(step, 3)
    if step <= 0:
        return
    values = expand_range(f"{start}..{start + n * step}:{step}", "t", "k")
    assert len(values) == n + 1
    assert values[0] == pytest.approx(start)
    assert values[-1] == pytest.approx(start + n * step)


def test_grid_zip_and_linked_axes(tmp_path):
    plan = gen3_plan()
    assert len(plan.points) == 6 and plan.points[1] == {"machines.strata_box.gpus.gpu0.reserved_gib": 0,
                                                         "machines.strata_box.engine.policy": "lru"}
    with pytest.raises(ScenarioError, match="equally many"):
        gen3_plan(zip=True)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"scenario: {GEN3}\naxes:\n  free:\n    values: 8..12:4\n"
                     "    set: {gpus.rtx5090.vram_gib: {plus: 5.808}}\n"
                     "    also: {machines.strata_box.gpus.gpu0.reserved_gib: 0}\n")
    plan = build_plan(str(sweep), [], False, None, None, [])
    assert plan.point_sets == [["machines.strata_box.gpus.gpu0.reserved_gib=0", "gpus.rtx5090.vram_gib=13.808"],
                               ["machines.strata_box.gpus.gpu0.reserved_gib=0", "gpus.rtx5090.vram_gib=17.808"]]
    tasks, _, _ = prepare_tasks(plan, 0)
    assert [round(t.scenario.gpus["rtx5090"].vram_gib, 3) for t in tasks] == [13.808, 17.808]


def test_bad_axis_values_name_the_axis():
    plan = build_plan(GEN3, ["machines.strata_box.engine.policy=static,fifo"], False, None, None, FAST)
    with pytest.raises(ScenarioError, match=r"\(--axis machines.strata_box.engine.policy=\"fifo\"\)"):
        prepare_tasks(plan, 0)


OUT = object()  # the --out folder: replaced by a temporary one (a marker no path can hold)


@pytest.mark.parametrize("args, words", [
    ([GEN3, "--out", OUT], "at least one --axis"),
    ([GEN3, "--axis", "serve.requests", "--out", OUT], "dotted.path=v1"),
    ([GEN3, "--axis", "serve.requests=5..1", "--out", OUT], "below the start"),
    ([GEN3, "--axis", "machines.strata_bx.engine.parallel=1,2", "--out", OUT], "did you mean"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, args, words):
    args = [str(tmp_path / "o") if a is OUT else a for a in args]
    r = invoke("sweep", *args, "--set", "serve.requests=5")
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1


# --- keys: what makes a stored row stale ------------------------------------------------------------------------

def test_keys_follow_the_resolved_scenario(tmp_path):
    from sim.config.load import load_scenario

    _, a = load_scenario(GEN3, FAST)
    _, same = load_scenario(GEN3, [*FAST, "description=another text"])
    _, other = load_scenario(GEN3, [*FAST, "machines.strata_box.engine.step.host_s=0.002"])
    assert run_key(a, 0) == run_key(same, 0)  # the description changes no result
    assert run_key(a, 0) != run_key(other, 0) and run_key(a, 0) != run_key(a, 1)
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,20\n")
    raw = {**a, "serve": {**a["serve"], "workload": {"kind": "trace", "trace": str(trace)}}}
    before = run_key(raw, 0)
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,210\n")
    assert run_key(raw, 0) != before  # the trace's contents, not its name


def test_keys_cover_every_file_a_scenario_reads(tmp_path):
    """Each field the schema marks as an input file (a trace, a table of lengths) is hashed by its contents: editing
    the file makes stored rows stale, renaming it alone does not."""
    from sim.config.files import input_file_fields
    from sim.config.load import load_scenario
    from sim.config.paths import get_dotted, set_dotted

    assert {"serve.workload.trace", "serve.workload.lengths", "models.*.file"} <= set(input_file_fields())
    _, base = load_scenario(GEN3, FAST)
    for pattern in input_file_fields():
        field = pattern  # a file under a named map (models.*.file): in the scenario's first entry of that map
        while "*" in field:
            head, _, rest = field.partition(".*")
            field = f"{head}.{next(iter(get_dotted(base, head)[1]))}{rest}"
        path = tmp_path / f"{field}.csv"
        path.write_text("prompt_tokens,output_tokens\n10,20\n")
        raw = json.loads(json.dumps(base))
        set_dotted(raw, field, str(path), "test")
        before = run_key(raw, 0)
        path.write_text("prompt_tokens,output_tokens\n10,200\n")
        edited = run_key(raw, 0)
        assert edited != before, field
        moved = tmp_path / f"moved-{field}.csv"
        path.rename(moved)
        set_dotted(raw, field, str(moved), "test")
        assert run_key(raw, 0) == edited, field


def test_a_changed_scenario_reuses_no_row(tmp_path):
    out = str(tmp_path / "o")
    first = run_sweep(build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000,2000"], False, None, None, []), out,
                      0, quiet=True)
    assert first.ran == 2
    changed = run_sweep(build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000,2000"], False, None, None,
                                   ["machines.mining_box.decode_tok_s.9B=100"]), out, 0, quiet=True)
    assert changed.ran == 2 and changed.reused == 0
    again = run_sweep(build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000,2000,3000"], False, None, None, []),
                      out, 0, quiet=True)
    assert again.ran == 1 and again.reused == 2


# --- resuming, backends ---------------------------------------------------------------------------------------

class Counting:
    def __init__(self):
        self.ran = 0

    def __call__(self, tasks):
        for item in serial_backend(tasks):
            self.ran += 1
            yield item


def _interrupt_after(n):
    def hook(saved):
        if saved >= n:
            raise KeyboardInterrupt
    return hook


def test_interrupted_sweep_resumes_without_recomputing(tmp_path):
    out = str(tmp_path / "o")
    part = run_sweep(gen3_plan(), out, 0, quiet=True, on_saved=_interrupt_after(2))
    assert not part.complete and len(part.rows) == 2
    manifest = json.loads((tmp_path / "o" / "sweep.json").read_text())
    assert manifest["complete"] is False and manifest["runs_done"] == 2
    assert len(pd.read_csv(tmp_path / "o" / "results.csv")) == 2
    counting = Counting()
    rest = run_sweep(gen3_plan(), out, 0, backend=counting, quiet=True)
    assert rest.complete and counting.ran == 4 and rest.reused == 2
    fresh = str(tmp_path / "fresh")
    run_sweep(gen3_plan(), fresh, 0, quiet=True)
    assert (tmp_path / "o" / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()


def test_a_torn_point_file_is_run_again(tmp_path):
    out = str(tmp_path / "o")
    res = run_sweep(gen3_plan(), out, 0, quiet=True)
    path = Store(out).path(res.tasks[3].key)
    with open(path, "w") as fh:
        fh.write('{"key": "')  # what a crash inside a non-atomic write would leave
    counting = Counting()
    again = run_sweep(gen3_plan(), out, 0, backend=counting, quiet=True)
    assert counting.ran == 1 and again.reused == 5


@pytest.mark.slow
def test_one_worker_two_workers_and_dask_give_identical_tables(tmp_path):
    distributed = pytest.importorskip("distributed")
    one = run_sweep(gen3_plan(seeds=2), str(tmp_path / "one"), 3, backend=serial_backend, quiet=True)
    two = run_sweep(gen3_plan(seeds=2), str(tmp_path / "two"), 3, backend=pool_backend(2), quiet=True)
    from sim.sweeps.backends import DaskBackend

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        dask = run_sweep(gen3_plan(seeds=2), str(tmp_path / "dask"), 3, backend=DaskBackend(c.scheduler_address),
                         quiet=True)
    assert one.ran == two.ran == dask.ran == 12
    csv = [(tmp_path / d / "results.csv").read_bytes() for d in ("one", "two", "dask")]
    assert csv[0] == csv[1] == csv[2]
    frames = [pd.read_parquet(tmp_path / d / "results.parquet") for d in ("one", "two", "dask")]
    pd.testing.assert_frame_equal(frames[0], frames[1])
    pd.testing.assert_frame_equal(frames[0], frames[2])
    assert sorted(set(frames[0]["seed"])) == [3, 4]


@pytest.mark.slow
def test_unreachable_dask_scheduler_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("sim.sweeps.backends.DASK_CONNECT_S", 1.0)  # refused at once; distributed retries till then
    r = invoke("sweep", HOME_LAB, "--axis", "jobs.long_with_load.tokens=1000", "--dask", "tcp://127.0.0.1:1",
               "--out", str(tmp_path / "o"), "--quiet")
    assert r.exit_code == 2 and "Dask scheduler" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _sweep_process(out, *extra):
    cmd = [sys.executable, "-m", "sim", "sweep", GEN3, "--axis", "machines.strata_box.gpus.gpu0.reserved_gib=0..14:2",
           "--set", "serve.requests=40", "--quiet", "--out", out, *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _saved(out):
    folder = os.path.join(out, "points")
    return len([f for f in os.listdir(folder) if f.endswith(".json") and not f.startswith(".")]) \
        if os.path.isdir(folder) else 0


def _wait_for_points(out, n, proc, timeout=90):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if _saved(out) >= n:
            return
        time.sleep(0.02)
    raise AssertionError("the sweep did not save points in time")


@pytest.mark.slow
@pytest.mark.parametrize("how, workers", [("SIGKILL", "1"), ("SIGINT", "1"), ("SIGTERM", "1"), ("SIGINT", "2")])
def test_killed_sweep_restarts_where_it_stopped(tmp_path, how, workers):
    out = str(tmp_path / "o")
    proc = _sweep_process(out, "--workers", workers)
    try:
        _wait_for_points(out, 2, proc)
        proc.send_signal(getattr(signal, how))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if how == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
    else:  # Ctrl-C or SIGTERM: what is done is saved, the tables hold it, one line says so
        assert proc.returncode == 130 and "interrupted" in err and "same command" in err, err
        manifest = json.loads(open(os.path.join(out, "sweep.json")).read())
        assert manifest["complete"] is False and manifest["runs_done"] == _saved(out)
    saved = _saved(out)
    again = subprocess.run(_sweep_process(out, "--workers", "1").args, cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"{8 - saved} simulated, {saved} from earlier runs" in again.stdout
    assert len(pd.read_csv(os.path.join(out, "results.csv"))) == 8


# --- contents --------------------------------------------------------------------------------------------------

def test_rows_hold_axes_seed_and_every_metric(tmp_path):
    res = run_sweep(gen3_plan(seeds=2), str(tmp_path / "o"), 5, quiet=True)
    frame = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert list(frame.columns[:5]) == ["point", "machines.strata_box.gpus.gpu0.reserved_gib",
                                       "machines.strata_box.engine.policy", "seed", "key"]
    assert len(frame) == 12 and {"decode_tok_s", "expert_hit_rate", "ttft_mean_s"} <= set(frame.columns)
    from sim.config.load import load_scenario
    from sim.runner import run

    t = res.tasks[7]
    direct = run(load_scenario(GEN3, [*FAST, *gen3_plan().point_sets[t.point]])[0], t.seed).metrics
    row = frame.iloc[7]
    assert all(row[k] == v for k, v in direct.items())  # a sweep row is the run itself, bit for bit


def test_points_that_cannot_run_are_rows_with_a_reason(tmp_path):
    plan = build_plan(HOME_LAB, ["gpus.rtx4090.vram_gib=24,4"], False, None, None,
                      ["gpus.mining_card.vram_gib=2", "machines.mac.unified_memory_gib=4", ONE_JOB])
    res = run_sweep(plan, str(tmp_path / "o"), 0, quiet=True)
    frame = pd.read_csv(tmp_path / "o" / "results.csv", keep_default_na=False)
    assert res.complete and res.errors == 1 and len(frame) == 2
    assert frame["error"][0] == "" and "needs 20.0 GiB" in frame["error"][1]
    r = invoke("sweep", HOME_LAB, "--axis", "gpus.rtx4090.vram_gib=24,4", "--set", "gpus.mining_card.vram_gib=2",
               "--set", "machines.mac.unified_memory_gib=4", "--set", ONE_JOB, "--out", str(tmp_path / "o"), "--quiet")
    assert r.exit_code == 0 and "1 run cannot be simulated" in r.stderr and "2 from earlier runs" in r.stdout


def test_uncertainty_draws_are_common_to_every_point(tmp_path):
    from sim.calibration.uncertainty import run_with_uncertainty

    plan = build_plan(HOME_LAB, ["jobs.long_with_load.tokens=5000,50000"], False, None, 6, [])
    run_sweep(plan, str(tmp_path / "o"), 0, quiet=True)
    frame = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert len(frame) == 12 and list(frame["draw"][:6]) == list(range(6)) and list(frame["seed"][:6]) == list(
        range(6))
    param = "param.machines.mining_box.decode_tok_s.9B"
    assert list(frame[param][:6]) == list(frame[param][6:]) and frame[param].nunique() == 6
    # a point of the sweep is `sim run --uncertainty N` of that point: the same draws and seeds, so the same median
    from sim.calibration.uncertainty import interval

    ref = run_with_uncertainty(HOME_LAB, ["jobs.long_with_load.tokens=50000"], 6, 0)
    col = "job.long_with_load.completed_s"
    assert interval(list(frame[col][6:])) == ref["metrics"][col]


def test_shipped_sweeps_parse_and_their_measured_points_resolve():
    from sim.sweeps.overlays import resolve_overlays

    docs = all_docs_text()
    names = sorted(f for f in os.listdir(SWEEPS) if f.endswith(".yaml"))
    assert len(names) >= 4
    for name in names:
        path = os.path.join(SWEEPS, name)
        plan = build_plan(path, [], False, None, None, [])
        assert plan.plot is not None and plan.measured
        assert resolve_overlays(plan.measured, path)
        assert f"sim sweep scenarios/sweeps/{name}" in docs  # one command in the docs per shipped sweep


# --- review: collisions, writers, seeds, failures, stale calibrations -------------------------------------------

def test_an_axis_named_like_a_metric_keeps_its_values(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"scenario: {GEN3}\naxes:\n  expert_slots:\n    values: [0, 8]\n"
                     "    set: machines.strata_box.gpus.gpu0.reserved_gib\n")
    run_sweep(build_plan(str(sweep), [], False, None, None, FAST), str(tmp_path / "o"), 0, quiet=True)
    frame = pd.read_csv(tmp_path / "o" / "results.csv")
    assert list(frame["expert_slots"]) == [0, 8] and frame["metric.expert_slots"][0] > frame["metric.expert_slots"][1]


@pytest.mark.parametrize("axes, sets, words", [
    (["seed=1,2"], [], "taken by a result column"),
    (["machines.strata_box.engine.policy=lru,lfu"], [], "already written by axis policy"),
    ([], ["machines.strata_box.engine.policy=lfu"], "swept by axis policy"),
])
def test_a_path_has_one_writer(axes, sets, words):
    with pytest.raises(ScenarioError, match=words):
        build_plan(os.path.join(SWEEPS, "cache_policy_coverage.yaml"), axes, False, None, None, sets)


def test_seeds_and_draws_get_their_own_seeds(tmp_path):
    plan = build_plan(HOME_LAB, ["jobs.long_with_load.tokens=5000,6000"], False, 2, 3, [])
    tasks, names, _ = prepare_tasks(plan, 10)
    seeds = [(t.point, t.seed, t.draw) for t in tasks]
    assert [s for p, s, d in seeds if p == 0] == [10, 12, 14, 11, 13, 15]  # seed + replicate + seeds x draw
    assert {s for p, s, d in seeds if p == 0} == {s for p, s, d in seeds if p == 1}
    assert len({t.key for t in tasks}) == len(tasks) and names


def test_a_changed_calibration_file_reuses_no_row(tmp_path):
    import shutil

    shutil.copytree(os.path.join(ROOT, "scenarios"), tmp_path / "scenarios", ignore=shutil.ignore_patterns("traces"))
    shutil.copytree(os.path.join(ROOT, "calibration"), tmp_path / "calibration")
    scenario = str(tmp_path / "scenarios" / "home_lab.yaml")
    plan = build_plan(scenario, ["jobs.long_with_load.tokens=1000,2000"], False, None, None, [])
    assert run_sweep(plan, str(tmp_path / "o"), 0, quiet=True).ran == 2
    cal = tmp_path / "calibration" / "loading.yaml"
    text = cal.read_text()
    cal.write_text(text.replace("efficiency: 0.84", "efficiency: 0.8"))
    assert text != cal.read_text()
    again = run_sweep(build_plan(scenario, ["jobs.long_with_load.tokens=1000,2000"], False, None, None, []),
                      str(tmp_path / "o"), 0, quiet=True)
    assert again.ran == 2 and again.reused == 0


def test_a_lost_worker_saves_what_is_done_and_says_so(tmp_path):
    from sim.sweeps.backends import BackendFailure

    def dies_after_two(tasks):
        for i, item in enumerate(serial_backend(tasks)):
            if i == 2:
                raise BackendFailure("a worker process died (test)")
            yield item

    with pytest.raises(BackendFailure, match="2 of 6 runs saved"):
        run_sweep(gen3_plan(), str(tmp_path / "o"), 0, backend=dies_after_two, quiet=True)
    manifest = json.loads((tmp_path / "o" / "sweep.json").read_text())
    assert manifest["runs_done"] == 2 and manifest["complete"] is False
    assert len(pd.read_csv(tmp_path / "o" / "results.csv")) == 2


@pytest.mark.parametrize("address, words", [("foo", "SCHEME://HOST:PORT"), ("http://127.0.0.1:8786", "SCHEME"),
                                            ("", "SCHEME://HOST:PORT")])
def test_bad_dask_addresses_are_one_line(tmp_path, address, words):
    pytest.importorskip("distributed")
    r = invoke("sweep", HOME_LAB, "--axis", "jobs.long_with_load.tokens=1000", "--dask", address, "--out",
               str(tmp_path / "o"), "--quiet")
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_progress_shows_runs_done_reused_and_rate_on_stderr_only(tmp_path, capsys):
    from sim.core.progress import set_enabled

    out = str(tmp_path / "o")
    run_sweep(build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000,2000"], False, None, None, []), out, 0,
              quiet=True)
    set_enabled(True)  # as on a terminal
    try:
        run_sweep(build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000,2000,3000"], False, None, None, []), out, 0,
                  quiet=True)
        assert capsys.readouterr() == ("", "")  # the sweep's own --quiet
        run_sweep(build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000..4000:1000"], False, None, None, []), out,
                  0)
    finally:
        set_enabled(None)
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and "sweep" in stderr and "4/4" in stderr and "3 from earlier runs" in stderr
    assert "run/s" in stderr


def test_mixed_axis_values_are_one_text_column_in_every_table(tmp_path):
    plan = build_plan(HOME_LAB, ["machines.mining_box.busy_until_s=0,5", "machines.rtx4090_box.note=x,1"], False,
                      None, None, [])
    part = run_sweep(plan, str(tmp_path / "o"), 0, quiet=True, on_saved=_interrupt_after(1))
    assert not part.complete
    first = pd.read_parquet(tmp_path / "o" / "results.parquet")
    run_sweep(plan, str(tmp_path / "o"), 0, quiet=True)
    final = pd.read_parquet(tmp_path / "o" / "results.parquet")
    col = "machines.rtx4090_box.note"
    assert first[col].dtype == final[col].dtype and pd.api.types.is_string_dtype(final[col])
    assert list(final["machines.rtx4090_box.note"]) == ['"x"', "1", '"x"', "1"]  # "1" and 1 never look alike
    assert list(final["machines.mining_box.busy_until_s"]) == [0, 0, 5, 5]
