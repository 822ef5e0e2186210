"""The shipped MoE calibrations are what `sim calibrate` writes: each file's header names the command that wrote it
(the docs give the same), and the current code, evaluated at the file's own values with the fit's common random
numbers, simulates every residual the file records. The full search (minutes) is
`benchmarks/reproduce_calibrations.py`."""

from __future__ import annotations

import os
import shlex

import numpy as np
import pytest
from conftest import CALIBRATION, ROOT
from docs_text import all_docs_text

from sim.calibration.calibrate import build_problem
from sim.calibration.covariance import jacobian, standard_errors
from sim.calibration.problem import Problem, held_sets
from sim.config.load import read_calibrate
from sim.config.yaml_io import read_yaml

FILES = ("strata_moe.yaml", "basalt_moe.yaml")


class OnceEach(Problem):
    """A problem that simulates each vector of free values once: the Jacobian starts at the file's own values, whose
    targets the residual check has just simulated (the same ``--set`` strings: the files keep 6 significant digits),
    so its first evaluation is the values already at hand (an evaluation runs every experiment: seconds each)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[tuple[str, ...], dict[str, float]] = {}

    def values(self, sets, targets=None):
        targets = self.targets if targets is None else targets
        known = self.seen.get(tuple(sets), {})
        if all(t.name in known for t in targets):
            return [known[t.name] for t in targets]
        out = super().values(sets, targets)
        self.seen.setdefault(tuple(sets), {}).update({t.name: v for t, v in zip(targets, out, strict=True)})
        return out


def header_command(name: str) -> list[str]:
    with open(os.path.join(CALIBRATION, name), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert lines[0].startswith("# Written by `sim calibrate`")
    return shlex.split(lines[1].removeprefix("#").strip())


def options(args: list[str]) -> dict[str, list[str]]:
    """``sim calibrate SCENARIO --flag value ...`` as {flag: values}, the scenario under "scenario"."""
    out: dict[str, list[str]] = {"scenario": [args[2]]}
    for flag, value in zip(args[3::2], args[4::2], strict=True):
        out.setdefault(flag, []).append(value)
    return out


@pytest.mark.parametrize("name", FILES)
def test_the_docs_give_the_command_that_wrote_each_calibration(name):
    args = header_command(name)
    assert args[:2] == ["sim", "calibrate"] and options(args)["--out"] == [f"calibration/{name}"]
    assert " ".join(args) in all_docs_text(), f"README.md and docs/ do not give the command that wrote {name}"


@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_each_shipped_calibration_is_what_the_code_simulates_at_its_values(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # the command's paths are from the project root
    opts = options(header_command(name))
    scenario, out = opts["scenario"][0], opts["--out"][0]
    seed = int(opts.get("--seed", ["0"])[0])
    cal_file = read_yaml(out)
    cal = read_calibrate(scenario)
    assert cal_file["fitted"] == list(cal.free) and set(cal_file["parameters"]) == set(cal.free) | set(cal.held)
    assert len(cal_file["log_cov"]) == len(cal.free)
    fixed = held_sets(cal)
    targets, obs = build_problem(scenario, cal, opts.get("--log", []), opts.get("--table", []))
    problem = OnceEach(scenario, targets, obs=obs, fixed=fixed, seed=seed, exclude=out)
    values = problem.values([f"{n}={cal_file['parameters'][n]!r}" for n in cal_file["fitted"]])
    recorded = {r["target"]: r for r in cal_file["residuals"]}
    assert set(recorded) == {t.name for t in targets}
    for t, v in zip(targets, values, strict=True):
        assert recorded[t.name]["simulated"] == pytest.approx(v, rel=1e-5, abs=1e-9), t.name
        assert recorded[t.name]["role"] == t.role
    # the standard errors are what the Jacobian at these values gives
    names = cal_file["fitted"]
    x = np.log([cal_file["parameters"][n] for n in names])
    lo, hi = (np.log([cal_file["bounds"][n][i] for n in names]) for i in (0, 1))
    r0, jac = jacobian(problem, names, x, hi)
    log_sd, _, warnings = standard_errors(problem, names, x=x, lo=lo, hi=hi, jac=jac, r=r0)
    for n, sd in zip(names, log_sd, strict=True):
        assert cal_file["log_sd"][n] == pytest.approx(float(sd), rel=1e-3), n
    assert set(warnings) <= set(cal_file["warnings"])
