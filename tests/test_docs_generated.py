"""Generated pages are what their generator writes today: docs/advise_study.md (benchmarks/advise_study.py, about
6 s) against a fresh run, every figure but the search's wall time. (docs/fidelity.md takes `sim validate --public`
about 2 minutes on 2 cores: its headline is checked where it is quoted, tests/test_docs_quoted_figures.py.)"""

from __future__ import annotations

import importlib.util
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECONDS_COLUMN = 5  # of the catalog machines' table: the search's wall time, which differs run to run


def _study():
    spec = importlib.util.spec_from_file_location("advise_study", os.path.join(ROOT, "benchmarks", "advise_study.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_wall_time(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        cells = re.split(r"(?<!\\)\|", line)  # a cell's escaped pipes (a regex's alternatives) stay in it
        if line.startswith("| ") and len(cells) == 12 and re.fullmatch(r" \d+\.\d ", cells[SECONDS_COLUMN]):
            cells[SECONDS_COLUMN] = " s "
        out.append("|".join(cells))
    return out


def test_the_advise_study_page_is_what_the_study_writes():
    study = _study()
    fresh = _without_wall_time(study.public_sweeps() + study.catalog_machines())
    with open(os.path.join(ROOT, "docs", "advise_study.md"), encoding="utf-8") as fh:
        page = _without_wall_time(fh.read().splitlines())
    missing = [line for line in fresh if line and line not in page]
    assert not missing, "docs/advise_study.md is stale: run python benchmarks/advise_study.py --out " \
                        "docs/advise_study.md; first stale line: " + missing[0]
    assert any(" s |" in line for line in page), "the wall-time column was not found (its position changed?)"
