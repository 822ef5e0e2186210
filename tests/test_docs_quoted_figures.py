"""Figures the README and the docs quote from generated or shipped data: the fidelity report's headline (held-out
errors; docs/fidelity.md, written by `sim validate --public`) and the catalog's size. A re-run or a new entry that
moves a figure fails here until the quotes follow."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUANTITY = {"decode": "tg_tok_s", "prompt": "pp_tok_s", "vram": "vram_gib", "load": "load_s"}  # a row's words
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?%?(?: GiB)?")


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def headline() -> dict[str, list[str]]:
    """quantity -> the cells of the report's headline row over every backend."""
    rows = {}
    for line in _read("docs/fidelity.md").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 3 and cells[2] in ("**all**", "-") and cells[1] in QUANTITY.values():
            rows.setdefault(cells[1], cells[3:])
    return rows


def quoted_rows(name: str) -> list[tuple[str, str]]:
    """(quantity, the row's text) of every row of the page's held-out table (the one with a "held out" column)."""
    out, inside = [], False
    for line in _read(name).splitlines():
        if line.startswith("|") and "held out" in line:
            inside = True
            continue
        if not line.startswith("|"):
            inside = False
        elif inside and not set(line) <= set("|- "):
            words = line.lower()
            key = next((q for w, q in QUANTITY.items() if w in words), None)
            assert key, f"{name}: a row of the held-out table names no quantity of the report: {line}"
            out.append((key, line))
    return out


def _matches(token: str, cells: list[str]) -> bool:
    if token.endswith(" GiB"):  # the VRAM error in GiB, rounded: 0.35 GiB for the report's 0.3483
        value = float(token.removesuffix(" GiB"))
        return any(re.fullmatch(r"\d+\.\d+", c) and round(float(c), 2) == value for c in cells)
    return token in cells


@pytest.mark.parametrize("name", ["README.md", "docs/limits.md"])
def test_quoted_held_out_errors_are_the_reports(name):
    report = headline()
    rows = quoted_rows(name)
    assert {q for q, _ in rows} == set(QUANTITY.values()), f"{name}: the held-out table lost a quantity"
    for quantity, line in rows:
        cells = report[quantity]
        figures = line.split("|", 2)[2].replace("within 0.5 GiB", "within the band")  # the band's name, not a figure
        for token in NUMBER.findall(figures):
            assert _matches(token, cells), f"{name}: {token} is not in the report's {quantity} row {cells}: {line}"


def test_a_figure_the_report_does_not_give_fails():
    cells = headline()["tg_tok_s"]
    assert _matches("10.5%", cells) and not _matches("10.4%", cells) and not _matches("0.36 GiB", cells)


@pytest.mark.parametrize("name", ["README.md", "docs/hardware.md"])
def test_quoted_catalog_sizes_are_the_catalogs(name):
    from sim.catalog import entries

    quoted = re.findall(r"(\d+) (GPUs|hosts)\b", _read(name))
    assert {kind for _, kind in quoted} == {"GPUs", "hosts"}, f"{name}: the catalog's size is no longer quoted"
    for count, kind in quoted:
        assert int(count) == len(entries(kind.lower())), f"{name}: {count} {kind}, the catalog has " \
                                                         f"{len(entries(kind.lower()))}"


# Prose that restates what a command prints: (page, the sentence's figures, the page whose checked console block or
# `sim compare --markdown` table holds them, the lines of that output they come from). tests/test_docs_commands.py
# checks those outputs against the commands; this keeps the prose beside them true.
RESTATED = [
    ("README.md", "133.7 decode tok/s with 8.3 GiB of free VRAM", "docs/expert_caches.md",
     ["decode 133.7 tok/s (token-weighted", "+ free 8.31 GiB at start"]),
    ("README.md", "cut the model's 40,960-token context to 4,096 and moved the experts of 10 blocks", "README.md",
     ["context size reduced from 40,960 to 4,096, not enough: layers move;",
      "10 of its blocks with their experts elsewhere (block 38 moving GATE of its FFN)"]),
    ("README.md", "PCIe Gen4 buys 7.0% and Gen5 10.1%", "docs/expert_caches.md",
     ["| Gen4 x16 | 5,785 | 86.46 | 0.6342 | 143.0 (+7.0%) |",
      "| Gen5 x16 | 5,785 | 86.46 | 0.6342 | 147.3 (+10.1%) |"]),
]


@pytest.mark.parametrize("page, sentence, source, evidence", RESTATED, ids=[r[1][:24] for r in RESTATED])
def test_prose_restates_the_checked_output(page, sentence, source, evidence):
    assert " ".join(sentence.split()) in " ".join(_read(page).split()), f"{page} no longer says: {sentence}"
    for line in evidence:
        assert line in _read(source), f"{source}: the output {sentence!r} restates is no longer {line!r}"
