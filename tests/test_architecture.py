"""The package's shape: layers that import only downwards, no import cycles, small modules, a public API, a code
digest and run keys that cover what they must."""

from __future__ import annotations

import ast
import os
import shutil

import pytest
from conftest import ROOT

PACKAGE = os.path.join(ROOT, "sim")

# Read top-down: a unit may import its own modules and those of the layers below it, never a unit beside it or above
LAYERS = [
    ["sim.core"],  # units, errors, atomic files, measured tables
    ["sim.catalog", "sim.modelfiles"],  # hardware specs shipped with the package; a model's geometry from its file
    ["sim.config"],  # scenario schema, checks, loading, dotted paths, links
    ["sim.lab", "sim.serving"],  # the two simulators' foundations: machines that load and dispatch; the queue
    ["sim.batching"],  # the continuous-batching engine dense and MoE kinds share
    ["sim.moe", "sim.dense", "sim.llamacpp"],  # the engine kinds
    ["sim.engines"],  # which kind serves a scenario
    ["sim.runner"],  # one run: loads, jobs, the served workload
    # its text; fitting, validating, error bars; differences; the most load under goals; a vLLM or SGLang command
    # line as a scenario
    ["sim.report", "sim.calibration", "sim.compare", "sim.capacity", "sim.vllm_scenario"],
    ["sim.sweeps", "sim.viz", "sim.fidelity"],  # many runs; figures; the leave-one-source-out benchmark
    ["sim.api", "sim"],  # the Python API
    ["sim.cli"],  # the command line
    ["sim.__main__"],  # python -m sim
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def modules() -> dict[str, str]:
    """Module name -> file, for every module of the package."""
    out = {}
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, f), ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = os.path.join(folder, f)
    return out


def imports(name: str, path: str, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, at the top or inside a function (lazy imports count)."""
    found = set()
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # from sim.lab import loading: a module
    return {m for m in found if m in known and m != name}


def unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def test_every_unit_has_a_layer(graph):
    assert {unit(m) for m in graph} <= set(RANK), {unit(m) for m in graph} - set(RANK)


def test_imports_go_only_downwards(graph):
    """No back-edge (a lower layer importing a higher one) and no edge between units of one layer."""
    wrong = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                   if unit(a) != unit(b) and RANK[unit(b)] >= RANK[unit(a)])
    assert not wrong, wrong


def test_no_import_cycles(graph):
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join(path[path.index(d):] + [m, d]) if d in path else f"{m} -> {d}")
            elif d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, cycles


def test_modules_stay_small():
    big = {name: n for name, path in modules().items() if (n := len(open(path, encoding="utf-8").readlines())) > 500}
    assert not big, big


def test_the_public_api_lists_what_it_offers():
    import sim

    assert sorted(sim.__all__) == sorted(["Run", "Scenario", "ScenarioError", "SimulationError", "__version__", "load",
                                          "run"])
    for name in sim.__all__:
        assert getattr(sim, name) is not None


def test_the_code_digest_covers_every_module_wherever_it_lives(tmp_path):
    from sim.sweeps.keys import code_digest, package_modules

    shipped = [p for p in package_modules() if p.endswith(".py")]
    assert sorted(os.path.relpath(p, PACKAGE) for p in modules().values()) == shipped
    assert "catalog/data/gpus.yaml" in package_modules()  # the catalog's data, which scenarios read, counts too
    copy = tmp_path / "sim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest(str(copy))
    assert before == code_digest(str(copy))
    deep = copy / "moe" / "stepcost.py"
    deep.write_text(deep.read_text() + "\n# a change in a nested module\n")
    assert code_digest(str(copy)) != before
    (copy / "dense" / "newkind.py").write_text("X = 1\n")  # a module added anywhere counts too
    assert "dense/newkind.py" in package_modules(str(copy))
