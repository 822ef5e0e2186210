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
    assert "decode 133.7 tok/s" in outputs["run"] and "free 8.31 GiB" in outputs["run"]
    readme_prose = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "133.7 decode tok/s with 8.3 GiB of free VRAM" in readme_prose  # what the README says the run prints
    compare = outputs["compare"].splitlines()
    assert any(line.startswith("decode_tok_s") and "%" in line for line in compare)
    assert (user_folder / "runs" / "tenant" / "results.parquet").exists()
    assert (user_folder / "figures" / "figure.png").stat().st_size > 10_000
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for line in compare:  # the README quotes the comparison as it prints
        if line.startswith(("decode_tok_s ", "expert_hit_rate ", "energy_j_per_token ")):
            assert line in readme, line


def compare_tables() -> list[tuple[str, str, str]]:
    """(shell variables, command, table) of every `sim compare --markdown` table the README shows."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    return re.findall(r"```\n(S=[^\n]*)\n(sim compare .*?)```\n\n(\| case .*?)\n\n", readme, re.S)


def test_the_readme_shows_the_what_if_and_the_catalog_tables():
    commands = [command for _, command, _ in compare_tables()]
    assert len(commands) == 2 and any("type=rtx4090" in c for c in commands)


@pytest.mark.parametrize("block", range(2))
def test_the_readme_what_if_table_is_what_sim_compare_prints(monkeypatch, block):
    """The what-if tables (under the default scenario, and on other catalog cards) are `sim compare --markdown`
    output, byte for byte."""
    shell, command, table = compare_tables()[block]
    variables = dict(part.split("=", 1) for part in shell.split("; "))
    command = command.replace("\\\n", " ")
    for name, value in variables.items():  # the shell's expansion of $S and $G, in the order they were defined
        value = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], value)
        variables[name] = value
    command = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], command)
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(main, shlex.split(command)[1:], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.stdout == table + "\n"


def test_the_readme_shows_what_sim_run_prints_for_the_catalog_scenario(monkeypatch):
    """The README's block under the scenario written from catalog names and a config file is `sim run` output."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    found = re.search(r"`scenarios/rtx4090_qwen3_30b.yaml` is written that way.*?```\n(.*?)```\n", readme, re.S)
    assert found, "README: the catalog scenario's output is missing"
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(main, ["run", "scenarios/rtx4090_qwen3_30b.yaml"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    shown = found.group(1).splitlines()
    assert shown == r.stdout.splitlines()[2:2 + len(shown)]

