"""The fuzz campaign, as part of the suite: hypothesis strategies over scenario files, ``--set`` values, sweep axes,
log lines and measured tables, with a fixed seed (``derandomize``) so every run tries the same cases.

Every case must end in a result or in one-line errors (a ``ScenarioError`` whose every line is short and single),
never in another exception; a scenario that validates and runs must run in bounded time and report sane values
(shares within 0-1, times and rates finite and not negative). ``SIM_FUZZ_SCALE=10 pytest tests/test_fuzz.py`` tries
ten times as many cases.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ruamel.yaml.error import YAMLError

from sim.config.yaml_io import dump_yaml, parse_yaml
from sim.core.errors import ScenarioError, SimulationError

SCALE = float(os.environ.get("SIM_FUZZ_SCALE", "1"))
SCENARIOS = ["home_lab.yaml", "gen3_5090.yaml", "a100_llama2_7b.yaml", "basalt_3gpu.yaml"]
LONGEST_LINE = 1_000  # an error line a terminal can show
# mutants are written as the project writes YAML (sim.config.yaml_io.dump_yaml: ruamel.yaml on libyaml's emitter,
# several times faster than the pure-Python one, which took a third of the mutated-scenario test)


def fuzz(examples: int):
    """Hypothesis settings of one strategy: ``examples`` cases (times SIM_FUZZ_SCALE), the same ones every run."""
    return settings(max_examples=max(1, int(examples * SCALE)), derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def assert_one_line_errors(exc: ScenarioError) -> None:
    """Every line of ``exc`` single and short (and counted: ``--hypothesis-show-statistics`` lists the outcomes)."""
    event("refused in one-line errors")
    lines = exc.lines()
    assert lines, "an error without a message"
    for line in lines:
        assert "\n" not in line and 0 < len(line) <= LONGEST_LINE, repr(line[:200])


def raw_scenario(name: str) -> dict:
    with open(os.path.join(ROOT, "scenarios", name), encoding="utf-8") as fh:
        return parse_yaml(fh.read())


RAW = {name: raw_scenario(name) for name in SCENARIOS}


def project_copy(factory):
    """A folder shaped like the project for a mutated scenario: ``scenarios/`` (with the shipped traces) beside
    ``calibration/``, so the scenario's relative paths resolve as in the shipped file."""
    folder = factory.mktemp("p")
    (folder / "scenarios").mkdir()
    os.symlink(os.path.join(ROOT, "calibration"), folder / "calibration")
    os.symlink(os.path.join(ROOT, "scenarios", "traces"), folder / "scenarios" / "traces")
    return folder


_PROJECT: dict = {}
_MUTANTS = itertools.count()


def mutant_path(factory):
    """A new file for one mutated scenario, in a project folder (:func:`project_copy`) made once per session: the
    shipped calibration files keep one path, so sim's cache of parsed files serves them as it serves a user's runs
    (a folder per case parsed them anew, a third of the mutated-scenario test), while every mutant is a file of its
    own, read fresh."""
    if "folder" not in _PROJECT:
        _PROJECT["folder"] = project_copy(factory)
    return _PROJECT["folder"] / "scenarios" / f"mutant{next(_MUTANTS)}.yaml"


def leaves(node, prefix=()):
    """Every (path, value) of a parsed YAML tree, maps and lists included as nodes."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, prefix + (i,))


def put(tree, path, value) -> None:
    node = tree
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def drop(tree, path) -> None:
    node = tree
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]


numbers = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 1e300, 1e-320, 1e308, -0.0, 2**63, 0.5]))
scalars = st.one_of(numbers, st.booleans(), st.none(), st.text(max_size=30),
                    st.sampled_from(["auto", "static", "lru", "1e3", "30e-6", "yes", "null", "~", "[1, 2]"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


@st.composite
def mutated_scenarios(draw):
    """A shipped scenario with one to four changes: a value replaced (by anything), a key dropped, a key added, a
    number scaled."""
    name = draw(st.sampled_from(SCENARIOS))
    tree = copy.deepcopy(RAW[name])
    for _ in range(draw(st.integers(1, 4))):
        spots = [p for p, _ in leaves(tree) if p]
        if not spots:
            break
        path = draw(st.sampled_from(spots))
        kind = draw(st.sampled_from(["replace", "drop", "add", "scale"]))
        try:
            if kind == "replace":
                put(tree, path, draw(values))
            elif kind == "drop":
                drop(tree, path)
            elif kind == "add":
                parent = tree
                for p in path[:-1]:
                    parent = parent[p]
                if isinstance(parent, dict):
                    parent[draw(st.text(min_size=1, max_size=12))] = draw(values)
            else:
                node = tree
                for p in path:
                    node = node[p]
                if isinstance(node, int | float) and not isinstance(node, bool):
                    put(tree, path, node * draw(st.sampled_from([0, -1, 1e-9, 1e-3, 0.5, 2, 1e3, 1e12])))
        except (KeyError, IndexError, TypeError):
            continue
    return name, tree


@fuzz(400)
@given(case=mutated_scenarios())
def test_mutated_scenarios_validate_or_say_why_in_one_line_each(case, tmp_path_factory):
    from sim.config.load import load_scenario
    from sim.config.plausibility import plausibility_warnings

    name, tree = case
    path = mutant_path(tmp_path_factory)
    try:
        path.write_text(dump_yaml(tree), encoding="utf-8")
    except YAMLError:
        return
    try:
        scn, _ = load_scenario(str(path))
    except ScenarioError as exc:
        assert_one_line_errors(exc)
        return
    event("validated")
    for line in plausibility_warnings(scn, str(path)):
        assert "\n" not in line and len(line) <= LONGEST_LINE


set_paths = st.one_of(
    st.sampled_from(["serve.requests", "serve.workload.clients", "machines.strata_box.gpus.gpu0.reserved_gib",
                     "gpus.rtx5090.vram_gib", "machines.strata_box.engine.policy", "models.moe125b.moe.top_k",
                     "models.moe125b.moe.expert_mib", "seed", "machines.strata_box.engine.parallel",
                     "machines.strata_box.gpus.gpu0.slot_gen", "serve.workload.kind", "calibrations", "name",
                     "machines.nope.gpus.g.type", "models.moe125b.weights_gib", "serve.admission.queue_limit"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz._0123456789[]", min_size=1, max_size=40))
set_values = st.one_of(st.text(max_size=40), st.sampled_from(["0", "-1", "1e300", "1e-320", "nan", ".inf", "null",
                                                              "[]", "{}", "{a: 1}", "'", "[1,", "true", "static"]))


@fuzz(300)
@given(path=set_paths, value=set_values)
def test_set_values_are_applied_or_refused_in_one_line_each(path, value):
    from sim.config.load import load_scenario

    try:
        load_scenario(os.path.join(ROOT, "scenarios", "gen3_5090.yaml"), [f"{path}={value}"])
    except ScenarioError as exc:
        assert_one_line_errors(exc)
    else:
        event("applied")


axis_values = st.one_of(st.sampled_from(["1,2", "0..8:2", "1..32*2", "5..1", "1..1000000", "a,b", "1..", "..",
                                         "0..1:0", "1e300..1e301:1e299", "[1,2],3", "", ",", "1,,2"]),
                        st.text(max_size=20))


@fuzz(150)
@given(axes=st.lists(st.tuples(set_paths, axis_values), min_size=1, max_size=3), seeds=st.integers(1, 5))
def test_sweep_axes_make_a_bounded_plan_or_one_line_errors(axes, seeds):
    from sim.sweeps.spec import build_plan

    start = time.perf_counter()
    try:
        plan = build_plan(os.path.join(ROOT, "scenarios", "gen3_5090.yaml"), [f"{p}={v}" for p, v in axes], False,
                          seeds, None, [])
    except ScenarioError as exc:
        assert_one_line_errors(exc)
    else:
        event("planned")
        assert len(plan.points) * plan.seeds <= 1_000_000
    assert time.perf_counter() - start < 10


def _log_lines() -> list[str]:
    out = []
    for name in sorted(os.listdir(os.path.join(ROOT, "calibration", "logs"))):
        with open(os.path.join(ROOT, "calibration", "logs", name), encoding="utf-8") as fh:
            out += fh.read().splitlines()
    return out


LOG_LINES = _log_lines()
digits = st.sampled_from(["-1", "150", "1e299", "-5", "0", "nan", "99999999999999999999", "0.5", "", "1e-320"])


@st.composite
def log_text(draw):
    """A window of real log lines (requests keep their lines together), some with one number replaced, some cut or
    repeated, with noise lines between them."""
    import re

    start = draw(st.integers(0, len(LOG_LINES) - 1))
    window = LOG_LINES[start:start + draw(st.integers(1, 12))]
    lines = []
    for line in window:
        kind = draw(st.sampled_from(["as is", "as is", "number", "number", "cut", "noise", "repeat"]))
        if kind == "number":
            spans = [m.span() for m in re.finditer(r"\d+(?:\.\d+)?", line)]
            if spans:
                a, b = draw(st.sampled_from(spans))
                line = line[:a] + draw(digits) + line[b:]
        elif kind == "cut":
            line = line[: draw(st.integers(0, max(0, len(line))))]
        elif kind == "noise":
            lines.append(draw(st.text(max_size=80)))
        elif kind == "repeat":
            line = line * draw(st.integers(2, 50))
        lines.append(line)
    return "\n".join(lines) + "\n"


SHARES = ("acceptance", "expert_hit_rate", "pcie_share", "kv_usage", "prefix_hit_rate")


@fuzz(300)
@given(text=log_text())
def test_logs_read_in_bounded_time_into_sane_rows(text, tmp_path_factory):
    import json

    from sim.cli import main

    path = tmp_path_factory.mktemp("l") / "fuzz.log"
    path.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    r = CliRunner().invoke(main, ["logs", str(path), "--json"])
    assert time.perf_counter() - start < 10
    assert r.exit_code in (0, 2), r.output[-500:]
    if r.exit_code == 2:
        event("refused in one-line errors")
        assert len(r.stderr.strip().splitlines()) == 1
        return
    out = json.loads(r.stdout)
    rows = out["rows"]
    event(f"read: {'rows' if rows else 'no rows'}{', some lines not understood' if out['not_understood'] else ''}")
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value) and value >= 0, (key, value)
                if key in SHARES:
                    assert value <= 1, (key, value)


table_cells = st.one_of(st.sampled_from(["", "abc", "-1", "1e300", "nan", "1,5", "\ufeff", "\"", "0"]),
                        st.text(max_size=10))


def corrupt(data, lines: list[str], row: int, kind: str) -> list[str]:
    """A CSV's ``lines`` with one change at ``row``: a cell replaced (``cell``), the row dropped (``drop``), the
    table cut after it (``cut``) or a byte order mark before the first line (``bom``)."""
    lines = list(lines)
    if kind == "cell":
        cells = lines[row].split(",")
        cells[data.draw(st.integers(0, len(cells) - 1))] = data.draw(table_cells)
        lines[row] = ",".join(cells)
    elif kind == "drop":
        del lines[row]
    elif kind == "cut":
        lines = lines[: row + 1]
    else:
        lines[0] = "\ufeff" + lines[0]
    return lines


@fuzz(150)
@given(data=st.data())
def test_measured_tables_read_or_say_why_in_one_line(data, tmp_path_factory):
    from sim.formats.measured_tables import read_measured

    source = data.draw(st.sampled_from(sorted(f for f in os.listdir(os.path.join(ROOT, "calibration"))
                                              if f.endswith(".csv"))))
    with open(os.path.join(ROOT, "calibration", source), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        if not lines:
            break
        i = data.draw(st.integers(0, len(lines) - 1))
        lines = corrupt(data, lines, i, data.draw(st.sampled_from(["cell", "drop", "cut", "bom"])))
    path = tmp_path_factory.mktemp("t") / source
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        read_measured(str(path))
    except ScenarioError as exc:
        assert_one_line_errors(exc)
    else:
        event("read")


@st.composite
def runnable_mutants(draw):
    """A shipped scenario with few requests and one number scaled: most still validate, and then they run."""
    name = draw(st.sampled_from(["home_lab.yaml", "gen3_5090.yaml", "a100_llama2_7b.yaml"]))
    tree = copy.deepcopy(RAW[name])
    numeric = [p for p, v in leaves(tree) if p and isinstance(v, int | float) and not isinstance(v, bool)
               and p[0] in ("gpus", "models", "machines", "disks", "serve")]
    path = draw(st.sampled_from(numeric))
    node = tree
    for p in path:
        node = node[p]
    put(tree, path, node * draw(st.sampled_from([0.1, 0.5, 2, 10])))
    return name, tree


@pytest.mark.slow
@fuzz(60)
@given(case=runnable_mutants())
def test_runnable_mutants_run_in_bounded_time_with_sane_values(case, tmp_path_factory):
    from sim.config.load import load_scenario
    from sim.runner import run

    name, tree = case
    path = mutant_path(tmp_path_factory)
    path.write_text(dump_yaml(tree), encoding="utf-8")
    overrides = ["serve.requests=20"] if tree.get("serve") else []
    try:
        scn, _ = load_scenario(str(path), overrides)
    except ScenarioError as exc:
        assert_one_line_errors(exc)
        return
    start = time.perf_counter()
    try:
        metrics = run(scn, 0).metrics
    except SimulationError as exc:
        event("cannot be simulated, in one line")
        assert "\n" not in str(exc)
        return
    event("ran")
    assert time.perf_counter() - start < 30
    for key, value in metrics.items():
        assert math.isfinite(value), key
        if key.endswith("_share"):
            assert -1e-12 <= value <= 1 + 1e-12, (key, value)


EXTREMES = [0, -1, 1e-320, 1e-300, 1e-9, 1e9, 1e300, 1.7e308]


class _TooLong(Exception):
    pass


def _alarm(signum, frame):
    raise _TooLong


@st.composite
def extreme_mutants(draw):
    """A shipped scenario with few requests and one number set to an extreme: it must validate and run in bounded
    time, or say why in one line."""
    name = draw(st.sampled_from(["home_lab.yaml", "gen3_5090.yaml", "a100_llama2_7b.yaml"]))
    tree = RAW[name]
    numeric = sorted(".".join(map(str, p)) for p, v in leaves(tree) if p and isinstance(v, int | float)
                     and not isinstance(v, bool) and not any(isinstance(x, int) for x in p))
    return name, draw(st.sampled_from(numeric)), draw(st.sampled_from(EXTREMES))


@fuzz(100)
@given(case=extreme_mutants())
def test_extreme_numbers_run_in_bounded_time_or_fail_in_one_line(case):
    import signal

    from sim.config.load import load_scenario
    from sim.runner import run

    name, path, value = case
    overrides = [f"{path}={value!r}"] + (["serve.requests=5"] if RAW[name].get("serve") and path != "serve.requests"
                                         else [])
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        scn, _ = load_scenario(os.path.join(ROOT, "scenarios", name), overrides)
        metrics = run(scn, 0).metrics
    except ScenarioError as exc:
        assert_one_line_errors(exc)
        return
    except SimulationError as exc:
        event("cannot be simulated, in one line")
        assert "\n" not in str(exc) and len(str(exc)) <= LONGEST_LINE
        return
    except _TooLong:
        pytest.fail(f"{name} --set {overrides}: still running after 20 s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    event("ran")
    for key, v in metrics.items():
        assert not math.isnan(v), (key, overrides)
        if key.endswith("_share"):
            assert 0 <= v <= 1, (key, v, overrides)


@fuzz(40)
@given(data=st.data())
def test_validate_on_corrupted_loading_tables_exits_cleanly(data, tmp_path_factory):
    import shutil

    from sim.cli import main

    root = tmp_path_factory.mktemp("v")
    shutil.copytree(os.path.join(ROOT, "calibration"), root / "calibration", symlinks=True)
    os.symlink(os.path.join(ROOT, "scenarios"), root / "scenarios")
    name = data.draw(st.sampled_from(["loading_stages.csv", "loading_mac_sample.csv"]))
    path = root / "calibration" / name
    lines = path.read_text(encoding="utf-8").splitlines()
    body = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    i = data.draw(st.sampled_from(body))
    kind = data.draw(st.sampled_from(["cell", "header", "drop", "bom", "cut"]))
    row = body[0] if kind in ("header", "cut") else i  # the header changed, or the table cut to the header alone
    lines = corrupt(data, lines, row, "cell" if kind == "header" else kind)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["validate", "--root", str(root), "--only", "loading", "--json"])
    assert r.exit_code in (0, 1, 2), r.output[-300:]
    event(f"{kind}: exit {r.exit_code}")
    if r.exit_code == 2:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    if kind == "cut":
        assert r.exit_code != 0  # claimed cells with no row to check: not a pass
