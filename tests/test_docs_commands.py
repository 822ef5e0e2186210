"""Every command README.md and docs/*.md show runs as written and prints the lines they quote (the convention is in
tests/docs_blocks.py; slow blocks are parsed here and run by benchmarks/docs_commands.py); python blocks run; every
`sim ...` code span of the prose names a real command and its options. The docs themselves are the expectation:
no copy of an output is kept anywhere else."""

from __future__ import annotations

import re

import pytest
from docs_blocks import (
    INSTALLS,
    SLOW_MARK,
    Block,
    DocsError,
    Step,
    all_blocks,
    checkout_state,
    console_commands,
    doc_blocks,
    missing_line,
    run_console,
    run_python,
    span_problem,
    user_folder,
)
from docs_text import code_spans, doc_files, fenced_blocks, read_doc

BLOCKS = all_blocks()
CONSOLE = [b for b in BLOCKS if b.info == "console"]
PYTHON = [b for b in BLOCKS if b.info == "python"]


@pytest.fixture
def folder(tmp_path) -> str:
    """A fresh folder like a new user's checkout (symlinks to scenarios/, calibration/, benchmarks/)."""
    return user_folder(str(tmp_path))


def test_the_readme_and_the_docs_show_sessions_to_run():
    assert any(b.path == "README.md" for b in CONSOLE), "README.md: no console block (```console, `$ ` lines)"
    assert len({b.path for b in CONSOLE}) >= 3, "docs/: fewer than two pages show a console session"


@pytest.mark.parametrize("block", CONSOLE, ids=lambda b: b.id)
def test_every_shown_command_runs_and_prints_what_the_docs_quote(block, folder):
    before = checkout_state()
    run_console(block, folder, execute=not block.slow)
    changed = sorted(path for path, state in checkout_state().items() if before.get(path) != state)
    assert not changed, f"{block.id}: wrote into the checkout: {changed[:3]}"


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.id)
def test_every_python_block_runs(block, folder):
    run_python(block, folder, execute=not block.slow)


@pytest.mark.parametrize("path", doc_files())
def test_sim_code_spans_name_real_commands_and_their_options(path):
    problems = [f"{path}:{line}: `{span}`: {why}" for line, span in code_spans(read_doc(path))
                if (why := span_problem(span))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", doc_files())
def test_commands_are_shown_as_console_sessions_and_slow_marks_precede_a_block(path):
    """A fence of another kind showing `$ ` or `sim COMMAND` lines would never run (the README's two install
    commands excepted); a docs-test comment anywhere but right before a runnable block would mark nothing."""
    from sim.cli import main

    text = read_doc(path)
    command = re.compile(rf"(\$ |sim ({'|'.join(map(re.escape, main.commands))})( |$))")
    for line, info, body in fenced_blocks(text):
        if info in ("console", "python") or tuple(b for b in body if b.strip()) == INSTALLS:
            continue
        shown = [b for b in body if command.match(b)]
        assert not shown, f"{path}:{line}: a ```{info} block shows {shown[0]!r}: make it ```console with `$ `"
    lines = text.splitlines()
    runnable = {b.line for b in doc_blocks(path, text)}
    for i, line in enumerate(lines, 1):
        if "docs-test" in line:
            assert line.strip() == SLOW_MARK and i + 1 in runnable, (
                f"{path}:{i}: {line.strip()!r}: the one mark is {SLOW_MARK}, on the line right before the opening "
                "fence of a console or python block")


# --- the parser and the checks on small documents ----------------------------------------------------------------

def block(markdown: str, path: str = "doc.md") -> Block:
    """The one runnable block of a small document."""
    (found,) = doc_blocks(path, markdown)
    return found


def fake(stdout: str, code: int = 0):
    """A runner printing ``stdout`` with exit ``code`` whatever it is given (commands still parsed by click)."""
    return lambda step: (code, stdout, stdout)


def never(step: Step):
    raise AssertionError(f"ran {step.args}")


SESSION = """Some prose.

```console
$ S=machines.strata_box; G=$S.gpus.gpu0
$ sim compare scenarios/gen3_5090.yaml \\
    --set $G.reserved_gib=0 --vs "a: $G.slot_gen=4" --vs 'b: $G' --metric decode_tok_s  # a comment
metric  unit
...
decode_tok_s
$ SIM_DEBUG=1 sim catalog rtx4090 && sim schema
```
"""


def test_continuations_variables_quotes_and_steps():
    compare, catalog = console_commands(block(SESSION))
    assert compare.where == "doc.md:5" and compare.quoted == ("metric  unit", "...", "decode_tok_s")
    g = "machines.strata_box.gpus.gpu0"
    assert compare.steps[0].args == ("sim", "compare", "scenarios/gen3_5090.yaml", "--set", f"{g}.reserved_gib=0",
                                     "--vs", f"a: {g}.slot_gen=4", "--vs", "b: $G", "--metric", "decode_tok_s")
    assert [s.args for s in catalog.steps] == [("sim", "catalog", "rtx4090"), ("sim", "schema")]
    assert catalog.steps[0].env == {"SIM_DEBUG": "1"} and catalog.steps[1].env == {} and catalog.exit_code == 0


def test_quoted_lines_appear_whole_and_in_order():
    assert missing_line(["a", "...", "c"], "a\nb\nc\n") is None
    assert missing_line(["b", "", "c  "], "a\nb  \nx\nc\n") is None  # trailing blanks and blank quoted lines
    assert missing_line(["c", "a"], "a\nb\nc\n") == "a"
    assert missing_line(["b"], "a b\n") == "b"
    assert missing_line(["  b"], "b\n") == "  b"  # leading blanks are part of the line


def test_the_slow_mark_is_the_line_right_before_the_fence():
    assert block(f"{SLOW_MARK}\n```console\n$ sim schema\n```\n").slow
    assert not block(f"{SLOW_MARK}\n\n```console\n$ sim schema\n```\n").slow
    assert [b.info for b in doc_blocks("d.md", "```\n$ x\n```\n```python\nx = 1\n```\n```yaml\na: 1\n```\n")] == [
        "python"]


@pytest.mark.parametrize("body, message", [
    ("output first\n$ sim schema", "comes before any command"),
    ("$ sim run x.yaml \\", "no line continues it"),
    ("$ sim run $SCENARIO", r"\$SCENARIO is not defined"),
    ("$ S=a; G=b\nprinted", "an assignment prints nothing"),
    ("$ sim schema | head", "pipes and redirections"),
    ("$ sim run 'x.yaml", "cannot split"),
    ("$ sim schema && && sim schema", "empty command"),
])
def test_a_block_the_convention_cannot_read_fails_with_its_line(body, message):
    with pytest.raises(DocsError, match=message) as err:
        console_commands(block(f"text\n```console\n{body}\n```\n"))
    assert str(err.value).startswith("doc.md:3")


@pytest.mark.parametrize("command, message", [
    ("curl https://example.org", "a program the docs test does not know"),
    ("pip install numpy", "install this project"),
    ("pip install -e '.[nosuchextra]'", "install this project"),
    ("pytest tests/test_nothing_here.py", "no such test file"),
    ("python benchmarks/nothing_here.py", "no such file"),
    ("sim nosuchcommand", "No such command"),
    ("sim run scenarios/gen3_5090.yaml --nosuchoption", "No such option"),
    ("sim run scenarios/no_such_scenario.yaml", "no such file or folder"),
    ("sim advise scenarios/no_such_scenario.yaml", "does not exist"),
    ("sim catalog --kind nosuchkind", "nosuchkind"),
])
def test_a_command_that_cannot_run_fails_before_running(folder, command, message):
    with pytest.raises(DocsError, match=message):
        run_console(block(f"```console\n$ {command}\n```\n"), folder, runner=never)


def test_not_run_commands_are_only_checked(folder):
    shown = ("$ pip install -e . && pip install -e '.[test]' && pytest -q\n$ pytest -m 'not slow' -n 0\n"
             "$ python benchmarks/run.py --quick\n$ mkdocs serve\n")
    assert len(run_console(block(f"```console\n{shown}```\n"), folder, runner=never)) == 4


def test_a_line_the_command_does_not_print_fails(folder):
    session = block("```console\n$ sim catalog rtx4090\nRTX 4090\n...\nbandwidth 1008\n```\n")
    run_console(session, folder, runner=fake("x\nRTX 4090\ny\nbandwidth 1008\n"))
    with pytest.raises(DocsError, match="(?s)does not print.*bandwidth 1008"):
        run_console(session, folder, runner=fake("bandwidth 1008\nRTX 4090\n"))


def test_exit_codes(folder):
    failing = block("```console\n$ sim run scenarios/gen3_5090.yaml --set x=1  # exit 2\nsim: error: x\n```\n")
    run_console(failing, folder, runner=fake("sim: error: x\n", 2))
    with pytest.raises(DocsError, match="exit code 0, expected 2"):
        run_console(failing, folder, runner=fake("sim: error: x\n", 0))
    with pytest.raises(DocsError, match="exit code 1, expected 0"):
        run_console(block("```console\n$ sim schema\n```\n"), folder, runner=fake("", 1))


def test_a_command_writing_into_the_checkout_needs_a_slow_block(folder):
    fit = "$ sim fit-routing --table calibration/routing_public.csv --out calibration/routing.yaml\n"
    with pytest.raises(DocsError, match="into the checkout"):
        run_console(block(f"```console\n{fit}```\n"), folder, runner=never)
    with pytest.raises(DocsError, match="calibration/llamacpp.yaml into the checkout"):
        run_console(block("```console\n$ sim fit-offload\n```\n"), folder, runner=never)
    run_console(block(f"{SLOW_MARK}\n```console\n{fit}```\n"), folder, execute=False, runner=never)


def test_a_slow_block_is_parsed_with_stand_ins_for_what_it_would_write(folder):
    sweep = ("$ sim sweep scenarios/gen3_5090.yaml --axis machines.strata_box.gpus.gpu0.reserved_gib=0..16:4 "
             "--out runs/t && sim plot runs/t --y decode_tok_s -o figures\n")
    run_console(block(f"{SLOW_MARK}\n```console\n{sweep}```\n"), folder, execute=False, runner=never)
    with pytest.raises(DocsError, match="runs/other"):
        run_console(block(f"{SLOW_MARK}\n```console\n$ sim plot runs/other\n```\n"), folder, execute=False)


def test_a_target_the_command_names_must_be_written(folder):
    with pytest.raises(DocsError, match="wrote nothing at out"):
        run_console(block("```console\n$ sim run scenarios/gen3_5090.yaml --out out\n```\n"), folder,
                    runner=fake(""))


def test_a_table_after_a_markdown_comparison_is_its_output_byte_for_byte(folder):
    text = "```console\n$ sim compare scenarios/gen3_5090.yaml --markdown\n```\n\n| case | x |\n|---|---|\n\nProse\n"
    session = block(text)
    assert session.table_after == ("| case | x |", "|---|---|")
    run_console(session, folder, runner=fake("| case | x |\n|---|---|\n"))
    with pytest.raises(DocsError, match="not what the command prints"):
        run_console(session, folder, runner=fake("| case | y |\n|---|---|\n"))


def test_python_blocks_name_the_doc_line_that_fails(folder):
    with pytest.raises(ZeroDivisionError) as err:
        run_python(block("a\n\n```python\nx = 1\ny = x / 0\n```\n"), folder)
    assert err.traceback[-1].lineno + 1 == 5 and str(err.traceback[-1].path) == "doc.md"
    with pytest.raises(DocsError, match="doc.md:2"):
        run_python(block("```python\nx = (\n```\n"), folder, execute=False)


@pytest.mark.parametrize("span, problem", [
    ("sim run SCENARIO --set a.b=c --out DIR --json", None),
    ("sim logs FILE... [--csv \\| --json]", None),
    ("sim validate --public [--domain D] [--workers 2] [-o docs/fidelity.md]", None),
    ('sim llama "llama-server -m m.gguf -ngl 99" --gpu T --host H', None),
    ("sim --version", None),
    ("sim COMMAND --help", None),
    ("sim run S --no-such-option", "--no-such-option: not an option of sim run"),
    ("sim nosuch --x", "nosuch: not a sim command"),
])
def test_code_spans(span, problem):
    assert span_problem(span) == problem


def test_code_spans_are_found_in_prose_only():
    text = "See `sim run S` and `sim plot\nF`.\n```console\n$ `sim bad`\n```\nthen `sim schema`.\n"
    assert code_spans(text) == [(1, "sim run S"), (1, "sim plot\nF"), (6, "sim schema")]
