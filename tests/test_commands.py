"""Commands follow one set of conventions: --version, the scenario an argument, --out a folder (-o its alias) with
fixed file names inside, options named as what they are; every table written has its header, rows or not."""

import csv
import os

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import CALIBRATION, HOME_LAB

from sim.cli import main

GEN3 = "scenarios/gen3_5090.yaml"


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_version():
    from importlib.metadata import version

    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"sim {version('sim')}"


def test_every_command_that_writes_has_out_with_o_as_its_alias():
    for name, command in main.commands.items():
        opts = {o for p in command.params for o in p.opts}
        if "--out" in opts:
            assert "-o" in opts, name


@pytest.mark.parametrize("args", [["run", HOME_LAB], ["compare", HOME_LAB, "--set", "seed=1"],
                                  ["sweep", HOME_LAB, "--axis", "seed=1,2"],
                                  ["breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_box", "--machine",
                                   "rtx4090_box"]])
def test_out_is_a_folder_and_a_file_name_is_refused(args, tmp_path):
    r = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "result.json")])
    assert r.exit_code == 2 and "looks like a file name: expected a folder" in r.stderr
    assert not (tmp_path / "result.json").exists()  # refused before anything ran


def test_tables_with_no_rows_still_have_their_header(tmp_path):
    """A serving scenario has no jobs and no loads: those tables are a header, which pandas reads as empty."""
    out = tmp_path / "o"
    assert invoke("run", GEN3, "--set", "serve.requests=5", "-o", str(out)).exit_code == 0
    for name in ("jobs", "estimates", "loads", "load_stages"):
        path = out / f"{name}.csv"
        assert path.stat().st_size > 0, name
        frame = pd.read_csv(path)
        assert frame.empty and len(frame.columns) >= 5, name


def test_declared_columns_are_the_columns_of_a_full_table(tmp_path):
    """The home lab fills every dispatch table: the columns written with rows are those written without."""
    full, empty = tmp_path / "full", tmp_path / "empty"
    assert invoke("run", HOME_LAB, "-o", str(full)).exit_code == 0
    assert invoke("run", GEN3, "--set", "serve.requests=5", "-o", str(empty)).exit_code == 0
    for name in ("jobs", "estimates", "loads", "load_stages", "links"):
        with open(full / f"{name}.csv") as a, open(empty / f"{name}.csv") as b:
            assert next(csv.reader(a)) == next(csv.reader(b)), name
        assert len(pd.read_csv(full / f"{name}.csv")) > 0


def test_api_tables_with_no_rows_have_their_columns():
    """The Python API's frames of empty tables have the CSV's columns."""
    import sim

    run = sim.load(GEN3).set({"serve.requests": 3}).run(seed=0)
    assert list(run.tables()["jobs"].columns)[:2] == ["id", "model"]  # an empty frame with its columns
    assert list(run.jobs.columns) == list(run.tables()["jobs"].columns)


def test_breakeven_takes_two_machines_by_name():
    new = invoke("breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_box", "--machine", "rtx4090_box",
                 "--json")
    old = invoke("breakeven", HOME_LAB, "--model", "9B", "--a", "mining_box", "--b", "rtx4090_box", "--json")
    assert new.exit_code == 0 and new.stdout == old.stdout  # the earlier spelling still reads the same
    r = CliRunner().invoke(main, ["breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_box"])
    assert r.exit_code == 2 and "give --machine twice" in r.output


def test_fit_loading_out_is_a_folder(tmp_path):
    tables = ["--table", os.path.join(CALIBRATION, "loading_stages.csv"),
              "--table", os.path.join(CALIBRATION, "loading_mac_sample.csv")]
    r = invoke("fit-loading", HOME_LAB, *tables, "-o", str(tmp_path / "cal"))
    assert r.exit_code == 0 and (tmp_path / "cal" / "loading.yaml").exists()
    r = CliRunner().invoke(main, ["fit-loading", HOME_LAB, *tables, "--out", str(tmp_path / "x.txt")])
    assert r.exit_code == 2 and "a folder to write loading.yaml into" in r.output


@pytest.mark.parametrize("name", ["run", "breakeven", "compare", "sweep", "calibrate", "fit-loading", "validate"])
def test_the_scenario_is_an_argument(name):
    command = main.commands[name]
    first = command.params[0]
    assert first.param_type_name == "argument" and first.name in ("scenario", "target"), name


def test_every_problem_of_a_file_is_a_line_of_its_own(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodels:\n  m: {weights_gib: 5, tensorz: 3}\n  n: {weights_gib: -1}\n"
                   "machines: {}\nfoo: 1\n")
    r = CliRunner().invoke(main, ["run", str(bad)])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 3 and all(line.startswith(f"sim: error: {bad}: ") for line in lines)
    assert "models.m.tensorz: unknown key; did you mean 'tensors'?" in lines[0]
    assert "models.n.weights_gib: bad value -1" in lines[1] and "foo: unknown key" in lines[2]


def test_an_implausible_value_warns_and_the_run_goes_on():
    r = CliRunner().invoke(main, ["run", HOME_LAB, "--set", "acknowledged_warnings={}", "--json"])
    assert r.exit_code == 0 and r.stdout.startswith("{")
    assert "sim: warning: " in r.stderr and "above the memory roofline" in r.stderr
    quiet = CliRunner().invoke(main, ["run", HOME_LAB, "--json"])
    assert quiet.stderr == "" and quiet.stdout == r.stdout  # a warning changes nothing of the run
