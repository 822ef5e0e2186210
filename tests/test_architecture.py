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
    ["sim.core"],  # units, errors, atomic files
    ["sim.formats"],  # readers of outside formats: the input layer, logs, bench outputs, traces, GGUF, config.json
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
                                          "reproducible_numerics", "run"])
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


# --- readers of outside formats live in sim.formats ------------------------------------------------------------------
ENGINES = ("sim.moe", "sim.dense", "sim.llamacpp", "sim.batching")
INPUT_LAYER = "sim.formats.inputs"
READERS = {"check_file", "read_text", "read_bytes", "read_head", "decode_text", "parse_json"}  # of the input layer
# Engine modules that still read a file themselves, each with the work that removes it. Only ever shrinks.
# Modules outside sim.formats allowed to call the input layer's readers, and why.
READERS_ALLOWED = {
    "sim.config.yaml_io": READERS,  # the scenario-YAML reader
    "sim.config.load": {"check_file"},  # a scenario's path and the files it names: checked, never opened
    "sim.config.files": {"check_file"},
    "sim.config.plausibility": {"check_file"},
    "sim.viz.plotting": {"check_file", "read_text"},  # a sweep folder sim itself wrote, read back to plot
}


def _names_imported(path: str, module: str) -> set[str]:
    """The names a file imports from ``module`` (``from module import a, b``), at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
            out |= {a.name for a in node.names}
    return out


def test_formats_imports_only_core(graph):
    wrong = sorted(f"{a} -> {b}" for a, deps in graph.items() if unit(a) == "sim.formats" for b in deps
                   if unit(b) not in ("sim.formats", "sim.core"))
    assert not wrong, f"sim.formats reads files for every layer above it and imports only sim.core: {wrong}"


def test_no_engine_imports_a_reader(graph):
    """An engine is handed what a file holds (sim.config or a command reads it through sim.formats): it imports no
    module of sim.formats, not even a type (an engine states what it needs as a Protocol, as sim.moe.trace_replay)."""
    wrong = sorted(f"{a} -> {b}" for a, deps in graph.items() if unit(a) in ENGINES for b in deps
                   if unit(b) == "sim.formats")
    assert not wrong, f"an engine package imports sim.formats (read the file in sim.config or a command and pass " \
                      f"what it holds): {wrong}"


# Readers of table rows as text, and the cell parsers: sim.calibration gets typed records from sim.formats instead.
CELL_READERS = {"number", "read_measured", "read_cells", "read_csv"}
# Modules of sim.calibration allowed one of CELL_READERS, and why. Only ever shrinks.
CELL_READERS_ALLOWED = {
    # a `rows` table (calibrate.tables) as text: the scenario's map (row_key, row_set, cells) says which columns are
    # numbers, each read by sim.formats.measured_cells.measured_values; rows a row_variant skips and columns the map
    # does not name are never parsed, so a note in them is no error
    "sim.calibration.targets": {"read_measured"},
}


def _formats_names_used(path: str) -> set[str]:
    """The names a file imports from sim.formats modules, and the attributes it calls on them (``mt.number(...)``)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    used, aliases = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sim.formats") and not node.level:
            used |= {a.name for a in node.names}
            aliases |= {a.asname or a.name for a in node.names}
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name.startswith("sim.formats")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = ast.unparse(node.func.value)
            if base in aliases or base.startswith("sim.formats"):
                used.add(node.func.attr)
    return used


def test_calibration_fits_observations_and_parses_no_file(graph):
    """sim.calibration fits typed observations and parses nothing. It gets its observations from sim.formats
    (logs, tables, bench outputs, traces) as typed records; it imports neither the input layer nor csv, parses no
    JSON (json.dumps to write is fine) and opens no file itself. Nor does it read a table's cells: it neither
    imports nor calls the row readers and cell parsers of sim.formats (CELL_READERS: ``number``,
    ``read_measured``, ``read_cells``, ``read_csv``), except the narrow uses CELL_READERS_ALLOWED names with
    their reason, and it calls no ``.parse(`` (``Quantity.parse`` of a cell: a reader's job)."""
    mods = modules()
    wrong = []
    for name, path in sorted(mods.items()):
        if unit(name) != "sim.calibration":
            continue
        if INPUT_LAYER in graph[name]:
            wrong.append(f"{name} imports the input layer ({INPUT_LAYER})")
        cells = (_formats_names_used(path) & CELL_READERS) - CELL_READERS_ALLOWED.get(name, set())
        wrong += [f"{name} uses sim.formats' {n} (a row reader or cell parser: take typed records from a reader "
                  "of sim.formats)" for n in sorted(cells)]
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                wrong += [f"{name} imports {n} (a parser: read the file in sim.formats)" for n in names
                          if n.split(".")[0] == "csv"]
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in ("open", "read_csv", "read_parquet", "read_json", "loads", "load", "read_text",
                              "read_bytes", "DictReader", "read_cells"):
                    wrong.append(f"{name} line {node.lineno} calls {called}() (read the file in sim.formats)")
                if called == "parse" and isinstance(f, ast.Attribute):
                    wrong.append(f"{name} line {node.lineno} calls .parse() (a cell parsed: a reader of sim.formats "
                                 "hands calibration typed values)")
    assert not wrong, wrong
    stale = [m for m, allowed in CELL_READERS_ALLOWED.items() if not _formats_names_used(mods[m]) & allowed]
    assert not stale, f"CELL_READERS_ALLOWED names a module that no longer uses what it allows: {stale}"


# Modules of sim.fidelity allowed a parser a reader of sim.formats owns (what _fidelity_parsers finds: csv or re, a
# row reader or cell parser of CELL_READERS, a number of a cell's text), with what and why. Only ever shrinks; empty
# since the public tables' typed readers (sim.formats.public_routing, public_loads, public_serving) read every cell.
FIDELITY_PARSERS_ALLOWED: dict[str, set[str]] = {}
# float(cell.split()[0]), int(m.group(1)): a number taken from a cell's text
CELL_TEXT_METHODS = {"split", "strip", "lstrip", "rstrip", "replace", "group"}


def _fidelity_parsers(path: str) -> set[str]:
    """What a module parses itself: ``csv`` or ``re`` imported, a CELL_READERS name of sim.formats used, a reading
    call (read_csv, read_text, DictReader, open, .parse()), a float()/int() of a cell's text (of a CELL_TEXT_METHODS
    call: ``float(row["x"].split()[0])``, ``int(m.group(1))``)."""
    found = {f"sim.formats' {n}" for n in _formats_names_used(path) & CELL_READERS}
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found |= {f"import {n}" for n in names if n.split(".")[0] in ("csv", "re")}
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if called in ("open", "read_csv", "read_text", "read_bytes", "DictReader", "read_cells", "parse"):
            found.add(f"{called}()")
        if called in ("float", "int") and isinstance(f, ast.Name) and any(
                isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in CELL_TEXT_METHODS
                for arg in node.args for sub in ast.walk(arg)):
            found.add(f"{called}() of a cell's text")
    return found


def test_fidelity_takes_typed_rows_and_parses_no_cell(graph):
    """sim.fidelity maps typed rows onto setups, excludes rows with their reasons, and fits and predicts; it reads
    no table itself. The public tables come from the typed readers of sim.formats (public_routing, public_loads,
    public_serving, llama_bench_tables through sim.calibration): sim.fidelity imports neither the input layer nor
    csv nor re, uses no row reader or cell parser of sim.formats (CELL_READERS), calls no read_csv, read_text,
    DictReader, open or .parse(), and takes no float()/int() of a cell's text, except what FIDELITY_PARSERS_ALLOWED
    names with its reason."""
    mods = modules()
    wrong = []
    for name, path in sorted(mods.items()):
        if unit(name) != "sim.fidelity":
            continue
        if INPUT_LAYER in graph[name]:
            wrong.append(f"{name} imports the input layer ({INPUT_LAYER})")
        wrong += [f"{name}: {what} (read the table with a typed reader of sim.formats)"
                  for what in sorted(_fidelity_parsers(path) - FIDELITY_PARSERS_ALLOWED.get(name, set()))]
    assert not wrong, wrong
    stale = [m for m, allowed in FIDELITY_PARSERS_ALLOWED.items() if not _fidelity_parsers(mods[m]) & allowed]
    assert not stale, f"FIDELITY_PARSERS_ALLOWED names a module that no longer uses what it allows: {stale}"


def test_only_formats_uses_the_input_layers_readers():
    """The input layer's readers (check_file, read_text, read_bytes, read_head, decode_text, parse_json) are called
    by sim.formats, the scenario-YAML reader and the few modules READERS_ALLOWED names; anything else asks a reader
    of sim.formats. shown_path (a path as an error prints it) is for everyone; so are the Quantity ranges."""
    wrong = []
    for name, path in sorted(modules().items()):
        if unit(name) == "sim.formats":
            continue
        used = (_names_imported(path, INPUT_LAYER) & READERS) - READERS_ALLOWED.get(name, set())
        if _names_imported(path, "sim.formats") & {"inputs"}:
            used.add("inputs (the module)")
        if used:
            wrong.append(f"{name} uses {', '.join(sorted(used))}")
    assert not wrong, f"only sim.formats reads outside files through the input layer: {wrong}"
    assert all(_names_imported(modules()[m], INPUT_LAYER) & allowed for m, allowed in READERS_ALLOWED.items()), \
        "READERS_ALLOWED names a module that no longer uses the input layer: take it out of the list"


def test_old_homes_of_the_readers_are_gone():
    """No shim re-exports a reader where it used to live."""
    old = ["core/inputs.py", "core/tables.py", "calibration/logs.py", "calibration/logs_io.py",
           "calibration/logs_patterns.py", "calibration/logs_values.py", "llamacpp/bench_output.py",
           "llamacpp/bench_ranges.py", "llamacpp/batched_output.py", "moe/route_trace.py", "fidelity/tables.py"]
    assert not [p for p in old if os.path.exists(os.path.join(PACKAGE, p))]

