"""One YAML library, reading and writing: ruamel.yaml as YAML 1.2 (sim.config.yaml_io). What the project writes it
reads back as the same data, the shipped calibration files are exactly what the writer gives of their own data, and
no module imports PyYAML (whose YAML 1.1 reads ``on`` as true and ``1e-05`` as text)."""

from __future__ import annotations

import ast
import glob
import math
import os

from hypothesis import given
from hypothesis import strategies as st

from sim.config.yaml_io import dump_yaml, parse_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the files a fit or a command writes (a header of comments, then dump_yaml's document); the other YAML files of
# calibration/ are written by hand, with comments inside
WRITTEN = ["a100_llama2_7b.yaml", "basalt_moe.yaml", "llamacpp.yaml", "llamacpp_bands.yaml", "loading.yaml",
           "models/index.yaml", "public_loads.yaml", "routing.yaml", "strata_moe.yaml"]


def test_no_module_imports_pyyaml():
    found = []
    for folder in ("sim", "tests", "benchmarks"):
        for path in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True):
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [f"{os.path.relpath(path, ROOT)}: {n}" for n in names if n.split(".")[0] == "yaml"]
    assert not found, "PyYAML imported (read and write YAML with sim.config.yaml_io): " + "; ".join(found)


def _body(path: str) -> str:
    lines = open(path, encoding="utf-8").read().splitlines(True)
    start = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    return "".join(lines[start:])


def test_the_shipped_calibration_files_are_what_the_writer_gives():
    """Rewritten by the one library with their values unchanged: each file's document is byte for byte what
    dump_yaml writes of the data it holds (so a re-run of its fit reproduces the file)."""
    for name in WRITTEN:
        body = _body(os.path.join(ROOT, "calibration", name))
        width = 80 if name == "llamacpp_bands.yaml" else 120
        assert dump_yaml(parse_yaml(body), width=width) == body, name


def test_numbers_are_written_so_yaml_1_1_readers_see_numbers_too():
    text = dump_yaml({"a": 1e-05, "b": 3e20, "c": 0.5, "d": float("inf"), "e": -2, "f": "1e-05", "g": "on"})
    assert "a: 1.0e-05\n" in text and "b: 3.0e+20\n" in text and "d: .inf\n" in text
    assert parse_yaml(text) == {"a": 1e-05, "b": 3e20, "c": 0.5, "d": math.inf, "e": -2, "f": "1e-05", "g": "on"}


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-10**18, 10**18) | st.floats(allow_nan=False)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)


@given(plain)
def test_what_the_project_writes_it_reads_back_as_the_same_data(data):
    assert parse_yaml(dump_yaml(data)) == data
