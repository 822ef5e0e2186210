"""The project's documentation as tests read it: README.md and every page under docs/ (the site's Markdown), their
text and their fenced blocks."""

from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATED = {"docs/commands.md"}  # the command reference: a directive, its text is generated from the click commands


def doc_files() -> list[str]:
    """README.md and docs/*.md, relative to the project root (forward slashes), README first; docs/research/ holds
    notes that quote other projects' code and logs, not commands of sim."""
    pages = glob.glob(os.path.join(ROOT, "docs", "*.md"))
    rel = sorted(os.path.relpath(p, ROOT).replace(os.sep, "/") for p in pages)
    return ["README.md"] + [p for p in rel if p not in GENERATED]


def read_doc(path: str) -> str:
    """The text of one documentation file, ``path`` relative to the project root."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


def all_docs_text() -> str:
    """README.md and every docs page, one after another (for "the docs say X somewhere")."""
    return "\n".join(read_doc(path) for path in doc_files())


FENCE = re.compile(r"^( *)(`{3,}|~{3,})[ \t]*([^`\s]*)[^`\n]*$")


def fenced_blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line of the opening fence, 1-based; info word, lower case; the block's lines, dedented by the fence's
    indent) of every fenced block; an unclosed fence runs to the end, as CommonMark reads it."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = len(opening.group(1)), opening.group(2), opening.group(3).lower()
        body, j = [], i + 1
        while j < len(lines) and not re.fullmatch(rf" *{fence[0]}{{{len(fence)},}}[ \t]*", lines[j]):
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            j += 1
        found.append((i + 1, info, body))
        i = j + 1
    return found


def find_block(containing: str, info: str | None = None) -> tuple[str, int, list[str]]:
    """(file, line, lines) of the first fenced block of the docs (README first) with a line containing
    ``containing`` and, if given, that info word; an AssertionError naming what is missing otherwise."""
    for path in doc_files():
        for line, word, body in fenced_blocks(read_doc(path)):
            if (info is None or word == info) and any(containing in b for b in body):
                return path, line, body
    raise AssertionError(f"README.md and docs/: no {info or 'fenced'} block shows {containing!r}")


SPAN = re.compile(r"(?<!`)`(sim [^`]+)`(?!`)")


def code_spans(text: str) -> list[tuple[int, str]]:
    """(line, text) of every code span of the prose (fenced blocks left out) that starts with ``sim ``."""
    lines = text.splitlines()
    for line, _, body in fenced_blocks(text):
        for i in range(line - 1, min(line + len(body) + 1, len(lines))):
            lines[i] = ""
    prose = "\n".join(lines)
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in SPAN.finditer(prose)]
