"""The README a newcomer reads first: short, opening on the two commands, one session per main question, links that
lead somewhere; and the docs' what-if tables are `sim compare --markdown` output. Running every command the README
and the docs show, and checking what they quote, is tests/test_docs_commands.py's (the what-if tables byte for byte
among them); this file checks what that generic test cannot."""

from __future__ import annotations

import os
import re

from docs_blocks import INSTALLS, all_blocks, console_commands, doc_blocks, parse_sim, user_folder
from docs_text import ROOT, fenced_blocks, read_doc

QUESTIONS = {"compare", "capacity", "breakeven", "sweep", "plot"}  # with advise or llama; sim run opens it


def readme_lines() -> list[str]:
    return read_doc("README.md").splitlines()


def test_the_readme_is_read_in_five_minutes():
    assert len(readme_lines()) <= 260, f"README.md: {len(readme_lines())} lines, at most 260"


def test_the_readme_opens_with_the_two_commands_in_a_fence(tmp_path, monkeypatch):
    line, _, body = fenced_blocks(read_doc("README.md"))[0]
    assert line <= 3 and tuple(body) == INSTALLS, f"README.md:{line}: the first block is not the two commands"
    first_run = tuple(INSTALLS[0].split(" && ")[1].split())
    monkeypatch.chdir(user_folder(str(tmp_path)))
    assert parse_sim(first_run[1:], "README.md:4")
    shown = {step.args for b in all_blocks() if b.info == "console" and not b.slow for cmd in console_commands(b)
             for step in cmd.steps}
    assert first_run in shown, "README.md and docs/: no session runs the README's first command (and quotes it)"


def test_the_readme_shows_a_session_for_each_main_question():
    shown = {step.args[1] for block in doc_blocks("README.md", read_doc("README.md")) if block.info == "console"
             for cmd in console_commands(block) for step in cmd.steps if step.args[0] == "sim" and len(step.args) > 1}
    assert QUESTIONS <= shown and shown & {"advise", "llama"}, f"README.md: no console session for "\
        f"{sorted(QUESTIONS - shown) or 'sim advise or sim llama'}"


def test_the_readme_links_lead_to_files_of_the_checkout():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", read_doc("README.md"))
    local = [link for link in links if not re.match(r"\w+://|mailto:", link)]
    assert local, "README.md: no link to the docs"
    missing = [link for link in local if not os.path.exists(os.path.join(ROOT, link))]
    assert not missing, f"README.md: links to files that do not exist: {missing}"


def test_the_docs_show_the_what_if_and_the_catalog_tables_as_sim_compare_prints_them():
    """Two `sim compare --markdown` tables (under the default scenario, and on other catalog cards), each right
    after the block that makes it, in a block that runs (so tests/test_docs_commands.py compares them)."""
    tables = [b for b in all_blocks() if b.info == "console" and b.table_after
              and "--markdown" in console_commands(b)[-1].steps[-1].args]
    assert len(tables) >= 2, f"README.md and docs/: {len(tables)} `sim compare --markdown` tables, expected 2"
    assert not [b.id for b in tables if b.slow], "a what-if table in a slow block is never compared"
    cards = [b for b in tables if any("type=rtx4090" in a for a in console_commands(b)[-1].steps[-1].args)]
    assert cards, "README.md and docs/: no what-if table over catalog cards (type=rtx4090)"
