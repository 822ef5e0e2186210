"""The documentation site builds from the docs' Markdown with `mkdocs build --strict` (a few seconds); its command
reference, generated from the click commands, lists every command of sim and every option of each; every page of
docs/ is in the navigation or listed as deliberately outside it."""

from __future__ import annotations

import glob
import html
import os
import re
import subprocess
import sys

import click
import pytest
from docs_text import ROOT

from sim.cli import main

CONFIG = os.path.join(ROOT, "mkdocs.yml")


def require_mkdocs() -> None:
    """Fail (not skip) when the site's tools are missing: they are test dependencies."""
    for module in ("mkdocs", "material", "mkdocs_click"):
        try:
            __import__(module)
        except ImportError:
            pytest.fail(f"{module} is not installed: pip install -e '.[test]'")


def config():
    """mkdocs.yml as MkDocs reads it (validated, docs_dir absolute, not_in_nav a gitignore-style matcher)."""
    from mkdocs.config import load_config

    assert os.path.exists(CONFIG), "mkdocs.yml is missing at the project root"
    return load_config(CONFIG)


def nav_pages(entry) -> set[str]:
    """Every page (a .md path) the nav names, at any depth."""
    if isinstance(entry, str):
        return {entry} if entry.endswith(".md") else set()
    if isinstance(entry, dict):
        return set().union(*(nav_pages(value) for value in entry.values()))
    if isinstance(entry, list):
        return set().union(*(nav_pages(value) for value in entry))
    return set()


def test_every_page_is_in_the_navigation_or_said_to_be_outside_it():
    require_mkdocs()
    cfg = config()
    docs = cfg["docs_dir"]
    pages = sorted(os.path.relpath(p, docs).replace(os.sep, "/")
                   for p in glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))
    in_nav = nav_pages(cfg["nav"] or [])
    assert "commands.md" in in_nav, "mkdocs.yml: the nav has no entry for the command reference (commands.md)"
    assert not in_nav - set(pages), f"mkdocs.yml: the nav names pages that do not exist: {sorted(in_nav - set(pages))}"
    outside = cfg["not_in_nav"]
    lost = [page for page in pages if page not in in_nav and not (outside and outside.match_file(page))]
    assert not lost, f"mkdocs.yml: pages neither in nav nor in not_in_nav: {lost}"
    assert "mkdocs-click" in cfg["markdown_extensions"], "mkdocs.yml: markdown_extensions lacks mkdocs-click"


def option_names(command: click.Command) -> list[str]:
    """Every option spelling of a command (--out, -o, --no-sample ...), hidden ones left out."""
    return [name for p in command.params if isinstance(p, click.Option) and not p.hidden
            for name in p.opts + p.secondary_opts]


def page_text(path: str) -> str:
    """A built page's text: tags dropped, entities decoded."""
    with open(path, encoding="utf-8") as fh:
        page = fh.read()
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_site_builds_strictly_and_its_reference_lists_every_command_and_option(tmp_path):
    require_mkdocs()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", CONFIG, "-d", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    reference = tmp_path / "commands" / "index.html"
    assert reference.exists(), "the site has no commands/index.html (docs/commands.md)"
    text = page_text(str(reference))
    starts = {}
    for name in main.commands:
        found = re.search(rf"^sim {re.escape(name)} \[OPTIONS\]", text, re.M)
        assert found, f"commands/index.html: no usage line of sim {name}"
        starts[name] = found.start()
    order = sorted(starts, key=starts.get)
    for i, name in enumerate(order):
        section = text[starts[name]:starts[order[i + 1]] if i + 1 < len(order) else len(text)]
        absent = [o for o in option_names(main.commands[name]) if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])",
                                                                                 section)]
        assert not absent, f"commands/index.html: sim {name}'s section does not list {absent}"
    head = text[:min(starts.values())]
    assert all(o in head for o in option_names(main)), f"commands/index.html: sim's own options {option_names(main)}"
