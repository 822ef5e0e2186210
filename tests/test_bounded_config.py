"""Scenario files, ``--set``, ``--vs``, ``--axis``, sweep files, ``sim catalog`` and stdout under the rules of issue
31: bad input is one ``sim: error:`` line with exit 2 (never 70), within 5 s and 200 MiB; an error names what the
user wrote (``--axis NAME``, a sweep file's key), never a ``--set`` not given; a reader of stdout that went away ends
the command quietly. Each CLI reproducer runs once in a bounded child (``tests/bounded.py``); its variants run in
this process with click's CliRunner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounded import ROOT, Outcome, run_bounded
from click.testing import CliRunner

from sim.cli import main
from sim.core.errors import ScenarioError

SECONDS = 5.0  # wall time allowed a refusal (s)
PEAK_MIB = 200.0  # peak resident memory allowed a refusal (MiB)
MAX_LINE = 600  # characters of an error line, at most
HOME_LAB = os.path.join(ROOT, "scenarios", "home_lab.yaml")
GEN3 = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
AZURE = os.path.join(ROOT, "scenarios", "azure_conv_5090.yaml")
DIGITS = "1" * 5000  # an integer Python refuses to convert from text (more than 4,300 digits)


def _refused(out: Outcome, *words: str) -> str:
    """``out`` is exit 2 with one short ``sim: error:`` line holding every one of ``words``, within the bounds."""
    return out.assert_refused(*words, seconds=SECONDS, peak_mib=PEAK_MIB, max_line=MAX_LINE)


def _bounded(*args: str) -> Outcome:
    return run_bounded(list(args), timeout_s=30, memory_mib=2048)


def _cli(*args: str) -> tuple[int, str]:
    """(exit code, stderr) of ``sim ARGS`` in this process."""
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stderr


def _one_line(code: int, stderr: str, *words: str) -> str:
    line = stderr.strip()
    assert code == 2 and len(line.splitlines()) == 1 and line.startswith("sim: error: "), (code, stderr[:400])
    assert len(line) <= MAX_LINE and all(w in line for w in words), line[:400]
    assert "internal error" not in line and "Traceback" not in line, line[:400]
    return line


def _home_lab(tmp_path: Path, old: str = "", new: str = "", name: str = "s.yaml") -> str:
    """A copy of home_lab.yaml in ``tmp_path`` (its calibration file named by absolute path), ``old`` replaced."""
    text = Path(HOME_LAB).read_text(encoding="utf-8").replace("calibrations: [../", f"calibrations: [{ROOT}/")
    if old:
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- 1. an integer of 5,000 digits ---------------------------------------------------------------------------------

def test_huge_integer_in_a_scenario_file(tmp_path: Path) -> None:
    path = _home_lab(tmp_path, "name: home_lab", f"name: home_lab\nseed: {DIGITS}")
    _refused(_bounded("run", path), path, "line 4 column 7", "out of range", "5,000 characters")


def test_huge_integer_on_the_command_line(tmp_path: Path) -> None:
    _refused(_bounded("run", HOME_LAB, "--set", f"seed={DIGITS}"), "--set", "out of range")
    _one_line(*_cli("compare", HOME_LAB, "--vs", f"x:seed={DIGITS}"), "--vs", "out of range")
    _one_line(*_cli("sweep", GEN3, "--axis", f"serve.requests={DIGITS}", "--out", str(tmp_path / "o")),
              "--axis", "serve.requests", "out of range")
    _one_line(*_cli("sweep", GEN3, "--axis", f"serve.requests=1,{DIGITS}", "--out", str(tmp_path / "o")),
              "--axis", "out of range")
    for value in (f"0x{'f' * 5000}", f"-{DIGITS}", f"{DIGITS}.0", "1e400", "1" + "0" * 309, "[1, 1e999]"):
        _one_line(*_cli("run", HOME_LAB, "--set", f"seed={value}"), "--set", "out of range")


def test_numbers_beyond_a_float_in_ranges(tmp_path: Path) -> None:
    """A range whose ends or step a float cannot hold (once an exit 70: 'cannot convert float infinity')."""
    for axis in (f"serve.requests=1..{DIGITS}", "serve.requests=1..1e400", "serve.requests=1e400..1e401",
                 "serve.requests=-1e308..1e308:1e307", "serve.requests=1..10*1e400", f"serve.requests=1..2:{DIGITS}"):
        _one_line(*_cli("sweep", GEN3, "--axis", axis, "--out", str(tmp_path / "o")), "--axis", "serve.requests")
    from sim.sweeps.spec import expand_range

    values = expand_range("1e-308..1e308*2", "--axis", "x")  # a * 2 ** i overflowed at i = 1024
    assert values is not None and len(values) == 2047 and values[0] == 1e-308 and values[-1] <= 1e308
    with pytest.raises(ScenarioError, match="more than 10..15 values"):
        expand_range("0..1e308:1e-308", "--axis", "x")


def test_a_huge_option_value_is_a_short_line() -> None:
    """click's own usage error quoted a 5,000-digit --seed whole: a 5,000-character line."""
    _refused(_bounded("run", HOME_LAB, "--seed", DIGITS), "--seed")


# --- 2. YAML tags whose value cannot be built ---------------------------------------------------------------------

def test_float_tag_on_text(tmp_path: Path) -> None:
    path = _home_lab(tmp_path, "name: home_lab", "name: !!float abc")
    _refused(_bounded("run", path), path, "line 3 column 7", "'abc' cannot be read as a number (!!float)")


@pytest.mark.parametrize("value, words", [
    ("!!int abc", "cannot be read as an integer"),
    ("!!int 1.5", "cannot be read as an integer"),
    ("!!int ''", "cannot be read as an integer"),
    ("!!float ''", "cannot be read as a number"),
    ("!!bool abc", "cannot be read as true or false"),
    ("!!null abc", "cannot be read as null"),
    ("!!timestamp abc", "timestamp"),
    ("!!timestamp 2001-13-45", "month must be in 1..12"),
    ("2001-02-30", "day is out of range"),  # a date by YAML's rules, implicitly
    ("2001-12-14t21:59:43.10-99:00", "cannot be read as a date"),
    ("!!binary aGVsbG8=", "!!binary is not read"),  # would be bytes, taken as the text 'hello'
    ("!!binary '@@@'", "!!binary is not read"),  # would be b'', silently
    ("!!set {a, b}", "!!set is not read"),
    ("!!omap [a: 1]", "!!omap is not read"),
    ("!!pairs [a: 1]", "!!pairs is not read"),
    ("!!python/object:os.system x", "unknown tag"),
    ("!foo x", "unknown tag '!foo'"),
    ("[1, !!float x]", "cannot be read as a number"),
    ("{a: !!int x}", "cannot be read as an integer"),
    ("1e400", "out of range"),
    (DIGITS, "out of range"),
    (f"0b{'1' * 20000}", "out of range"),
])
def test_yaml_values_that_cannot_be_built(tmp_path: Path, value: str, words: str) -> None:
    from sim.config.yaml_io import read_yaml

    path = tmp_path / "tagged.yaml"
    path.write_text(f"name: x\ndescription: {value}\n", encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        read_yaml(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}: line 2 column ") and words in text and "\n" not in text, text
    assert len(text) <= MAX_LINE, text


def test_plain_values_still_read(tmp_path: Path) -> None:
    """What stays as it was: YAML 1.2 numbers, .inf, dates, tags that give plain data."""
    import datetime

    from sim.config.yaml_io import parse_scalar, read_yaml

    path = tmp_path / "plain.yaml"
    path.write_text("a: !!float 5\nb: !!str 5\nc: .inf\nd: 2001-12-14\ne: !!null\nf: 1e308\ng: 0x10\nh: "
                    + "9" * 308 + "\n", encoding="utf-8")
    data = read_yaml(str(path))
    assert data == {"a": 5.0, "b": "5", "c": float("inf"), "d": datetime.date(2001, 12, 14), "e": None,
                    "f": 1e308, "g": 16, "h": int("9" * 308)}
    assert parse_scalar("[1, 2") == "[1, 2" and parse_scalar("a: b: c") == "a: b: c"  # not YAML: the text


def test_a_set_value_nested_too_deep_is_refused() -> None:
    """A --set value past the nesting limit was taken as text silently; now it is refused as a file's would be."""
    _one_line(*_cli("run", HOME_LAB, "--set", "description=" + "[" * 100 + "]" * 100), "--set",
              "nesting deeper than 64 levels")


# --- 3. a NUL byte in a path a scenario names ---------------------------------------------------------------------

def test_nul_byte_in_a_calibration_path(tmp_path: Path) -> None:
    path = _home_lab(tmp_path, f"calibrations: [{ROOT}/calibration/loading.yaml]", 'calibrations: ["a\\0b.yaml"]')
    _refused(_bounded("run", path), path, "calibrations.0", "a\\x00b.yaml", "NUL byte")


def test_every_input_file_is_checked_on_loading(tmp_path: Path) -> None:
    """A trace, a lengths table, a model file named with a NUL byte, a FIFO, a device or a folder: one line naming
    the scenario's key (a FIFO is never opened, so nothing waits)."""
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for value, words in (('"a\\0b.csv"', "NUL byte"), (str(fifo), "a FIFO"), ("/dev/zero", "a character device"),
                         (str(tmp_path), "is a directory"), (str(tmp_path / "none.csv"), "file not found")):
        _one_line(*_cli("run", AZURE, "--set", f"serve.workload.trace={value}"), "serve.workload.trace", words)
    scenario = tmp_path / "azure.yaml"
    text = Path(AZURE).read_text(encoding="utf-8").replace("calibrations: [../", f"calibrations: [{ROOT}/")
    scenario.write_text(text.replace("trace: traces/azure2023_conv.csv", 'trace: "traces/a\\0b.csv"'))
    _one_line(*_cli("run", str(scenario)), str(scenario), "serve.workload.trace", "NUL byte")
    scenario.write_text(text.replace("trace: traces/azure2023_conv.csv", f"trace: {fifo}"))
    _one_line(*_cli("run", str(scenario)), "serve.workload.trace", "a FIFO")
    for key in ("models.9B.file", "calibrations.0"):
        value = '"m\\0.json"' if key.endswith("file") else '"c\\0.yaml"'
        _one_line(*_cli("run", HOME_LAB, "--set", f"{key}={value}"), "NUL byte")


# --- 4. sim catalog with a long name -------------------------------------------------------------------------------

def test_catalog_long_name_is_a_short_line() -> None:
    line = _refused(_bounded("catalog", "x" * 10_000), "catalog: no entry", "...")
    assert len(line) < 200
    _one_line(*_cli("catalog", "rtx\n4090x"), "rtx\\n4090x")  # a newline in the name stays one line


# --- 5. errors of --axis and sweep files name them -----------------------------------------------------------------

def test_axis_errors_name_the_axis(tmp_path: Path) -> None:
    line = _refused(_bounded("sweep", GEN3, "--axis", "serve.requests=-1", "--out", str(tmp_path / "o")),
                    "(--axis serve.requests=-1)", "serve.requests: bad value -1")
    assert "--set" not in line
    line = _one_line(*_cli("sweep", GEN3, "--axis", "serve.requests=2", "--set", "serve.prompt_tokens=-1",
                           "--out", str(tmp_path / "o")), "(--set serve.prompt_tokens=-1)")  # a --set is a --set
    line = _one_line(*_cli("compare", HOME_LAB, "--vs", "x: seed=-1"), "(--vs x: seed=-1)")
    assert "--set" not in line


def _sweep_file(tmp_path: Path, **replace: str) -> str:
    text = Path(ROOT, "scenarios", "sweeps", "gen3_5090_pcie_vram.yaml").read_text(encoding="utf-8")
    text = text.replace("scenario: ../gen3_5090.yaml", f"scenario: {GEN3}").replace("table: ../../", f"table: {ROOT}/")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_sweep_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    out = str(tmp_path / "o")
    sweep = _sweep_file(tmp_path, **{"values: [3, 4, 5]": "values: [3, 7]"})
    line = _one_line(*_cli("sweep", sweep, "--out", out), f"({sweep} axes.pcie_gen=7)",
                     "machines.strata_box.gpus.gpu0.slot_gen: bad value 7")
    assert "--set" not in line
    sweep = _sweep_file(tmp_path, **{"reserved_gib: 0": "reserved_gib: -5"})
    _one_line(*_cli("sweep", sweep, "--out", out), f"({sweep} set.machines.strata_box.gpus.gpu0.reserved_gib=-5)")
    sweep = _sweep_file(tmp_path)
    _one_line(*_cli("sweep", sweep, "--axis", "pcie_gen=9", "--out", out), "(--axis pcie_gen=9)")  # new values
    _one_line(*_cli("sweep", sweep, "--axis", "free_vram=-100", "--out", out), "(--axis free_vram=-100)",
              "gpus.rtx5090.vram_gib: bad value -94.192")  # through the axis' affine map
    sweep = _sweep_file(tmp_path, **{"values: [3, 4, 5]": f"values: [3, {DIGITS}]"})
    _one_line(*_cli("sweep", sweep, "--out", out), sweep, "out of range")


def test_a_point_set_keeps_its_text_and_label_across_processes() -> None:
    import json
    import pickle

    from sim.config.load import Change

    c = Change('a.b="x"', "--axis a.b=\"x\"", "--axis")
    back = pickle.loads(pickle.dumps(c))
    assert back == 'a.b="x"' and back.label == c.label and back.via == "--axis" and json.dumps([c]) == '["a.b=\\"x\\""]'


# --- 6. a stdout that cannot be written ----------------------------------------------------------------------------

def _sim(args: list[str], **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                          timeout=60, **popen)


@pytest.mark.parametrize("args", [["run", HOME_LAB], ["run", HOME_LAB, "--json"], ["catalog", "--json"]],
                         ids=["run", "run-json", "catalog-json"])
def test_reader_gone_ends_quietly(args: list[str]) -> None:
    """``sim ... | head -1`` with the reader gone before sim writes: no message, exit 141 (128 + SIGPIPE, what the
    shell reports of a tool that SIGPIPE ended, as sim's 130 is 128 + SIGINT)."""
    read, write = os.pipe()
    os.close(read)
    try:
        r = _sim(args, stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 141 and r.stderr == b"", (r.returncode, r.stderr[:300])


def test_reader_that_reads_one_line_then_goes() -> None:
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "sim", "catalog", "--json"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"{\n"
    proc.stdout.close()  # the 137 kB left do not fit in the pipe: sim's next write meets EPIPE
    err = proc.stderr.read() if proc.stderr else b""
    assert proc.wait(timeout=60) == 141 and err == b"", err[:300]


@pytest.mark.parametrize("args", [["run", HOME_LAB], ["catalog"]], ids=["run", "catalog"])
def test_closed_or_full_stdout_is_one_line_naming_stdout(args: list[str]) -> None:
    closed = _sim(args, preexec_fn=lambda: os.close(1))  # sim ... >&-
    assert closed.returncode == 2 and closed.stderr.decode() == \
        "sim: error: stdout: cannot write: Bad file descriptor (stdout is closed)\n", closed.stderr[:300]
    if os.path.exists("/dev/full"):
        with open("/dev/full", "wb") as full:
            r = _sim(args, stdout=full)
        assert r.returncode == 2 and r.stderr.decode() == \
            "sim: error: stdout: cannot write: No space left on device\n", r.stderr[:300]


# --- 7. a --vs variant named baseline ------------------------------------------------------------------------------

def test_variant_named_baseline_is_refused() -> None:
    _refused(_bounded("compare", HOME_LAB, "--vs", "baseline: machines.mac.page_cache_gib=16"), "--vs",
             "a variant named 'baseline'")
    _one_line(*_cli("compare", HOME_LAB, "--vs", " Baseline : machines.mac.page_cache_gib=16"), "'Baseline'")


def test_variant_labels_and_column_heads_are_unique(tmp_path: Path) -> None:
    from sim.compare import Case, _column_names, _unique_labels, parse_variant

    base = Case("baseline", HOME_LAB)
    labels = [c.label for c in _unique_labels([Case("lru", HOME_LAB), Case("lru", HOME_LAB),
                                               Case("lru (2)", HOME_LAB)])]
    assert labels == ["lru", "lru (3)", "lru (2)"]
    heads = _column_names([Case(x, HOME_LAB) for x in ("variant 3", "a" * 20, "variant 2", "b")])
    assert len(set(heads)) == 4 and "baseline" not in heads and heads[3] == "b"
    other = tmp_path / "baseline.yaml"
    other.write_text(Path(HOME_LAB).read_text(encoding="utf-8"))
    assert parse_variant(str(other), base).label == "baseline.yaml"  # a file named baseline: its file name


# --- 8. yaml_io reads its files through sim.formats.inputs -----------------------------------------------------------

def test_yaml_files_are_read_by_the_input_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.config.yaml_io as yaml_io
    from sim.formats import inputs

    calls: list[tuple] = []

    def spy(path, key_path="", what="a text file", **kw):
        calls.append((str(path), what, kw.get("max_bytes")))
        return inputs.read_text(path, key_path, what, **kw)

    monkeypatch.setattr(yaml_io, "read_text", spy)
    path = tmp_path / "a.yaml"
    path.write_text("name: a\n")
    assert yaml_io.read_yaml(str(path)) == {"name": "a"}
    assert calls == [(str(path), "a YAML file", yaml_io.MAX_YAML_BYTES)]
    for data, words in ((b"name: \xff\n", "not UTF-8 text (byte 6): expected a YAML file"),
                        (b"name: a\0\n", "not text (a NUL byte at byte 7): expected a YAML file")):
        path.write_bytes(data)
        with pytest.raises(ScenarioError, match=words.replace("(", r"\(").replace(")", r"\)")):
            yaml_io.read_yaml(str(path))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file .a FIFO.: expected a YAML file"):
        yaml_io.read_yaml(str(fifo))
    with pytest.raises(ScenarioError, match="the file name holds a NUL byte"):
        yaml_io.read_yaml("a\0b.yaml")


# --- nearby: impossible values the schema took as data -------------------------------------------------------------

@pytest.mark.parametrize("change", [
    "jobs.short_with_load.tokens=" + "1" + "0" * 300,  # a job of 1e300 tokens ran, printing 300-digit times
    "jobs.short_with_load.tokens=" + "1" + "0" * 400,  # exit 70: int too large to convert to float
    "jobs.short_with_load.arrival_s=1e300",
    "machines.rtx4090_box.decode_tok_s.9B=1e300",
    "models.9B.tensors=" + "1" + "0" * 300,
    "loading.buffer_chunks=" + "1" + "0" * 300,
    "machines.mac.loader.s_per_tensor=1e300",
])
def test_impossible_values_are_refused(change: str) -> None:
    _one_line(*_cli("run", HOME_LAB, "--set", change), change.split("=", 1)[0])


def test_impossible_step_costs_are_refused() -> None:
    for key in ("step.pcie_latency_s", "step.graph_break_s", "step.host_s", "step.gpu_expert_s"):
        _one_line(*_cli("run", GEN3, "--set", f"machines.strata_box.engine.{key}=1e300"), key)


def test_a_measured_table_named_with_a_nul_byte_is_shown_escaped(tmp_path: Path) -> None:
    from sim.sweeps.overlays import resolve_overlays
    from sim.sweeps.spec import MeasuredOverlay

    overlay = MeasuredOverlay(label="m", table="a\0b.csv", x=1.0, y={"decode_tok_s": {"column": "t"}})
    with pytest.raises(ScenarioError) as err:
        resolve_overlays([overlay], str(tmp_path / "sweep.yaml"))
    assert err.value.path == "measured.0.table" and "a\\x00b.csv" in str(err.value) and "\0" not in str(err.value)


@pytest.mark.parametrize("args", [["llama", "llama-server", "--write", "a\0b"], ["run", "scenarios/home\0lab.yaml"],
                                  ["advise", "x\0.yaml"], ["fit-offload", "--bench", "b\0", "--scenario", "s"]])
def test_a_nul_byte_in_any_argument_is_one_line(args):
    """No shell passes a NUL byte, but a caller of ``main`` can: click's Path type would raise ``ValueError`` from
    ``os.stat`` (exit 70); the command line refuses it first, whatever the option."""
    from click.testing import CliRunner

    from sim.cli import main

    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "an argument holds a NUL byte" in r.output and "\\x00" in r.output


def test_ctrl_c_inside_a_command_is_exactly_one_line_and_130(monkeypatch):
    """click's own Ctrl-C handling prints an empty line before its Abort; a command's interrupt is one line."""
    import sim.config.load

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.config.load, "load_scenario", interrupted)
    r = CliRunner().invoke(main, ["run", os.path.join(ROOT, "scenarios", "home_lab.yaml")])
    assert r.exit_code == 130 and r.output == "sim: error: interrupted\n"
