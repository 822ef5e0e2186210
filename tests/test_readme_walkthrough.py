"""The README's first session runs as written: install (done: the suite runs installed), run, a what-if as a
difference, a sweep and its figure; each command succeeds and writes what the README says."""

import os
import re
import shlex

import pytest
from click.testing import CliRunner

from sim.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..")


def walkthrough() -> list[str]:
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = re.search(r"<!-- walkthrough -->\n```\n(.*?)```\n<!-- /walkthrough -->", readme, re.S)
    assert block, "README: the walkthrough block is missing"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_walkthrough_starts_by_installing_and_covers_run_compare_sweep_plot():
    lines = walkthrough()
    assert lines[0] == "pip install -e ."
    assert [shlex.split(line)[1] for line in lines[1:]] == ["run", "compare", "sweep", "plot"]


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A folder like a fresh checkout's: the shipped scenarios and calibrations, nothing written yet."""
    for name in ("scenarios", "calibration"):
        os.symlink(os.path.abspath(os.path.join(ROOT, name)), tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_walkthrough_command_runs(user_folder):
    outputs = {}
    for line in walkthrough()[1:]:
        args = shlex.split(line)
        assert args[0] == "sim"
        r = CliRunner().invoke(main, args[1:], catch_exceptions=False)
        assert r.exit_code == 0, f"{line}\n{r.output}"
        outputs[args[1]] = r.stdout
    assert "decode 134.5 tok/s" in outputs["run"] and "free 8.31 GiB" in outputs["run"]
    readme_prose = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "134.5 decode tok/s with 8.3 GiB of free VRAM" in readme_prose  # what the README says the run prints
    compare = outputs["compare"].splitlines()
    assert any(line.startswith("decode_tok_s") and "%" in line for line in compare)
    assert (user_folder / "runs" / "tenant" / "results.parquet").exists()
    assert (user_folder / "figures" / "figure.png").stat().st_size > 10_000
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for line in compare:  # the README quotes the comparison as it prints
        if line.startswith(("decode_tok_s ", "expert_hit_rate ", "energy_j_per_token ")):
            assert line in readme, line


def test_the_readme_what_if_table_is_what_sim_compare_prints(monkeypatch):
    """The what-if table under the default scenario is `sim compare --markdown` output, byte for byte."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    found = re.search(r"What-ifs on round 1 .*?```\n(S=.*?)\n(sim compare .*?)```\n\n(\| case .*?)\n\n", readme, re.S)
    assert found, "README: the what-if command and table are missing"
    variables = dict(part.split("=", 1) for part in found.group(1).split("; "))
    command = found.group(2).replace("\\\n", " ")
    for name, value in variables.items():  # the shell's expansion of $S and $G, in the order they were defined
        value = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], value)
        variables[name] = value
    command = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], command)
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(main, shlex.split(command)[1:], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.stdout == found.group(3) + "\n"
