"""One progress display (sim.core.progress): a bar on stderr only when enabled (or stderr is a terminal), never
anything on stdout; and interrupted calibrations and uncertainty runs that keep what they finished."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import HOME_LAB, ROOT
from test_calibrate import ENGINE, table_scenario, tables  # noqa: F401 (tables: a fixture)

from sim.core import progress as progress_module
from sim.core.progress import progress, set_enabled


@pytest.fixture(autouse=True)
def automatic():
    """Every test starts and ends with the default (automatic) display and no bar open."""
    set_enabled(None)
    yield
    set_enabled(None)
    assert progress_module._open == 0


def _count(n: int, **kw) -> None:
    with progress(n, "work", unit="sim", **kw) as bar:
        for _ in range(n):
            bar.update()
        bar.set_postfix_str("best 0.5")


# --- the display -------------------------------------------------------------------------------------------------

def test_enabled_bar_goes_to_stderr_only(capsys):
    set_enabled(True)
    _count(3)
    out, err = capsys.readouterr()
    assert out == "" and "work" in err and "3/3" in err and "best 0.5" in err


def test_disabled_and_quiet_show_nothing(capsys):
    set_enabled(False)
    _count(3)
    set_enabled(True)
    _count(3, disable=True)  # a caller's own --quiet
    assert capsys.readouterr() == ("", "")


def test_automatic_follows_whether_stderr_is_a_terminal(capsys, monkeypatch):
    _count(3)  # pytest's captured stderr is no terminal
    assert capsys.readouterr() == ("", "")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    _count(3)
    assert "3/3" in term.getvalue()


def test_a_bar_inside_a_bar_is_not_shown(capsys):
    set_enabled(True)
    with progress(2, "outer", unit="draw") as outer:
        assert not progress(5, "inner").shown
        outer.update(2)
    assert progress_module._open == 0
    _, err = capsys.readouterr()
    assert "outer" in err and "inner" not in err


def test_reused_runs_count_toward_the_total_not_the_rate(capsys):
    set_enabled(True)
    with progress(10, "sweep", initial=4) as bar:
        bar.set_postfix_str("4 from earlier runs")
        bar.update(3)
    err = capsys.readouterr().err
    assert "7/10" in err and "4 from earlier runs" in err


def test_off_costs_no_import_and_next_to_no_time():
    code = ("import sys, time\nfrom sim.core.progress import progress, set_enabled\nset_enabled(False)\n"
            "t = time.perf_counter()\nfor _ in range(1000):\n    with progress(100, 'x') as bar:\n"
            "        for _ in range(100):\n            bar.update()\n"
            "print(time.perf_counter() - t, 'tqdm' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    seconds, imported = r.stdout.split()
    assert imported == "False" and float(seconds) < 0.5  # 100,000 updates: about 10 ms


def test_commands_print_the_same_stdout_with_a_bar(monkeypatch):
    from sim.cli import main

    args = ["run", HOME_LAB, "--uncertainty", "2", "--json"]
    quiet = CliRunner().invoke(main, args, catch_exceptions=False)  # automatic: the runner's stderr is no terminal
    monkeypatch.setattr(progress_module, "is_enabled", lambda: True)  # as if it were (the command resets the switch)
    shown = CliRunner().invoke(main, args, catch_exceptions=False)
    assert quiet.exit_code == shown.exit_code == 0
    assert shown.stdout == quiet.stdout and json.loads(shown.stdout)["draws"] == 2
    assert quiet.stderr == "" and "uncertainty" in shown.stderr and "2/2" in shown.stderr


def test_validate_counts_the_same_simulations(capsys):
    from sim.calibration.targets import TargetBuilder, run_experiments
    from sim.calibration.validate import SEED, _run_experiments
    from sim.config.load import load_scenario

    path = f"{ROOT}/scenarios/gen3_5090_concurrency.yaml"
    cal = load_scenario(path)[0].calibrate
    targets = [t for name in cal.tables for t in TargetBuilder(path, cal, path).table(f"{ROOT}/calibration/{name}")]
    targets = targets[:4]
    set_enabled(True)
    counted = _run_experiments(targets, "validate test")
    assert counted.results.keys() == run_experiments(targets, [], SEED, None).results.keys()
    assert f"{len(counted.results)}/{len(counted.results)}" in capsys.readouterr().err


# --- interrupted runs keep what they finished -------------------------------------------------------------------

def _interrupt_calls(monkeypatch, owner, name: str, at: set[int]) -> list[int]:
    """``owner.name`` raises KeyboardInterrupt on its calls numbered in ``at`` (1-based), else runs as it is."""
    real = getattr(owner, name)
    calls = [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] in at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)
    return calls


def _fit(folder, paths):
    from sim.calibration.calibrate import calibrate

    return calibrate(table_scenario(folder, 1e-3), [], paths, seed=7, max_evals=8, starts=3)


def test_an_interrupted_calibration_keeps_its_best_point(tables, monkeypatch):  # noqa: F811
    from sim.calibration.files import calibration_yaml, report_markdown
    from sim.calibration.problem import Problem, soft_l1

    folder, _, paths = tables
    seen: list[tuple[list[str], float]] = []
    real = Problem.residuals

    def residuals(self, sets):
        r = real(self, sets)
        seen.append((sets, soft_l1(r)))
        return r

    monkeypatch.setattr(Problem, "residuals", residuals)
    _interrupt_calls(monkeypatch, Problem, "values", {6})  # the sixth simulation: in the Nelder-Mead steps
    res = _fit(folder, paths)
    searched = seen[:5]
    best_sets, best_cost = min(searched, key=lambda s: s[1])
    assert res.interrupted and res.stopped_in == "stage 1 of 1"
    assert res.parameters == {ENGINE + "step.dense_s": float(best_sets[0].split("=")[1])}
    assert res.cost == round(best_cost, 6)
    # complete but for convergence: the check cell simulated once there, the Jacobian (2 more), standard errors
    assert res.evaluations == 5 + 1 + 2
    assert {r["role"] for r in res.residuals} == {"fit", "check"}
    assert all(math.isfinite(r["simulated"]) for r in res.residuals)
    assert all(math.isfinite(v) for v in res.log_sd.values())
    assert res.warnings[0].startswith("interrupted in stage 1 of 1 after 5 simulations: not converged")
    # the same point, uninterrupted, gives the same residuals
    from sim.calibration.calibrate import calibrate

    monkeypatch.undo()
    point = calibrate(table_scenario(folder, 1e-3, {"free": {ENGINE + "step.dense_s": {
        "lo": 1e-4, "hi": 0.1, "start": res.parameters[ENGINE + "step.dense_s"], "unit": "s"}}}), [], paths, seed=7,
        max_evals=0, starts=0)
    assert point.residuals == res.residuals and point.log_sd == res.log_sd and not point.interrupted
    assert "interrupted in stage 1 of 1" in calibration_yaml(res, "sim calibrate ...")
    assert "interrupted in stage 1 of 1" in report_markdown(res, "sim calibrate ...", None)


def test_a_second_interrupt_skips_what_is_left(tables, monkeypatch):  # noqa: F811
    from sim.calibration.problem import Problem

    folder, _, paths = tables
    _interrupt_calls(monkeypatch, Problem, "values", {6, 7})  # the search, then the check cell at the best point
    res = _fit(folder, paths)
    assert res.interrupted and res.evaluations == 5
    assert all(math.isinf(v) for v in res.log_sd.values())
    rows = {r["role"]: r for r in res.residuals}
    assert math.isfinite(rows["fit"]["simulated"]) and math.isnan(rows["check"]["simulated"])
    assert any(w.startswith("interrupted again: no standard errors") for w in res.warnings)


def test_an_interrupt_before_anything_was_simulated_propagates(tables, monkeypatch):  # noqa: F811
    from sim.calibration.problem import Problem

    folder, _, paths = tables
    _interrupt_calls(monkeypatch, Problem, "values", {1})
    with pytest.raises(KeyboardInterrupt):
        _fit(folder, paths)


def test_an_interrupted_uncertainty_run_summarises_the_draws_done(monkeypatch):
    import sim.runner
    from sim.calibration.uncertainty import interval, parameter_draws, run_with_uncertainty
    from sim.config.load import load_scenario

    _interrupt_calls(monkeypatch, sim.runner, "run", {4})
    res = run_with_uncertainty(HOME_LAB, [], 6, 3)
    assert res["draws"] == 6 and res["draws_done"] == 3 and res["interrupted"] is True
    monkeypatch.undo()
    _, _, sets = parameter_draws(HOME_LAB, [], 6, 3)
    runs = [sim.runner.run(load_scenario(HOME_LAB, s)[0], 3 + k).metrics for k, s in enumerate(sets[:3])]
    assert res["metrics"] == {key: interval([r[key] for r in runs]) for key in runs[0]}
    whole = run_with_uncertainty(HOME_LAB, [], 3, 3)
    assert "interrupted" not in whole and "draws_done" not in whole  # an uninterrupted result is as it was
    _interrupt_calls(monkeypatch, sim.runner, "run", {1})
    with pytest.raises(KeyboardInterrupt):
        run_with_uncertainty(HOME_LAB, [], 6, 3)


def test_an_interrupted_breakeven_uncertainty_summarises_the_draws_done(monkeypatch):
    import sim.lab.breakeven
    from sim.calibration.uncertainty import breakeven_with_uncertainty, interval, parameter_draws
    from sim.config.load import load_scenario

    kw = {"model": "9B", "a": "mining_box", "b": "rtx4090_box", "seed": 0}
    _interrupt_calls(monkeypatch, sim.lab.breakeven, "breakeven", {4})  # the first call is at the scenario's values
    res = breakeven_with_uncertainty(HOME_LAB, [], draws=5, **kw)
    assert res["draws"] == 5 and res["draws_done"] == 2 and res["interrupted"] is True
    monkeypatch.undo()
    _, _, sets = parameter_draws(HOME_LAB, [], 5, 0)
    done = [sim.lab.breakeven.breakeven(load_scenario(HOME_LAB, s)[0], "9B", "mining_box", "rtx4090_box", k)
            for k, s in enumerate(sets[:2])]
    cross = [d["breakeven_tokens"] for d in done]
    assert res["breakeven_tokens"] == interval(cross) | {"never_share": float(np.mean(np.isinf(cross)))}
    assert sum(res["faster_decoder_share"].values()) == pytest.approx(1.0)


# --- the commands: what an interrupted run writes and how it exits ------------------------------------------------

def test_an_interrupted_calibrate_writes_its_best_values_and_exits_130(tables, monkeypatch, tmp_path):  # noqa: F811
    from sim.calibration.problem import Problem
    from sim.cli import main

    folder, _, paths = tables
    _interrupt_calls(monkeypatch, Problem, "values", {6})
    out = tmp_path / "cal"
    args = ["calibrate", table_scenario(folder, 1e-3), *(a for p in paths for a in ("--table", p)), "--seed", "7",
            "--max-evals", "8", "--starts", "3", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 130 and "interrupted in stage 1 of 1" in r.stderr
    (written,) = out.glob("*.yaml")
    lines = written.read_text().splitlines()
    assert lines[2].startswith("# INTERRUPTED in stage 1 of 1: not converged")
    assert (out / (written.stem + "_report.md")).exists() and (out / (written.stem + "_plot.png")).exists()


def test_an_interrupted_uncertainty_run_saves_its_summary_and_exits_130(monkeypatch, tmp_path):
    import sim.runner
    from sim.cli import main

    _interrupt_calls(monkeypatch, sim.runner, "run", {5})
    r = CliRunner().invoke(main, ["run", HOME_LAB, "--uncertainty", "6", "--out", str(tmp_path / "u")])
    assert r.exit_code == 130 and "draws done" in r.stderr
    saved = json.loads((tmp_path / "u" / "uncertainty.json").read_text())
    assert saved["interrupted"] is True and 0 < saved["draws_done"] < 6
    assert "(interrupted)" in r.stdout
