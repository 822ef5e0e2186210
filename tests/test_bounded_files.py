"""Files a user hands ``sim`` or leaves behind: measured tables cut, renamed or saved by a spreadsheet, output folders
that held an earlier run, a sweep killed with ``kill -9``. Each case runs ``sim`` as a user would (``tests/bounded.py``:
a child under a time and memory cap) and checks what the user sees: one ``sim: error:`` line naming the file, row and
column, never an internal error (exit 70); a folder whose ``summary.json`` is the run that wrote its tables; no
process left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from bounded import ROOT, run_bounded

from sim.core import output
from sim.core.errors import ScenarioError
from sim.core.output import Table, write_outputs
from sim.formats.measured_tables import read_measured

STAGES = "loading_stages.csv"


def project(tmp_path) -> str:
    """A copy of the project root (scenarios/ and calibration/) to break tables in."""
    root = tmp_path / "root"
    for name in ("scenarios", "calibration"):
        shutil.copytree(os.path.join(ROOT, name), root / name)
    return str(root)


def edit_table(path: str, edit) -> None:
    """Rewrite the table at ``path``: ``edit(lines)`` gets its lines and the index of the header line."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    header = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    lines = edit(lines, header)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def set_cell(lines: list[str], line: int, column: str, value: str, header: int) -> list[str]:
    names = lines[header].split(",")
    cells = lines[line].split(",")
    cells[names.index(column)] = value
    return [*lines[:line], ",".join(cells), *lines[line + 1:]]


def validate_loading(root: str, *extra: str):
    return run_bounded(["validate", "--root", root, "--only", "loading", *extra], timeout_s=120)


# --- 1. tables that cannot be read: one line naming the file, row and column --------------------------------------

@pytest.mark.parametrize("edit, words", [
    (lambda ls, h: [*ls[:h], ls[h].replace("machine,", "mach,", 1), *ls[h + 1:]], "header.machine: missing column"),
    (lambda ls, h: [*ls[:h], ls[h].replace(",hot_gbps", ",hot", 1), *ls[h + 1:]], "header.hot_gbps: missing column"),
    (lambda ls, h: set_cell(ls, h + 2, "cold_gbps", "fast", h), "row 2.cold_gbps: bad value 'fast'"),
    (lambda ls, h: set_cell(ls, h + 1, "file_gb", "4 GB", h), "row 1.file_gb: bad value '4 GB'"),
    (lambda ls, h: set_cell(ls, h + 1, "machine", "nobox", h), "row 1.machine: bad value 'nobox'"),
    (lambda ls, h: [*ls[:h], ls[h] + ",note", *ls[h + 1:]], "header: column 'note' appears twice"),
    (lambda ls, h: [*ls[:h], ls[h] + ",", *ls[h + 1:]], "header: column 10 has no name"),
])
def test_loading_table_errors_are_one_line(tmp_path, edit, words):
    root = project(tmp_path)
    path = os.path.join(root, "calibration", STAGES)
    edit_table(path, edit)
    r = validate_loading(root)
    assert r.one_line_error(), (r.code, r.stderr)
    assert f"{path}: " in r.stderr and words in r.stderr, r.stderr


def test_a_byte_order_mark_is_accepted(tmp_path):
    root = project(tmp_path)
    path = os.path.join(root, "calibration", STAGES)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    with open(path, "w", encoding="utf-8-sig") as fh:  # what a spreadsheet saves as "CSV UTF-8"
        fh.write(text)
    plain = validate_loading(ROOT, "--json")
    marked = validate_loading(root, "--json")
    assert marked.code == 0 and marked.stdout == plain.stdout, marked.stderr
    _, rows = read_measured(path)
    assert list(rows[0])[0] == "machine"


def test_scenario_tables_errors_are_one_line(tmp_path):
    """``sim validate SCENARIO --table CSV``: a renamed column, a byte order mark, text in a number cell."""
    scenario = os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml")
    src = os.path.join(ROOT, "calibration", "strata_concurrency.csv")
    renamed, texted = tmp_path / "renamed", tmp_path / "texted"
    for folder in (renamed, texted):
        folder.mkdir()
        shutil.copy(src, folder)
    edit_table(str(renamed / "strata_concurrency.csv"),
               lambda ls, h: [*ls[:h], ls[h].replace("ttft_s", "ttft", 1), *ls[h + 1:]])
    edit_table(str(texted / "strata_concurrency.csv"), lambda ls, h: set_cell(ls, h + 1, "ttft_s", "slow", h))
    for folder, words in ((renamed, "ttft_s: missing column"), (texted, "row 1.ttft_s: bad value 'slow'")):
        r = run_bounded(["validate", scenario, "--table", str(folder / "strata_concurrency.csv")], timeout_s=120)
        assert r.one_line_error() and words in r.stderr, (r.code, r.stderr)


def test_read_measured_rows_name_a_missing_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf# provenance\nmachine,note\nbox,a, b\nshort\n")
    provenance, rows = read_measured(str(path))
    assert provenance == ["provenance"] and rows.columns == ("machine", "note")
    assert rows[0] == {"machine": "box", "note": "a, b"} and rows[1] == {"machine": "short", "note": ""}
    with pytest.raises(ScenarioError, match=r"t\.csv: row 2\.hot_gbps: missing column 'hot_gbps'"):
        rows[1]["hot_gbps"]  # noqa: B018 - the lookup is the test
    path.write_bytes(b"a,b\n1,2\0\n")
    with pytest.raises(ScenarioError, match="NUL"):
        read_measured(str(path))


def test_fit_loading_reads_a_marked_table(tmp_path):
    """Another reader of measured tables (``sim fit-loading``) takes a table saved with a byte order mark."""
    src = os.path.join(ROOT, "calibration", STAGES)
    marked = tmp_path / STAGES
    with open(src, encoding="utf-8") as fh:
        marked.write_text(fh.read(), encoding="utf-8-sig")
    scenario = os.path.join(ROOT, "scenarios", "home_lab.yaml")
    args = ["fit-loading", scenario, "--table", "{}", "--table", os.path.join(ROOT, "calibration",
                                                                            "loading_mac_sample.csv")]
    plain = run_bounded([a.replace("{}", src) for a in args] + ["--out", str(tmp_path / "a")], timeout_s=120)
    bom = run_bounded([a.replace("{}", str(marked)) for a in args] + ["--out", str(tmp_path / "b")], timeout_s=120)
    assert plain.code == 0 and bom.code == 0, bom.stderr
    assert (tmp_path / "a" / "loading.yaml").read_text().count("\n") == \
        (tmp_path / "b" / "loading.yaml").read_text().count("\n")


# --- 2. a claimed cell with no row to check fails ------------------------------------------------------------------

@pytest.mark.parametrize("edit, words", [
    (lambda ls, h: ls[:h + 1], "no row to check for 6 of the 6 cells"),  # cut to its header
    (lambda ls, h: [*ls[:h + 1], *ls[h + 2:]], "no row to check for 3 of the 6 cells"),  # its first row deleted
    (lambda ls, h: set_cell(ls, h + 2, "hot_gbps", "", h), "mining_box.hot_gbps"),  # a claimed cell blank
])
def test_missing_rows_of_a_shipped_table_fail(tmp_path, edit, words):
    root = project(tmp_path)
    path = os.path.join(root, "calibration", STAGES)
    edit_table(path, edit)
    r = validate_loading(root)
    assert r.one_line_error() and f"{path}: " in r.stderr and words in r.stderr, (r.code, r.stderr)


def test_a_scenario_table_with_no_rows_fails(tmp_path):
    table = tmp_path / "strata_concurrency.csv"
    shutil.copy(os.path.join(ROOT, "calibration", "strata_concurrency.csv"), table)
    edit_table(str(table), lambda ls, h: ls[:h + 1])
    r = run_bounded(["validate", os.path.join(ROOT, "scenarios", "gen3_5090_concurrency.yaml"), "--table",
                     str(table)], timeout_s=120)
    assert r.one_line_error() and "no row to check" in r.stderr and str(table) in r.stderr, (r.code, r.stderr)


# --- 3. output folders never mix runs ------------------------------------------------------------------------------

def _tables(fail_after: int | None = None) -> dict:
    def rows():
        for i in range(10):
            if fail_after is not None and i == fail_after:
                raise KeyboardInterrupt  # the run killed while writing its first table
            yield {"i": i}

    return {"requests": Table(("i",), rows()), "jobs": Table(("j",), [{"j": 1}])}


def test_a_run_cut_short_leaves_no_summary_and_the_next_cleans_up(tmp_path):
    out = tmp_path / "out"
    write_outputs(str(out), {"run": 1}, _tables())
    (out / "notes.txt").write_text("mine")  # the user's own files stay
    (out / ".notes.tmp").write_text("mine too")
    stale = out / ".requests.csv.ab_cd123.tmp"  # what a kill -9 during an earlier write left
    stale.write_text("half")
    with pytest.raises(KeyboardInterrupt):
        write_outputs(str(out), {"run": 2}, _tables(fail_after=5))
    assert not (out / "summary.json").exists()  # the earlier run's summary never stands beside new tables
    assert not [n for n in os.listdir(out) if output._TEMP_NAME.fullmatch(n) and n != stale.name]
    write_outputs(str(out), {"run": 3}, _tables())
    assert json.loads((out / "summary.json").read_text()) == {"run": 3}
    assert sorted(os.listdir(out)) == [".notes.tmp", "jobs.csv", "notes.txt", "requests.csv", "summary.json"]


def test_a_table_write_that_raises_leaves_no_summary(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_outputs(str(out), {"run": 1}, _tables())

    def broken(path, table):
        raise OSError("disk full")

    monkeypatch.setattr(output, "write_table", broken)
    with pytest.raises(OSError):
        write_outputs(str(out), {"run": 2}, _tables())
    assert not (out / "summary.json").exists()
    monkeypatch.undo()
    write_outputs(str(out), {"run": 3}, _tables())
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


@pytest.mark.slow
def test_kill_9_of_sim_run_leaves_no_stale_summary(tmp_path):
    """``sim run --out DIR`` into a folder of an earlier run, killed with SIGKILL while it writes: no summary.json
    (the earlier run's is gone) until a run finishes; the next run removes the temporary files left."""
    scenario = os.path.join(ROOT, "scenarios", "azure_conv_5090.yaml")
    # 3,000 of the trace's requests: a requests table of 1 MB, long enough to be caught writing it (the shipped
    # 10,000 took 5 s a run)
    requests = ["--set", "serve.requests=3000"]
    out = tmp_path / "out"
    assert run_bounded(["run", scenario, *requests, "--out", str(out)], timeout_s=120).code == 0
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "sim", "run", scenario, *requests, "--seed", "3", "--out",
                             str(out)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    writing = False  # a table's temporary file there: the run is writing its tables
    while not writing and proc.poll() is None and time.monotonic() < deadline:
        writing = any(n.endswith(".tmp") and n.startswith(".requests.csv.") for n in os.listdir(out))
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    if writing and proc.returncode != 0:  # killed while writing its tables (not after it finished)
        assert not (out / "summary.json").exists(), "the earlier run's summary beside this run's tables"
    assert run_bounded(["run", scenario, *requests, "--seed", "3", "--out", str(out)], timeout_s=120).code == 0
    assert (out / "summary.json").exists() and not [n for n in os.listdir(out) if n.endswith(".tmp")]


# --- 4. a sweep killed with kill -9 leaves no process behind -------------------------------------------------------

def _descendants(pid: int) -> list[int]:
    """Every process whose parent chain leads to ``pid`` (psutil if installed, else /proc)."""
    try:
        import psutil

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    parents[int(name)] = int(fh.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, todo = [], [pid]
    while todo:
        kids = [p for p, pp in parents.items() if pp == todo.pop()]
        found += kids
        todo += kids
    return found


def _running(pid: int) -> bool:
    """There and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_kill_9_of_a_sweep_leaves_no_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    out = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "sim", "sweep", os.path.join(ROOT, "scenarios", "gen3_5090.yaml"),
                             "--axis", "machines.strata_box.gpus.gpu0.reserved_gib=0..16:1", "--set",
                             "serve.requests=300", "--workers", "2", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:  # the server, the tracker and two workers
            kids = _descendants(proc.pid)
            if len(kids) >= 4:
                break
            time.sleep(0.2)
        assert proc.poll() is None and len(kids) >= 4, "the sweep never started its workers"
        time.sleep(1.0)  # the workers inside their first runs
        kids = _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_running(p) for p in kids):
            time.sleep(0.1)
        assert not [p for p in kids if _running(p)], "processes of the killed sweep still run"
    finally:  # whatever the outcome, nothing of this test keeps running
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in kids:
            if _running(p):
                os.kill(p, signal.SIGKILL)
