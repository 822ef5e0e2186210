"""Runnable documentation: the convention README.md and docs/*.md follow, its parser and its checks (used by
tests/test_docs_commands.py, and by benchmarks/docs_commands.py for the slow blocks).

- A fenced block with the info string ``console`` is a session. A line starting with ``$ `` is a command (a line
  ending in ``\\`` continues on the next); the lines after it, up to the next ``$ `` line or the block's end, are
  what it prints. Each quoted line must appear in the real output as a whole line (trailing blanks ignored), in the
  order quoted; other lines may come between two quoted lines. A line that is exactly ``...`` tells the reader that
  lines were left out and is ignored, as are blank quoted lines. The output is stdout, or stdout and stderr for a
  command expected to fail.
- ``$ S=a.b; G=$S.c`` defines shell variables for the block's later commands: ``$NAME`` and ``${NAME}`` expand as a
  shell would (not inside single quotes), in the order they were defined; an undefined one is an error.
- ``CMD && CMD`` runs both, in order; ``NAME=VALUE CMD`` sets an environment variable; a trailing ``# exit N`` says
  the command exits with N (default 0); any other ``# ...`` is a comment. Pipes and redirections are refused.
- ``sim`` runs in-process (click's CliRunner); ``python -c CODE`` in a subprocess. Checked, not run: ``pip install``
  of this project (``-e .`` or ``-e '.[EXTRA]'``), ``pytest`` (its paths must exist), ``python benchmarks/X.py``
  (the file must exist), ``mkdocs`` and ``python -m mkdocs``. Any other program is an error.
- A block's commands run in order in one fresh folder holding symlinks to the checkout's scenarios/, calibration/
  and benchmarks/. A command that writes (``--out``, ``-o``, ``--write``, or by default) through them into the
  checkout is refused unless its block is slow. Every ``--out``/``-o``/``--write`` target exists after its command.
- ``<!-- docs-test: slow -->`` on the line right before the opening fence marks a block slow: its sim commands are
  only parsed (subcommand, options, choices, files that must exist; what an earlier command of the block would
  write is stood in for by an empty file or folder); benchmarks/docs_commands.py runs them for real.
- A console block whose last command prints ``--markdown`` and quotes nothing, followed (after blank lines) by a
  Markdown table: the table is that command's stdout, byte for byte.
- A ``python`` block runs in such a folder, cwd there (compiled only, when slow).
- A code span in prose that starts with ``sim `` names a subcommand and only options of it or of ``sim``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from docs_text import ROOT, doc_files, fenced_blocks, read_doc

SLOW_MARK = "<!-- docs-test: slow -->"
LINKED = ("scenarios", "calibration", "benchmarks")  # what a fresh folder links to in the checkout
WRITE_OPTIONS = {"--out", "-o", "--write"}
REFUSED = {"|", "||", ">", ">>", "<", "2>", "2>&1", "&>", "&"}
INSTALLS = ("pip install -e . && sim run scenarios/gen3_5090.yaml", "pip install -e '.[test]' && pytest -q")


class DocsError(Exception):
    """A block the convention cannot read, or a check it fails; the message starts with FILE:LINE."""


@dataclass(frozen=True)
class Block:
    """A fenced ``console`` or ``python`` block of a doc: ``line`` is its opening fence's (1-based)."""

    path: str
    index: int
    line: int
    info: str
    body: tuple[str, ...]
    slow: bool = False
    table_after: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.path}:{self.index}"

    def at(self, offset: int) -> str:
        """FILE:LINE of the block's line ``offset`` (0: the first line after the fence)."""
        return f"{self.path}:{self.line + 1 + offset}"


@dataclass(frozen=True)
class Step:
    """One program run: its arguments (the program first) and the environment variables set before it."""

    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """A ``$ `` line (with its continuations): where it is, its steps, the exit code expected, what it quotes."""

    where: str
    text: str
    steps: tuple[Step, ...]
    exit_code: int
    quoted: tuple[str, ...]


# --- reading a doc into blocks ---------------------------------------------------------------------------------

def doc_blocks(path: str, text: str) -> list[Block]:
    """Every ``console`` and ``python`` block of one doc, numbered from 1 in the order they appear."""
    lines = text.splitlines()
    found = []
    for line, info, body in fenced_blocks(text):
        if info not in ("console", "python"):
            continue
        slow = line >= 2 and lines[line - 2].strip() == SLOW_MARK
        found.append(Block(path, len(found) + 1, line, info, tuple(body), slow, table_after(lines, line + len(body))))
    return found


def table_after(lines: list[str], fence_line: int) -> tuple[str, ...]:
    """The Markdown table right after the closing fence on line ``fence_line + 1`` (1-based), blank lines between."""
    i = fence_line + 1  # 0-based index of the line after the closing fence
    while i < len(lines) and not lines[i].strip():
        i += 1
    table = []
    while i < len(lines) and lines[i].startswith("|"):
        table.append(lines[i])
        i += 1
    return tuple(table)


def all_blocks() -> list[Block]:
    """The runnable blocks of README.md and every docs page."""
    return [block for path in doc_files() for block in doc_blocks(path, read_doc(path))]


# --- reading a console block into commands ---------------------------------------------------------------------

ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=\S*")
EXIT_MARK = re.compile(r"\s#\s*exit\s+(\d+)\s*$")


def console_commands(block: Block) -> list[Command]:
    """The commands of a console block, variables expanded; DocsError on what the convention does not allow."""
    variables: dict[str, str] = {}
    commands = []
    lines, i = block.body, 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        if not lines[i].startswith("$ "):
            raise DocsError(f"{block.at(i)}: {lines[i].strip()[:60]!r} comes before any command: a console block "
                            "starts with a `$ ` line")
        start, text = i, lines[i][2:]
        while text.endswith("\\"):
            i += 1
            if i == len(lines) or lines[i].startswith("$ "):
                raise DocsError(f"{block.at(i - 1)}: the command ends in '\\' but no line continues it")
            text = text[:-1].rstrip() + " " + lines[i].strip()
        quoted, i = [], i + 1
        while i < len(lines) and not lines[i].startswith("$ "):
            quoted.append(lines[i])
            i += 1
        if assign(text, variables, block.at(start)):
            if any(q.strip() for q in quoted):
                raise DocsError(f"{block.at(start)}: an assignment prints nothing, yet lines follow it")
            continue
        commands.append(command(text, variables, quoted, block.at(start)))
    return commands


def assign(text: str, variables: dict[str, str], where: str) -> bool:
    """Whether ``text`` is ``NAME=VALUE; NAME=VALUE``; if so, its values (expanded) go into ``variables``."""
    parts = [part.strip() for part in text.split(";") if part.strip()]
    if not parts or not all(ASSIGNMENT.fullmatch(part) for part in parts):
        return False
    for part in parts:
        name, value = part.split("=", 1)
        variables[name] = expand(value, variables, where)
    return True


def expand(text: str, variables: dict[str, str], where: str) -> str:
    """``$NAME`` and ``${NAME}`` replaced as a shell does: not inside single quotes, not after a backslash."""
    out, quote, i = [], None, 0
    while i < len(text):
        c = text[i]
        if c == "'" and quote != '"':
            quote = None if quote == "'" else "'"
        elif c == '"' and quote != "'":
            quote = None if quote == '"' else '"'
        elif c == "\\" and quote != "'" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        elif c == "$" and quote != "'":
            found = re.match(r"\$(?:\{(\w+)\}|([A-Za-z_]\w*))", text[i:])
            if found:
                name = found.group(1) or found.group(2)
                if name not in variables:
                    raise DocsError(f"{where}: ${name} is not defined earlier in the block")
                out.append(variables[name])
                i += found.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def command(text: str, variables: dict[str, str], quoted: list[str], where: str) -> Command:
    """One command line: expanded, split into words and steps; its expected exit code from ``# exit N``."""
    mark = EXIT_MARK.search(text)
    try:
        words = shlex.split(expand(text, variables, where), comments=True)
    except ValueError as exc:
        raise DocsError(f"{where}: cannot split {text[:60]!r} into words: {exc}") from None
    bad = sorted(REFUSED.intersection(words))
    if bad:
        raise DocsError(f"{where}: {' '.join(bad)}: pipes and redirections are not run; show the command alone")
    steps, current = [], []
    for word in [*words, "&&"]:
        if word != "&&":
            current.append(word)
            continue
        if not current:
            raise DocsError(f"{where}: an empty command around '&&' in {text[:60]!r}")
        env = {}
        while current and ASSIGNMENT.fullmatch(current[0]) and len(current) > 1:
            name, value = current.pop(0).split("=", 1)
            env[name] = value
        steps.append(Step(tuple(current), env))
        current = []
    return Command(where, text, tuple(steps), int(mark.group(1)) if mark else 0, tuple(quoted))


# --- checking a command's output -------------------------------------------------------------------------------

def missing_line(quoted: tuple[str, ...] | list[str], output: str) -> str | None:
    """The first quoted line not found, whole and in order, in ``output`` (None when all are)."""
    real = [line.rstrip() for line in output.splitlines()]
    at = 0
    for line in quoted:
        line = line.rstrip()
        if line == "..." or not line.strip():
            continue
        try:
            at = real.index(line, at) + 1
        except ValueError:
            return line
    return None


def tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a command's output, for a failure message."""
    shown = text.splitlines()
    return "\n".join((["..."] if len(shown) > lines else []) + shown[-lines:])


# --- programs --------------------------------------------------------------------------------------------------

def project_extras() -> set[str]:
    """The optional-dependency groups pyproject.toml declares (what ``pip install -e '.[X]'`` may name)."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        return set(tomllib.load(fh)["project"].get("optional-dependencies", {}))


def check_not_run(args: tuple[str, ...], where: str) -> bool:
    """True for a program the docs show but the test does not run (after checking its form); False for one it
    runs (sim, python -c); DocsError for any other."""
    program = args[0]
    if program == "pip":
        target = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", args[3]) if len(args) == 4 else None
        extras = set(target.group(1).split(",")) if target and target.group(1) else set()
        if args[1:3] != ("install", "-e") or not target or not extras <= project_extras():
            raise DocsError(f"{where}: {shlex.join(args)}: the docs install this project, `pip install -e .` or "
                            f"`pip install -e '.[EXTRA]'` with EXTRA in {sorted(project_extras())}")
        return True
    if program == "pytest":
        missing = [a for a in args[1:] if a.startswith("tests") and not os.path.exists(os.path.join(ROOT,
                                                                                                   a.split("::")[0]))]
        if missing:
            raise DocsError(f"{where}: pytest {missing[0]}: no such test file")
        return True
    if program == "mkdocs" or args[:3] == ("python", "-m", "mkdocs"):
        return True
    if program == "python" and len(args) > 1 and args[1].startswith("benchmarks/"):
        if not os.path.isfile(os.path.join(ROOT, args[1])):
            raise DocsError(f"{where}: python {args[1]}: no such file in the checkout")
        return True
    if program == "sim" or args[:2] == ("python", "-c"):
        return False
    raise DocsError(f"{where}: {program}: a program the docs test does not know (it runs sim and python -c, and "
                    "checks pip install, pytest, python benchmarks/*.py and mkdocs)")


def parse_sim(args: tuple[str, ...], where: str):
    """click's parse of ``sim ARGS`` without running it: (subcommand name, its context), or None for --help and
    --version; DocsError for an unknown command or option, a bad value or choice, a missing file."""
    import click

    from sim.cli import main

    try:
        ctx = main.make_context("sim", list(args))
        protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args  # click < 8.2
        rest = [*protected, *ctx.args]
        if not rest:
            raise DocsError(f"{where}: `sim` without a command")
        name, cmd, rest = main.resolve_command(ctx, rest)
        sub = cmd.make_context(name, rest, parent=ctx)
    except click.exceptions.Exit:
        return None
    except click.ClickException as exc:
        raise DocsError(f"{where}: sim {shlex.join(args)}: {exc.format_message()}") from None
    for param in sub.command.params:  # most commands check their files themselves (one-line errors): here too
        if isinstance(param.type, click.Path) and not WRITE_OPTIONS & set(param.opts):
            given = sub.params.get(param.name)
            for path in given if isinstance(given, tuple) else [given]:
                if isinstance(path, str) and not os.path.exists(path):
                    raise DocsError(f"{where}: sim {name}: {path}: no such file or folder (from the checkout's root, "
                                    "or written earlier in the block)")
    return name, sub


def write_targets(name: str, ctx) -> list[str]:
    """The paths a parsed sim command writes: its --out, -o or --write value, and what it writes by default."""
    import click

    params = ctx.params
    targets = [params[p.name] for p in ctx.command.params if isinstance(p, click.Option)
               and WRITE_OPTIONS & set(p.opts) and isinstance(params.get(p.name), str)]
    if name == "validate" and params.get("public"):  # sim/cli/calibration.py: _public
        targets += [os.path.join(params["root"], "calibration", "llamacpp_bands.yaml")]
        targets += [] if params.get("out") else [os.path.join(params["root"], "docs", "fidelity.md")]
    if name == "fit-offload" and not params.get("out") and not params.get("bench_files"):  # sim/cli/llamacpp.py
        targets.append(os.path.join("calibration", "llamacpp.yaml"))
    return targets


def in_checkout(path: str) -> bool:
    """Whether ``path`` (from the current folder) lies in the checkout, reached through a symlink."""
    real, root = os.path.realpath(path), os.path.realpath(ROOT)
    return real == root or real.startswith(root + os.sep)


# --- running -----------------------------------------------------------------------------------------------------

Runner = Callable[[Step], tuple[int, str, str]]  # a step -> (exit code, stdout, stdout and stderr)


def run_in_process(step: Step) -> tuple[int, str, str]:
    """``sim ARGS`` through click's CliRunner in this process; ``python -c`` in a subprocess."""
    if step.args[0] != "sim":
        return run_subprocess(step)
    from click.testing import CliRunner

    from sim.cli import main

    result = CliRunner().invoke(main, list(step.args[1:]), catch_exceptions=False, env=step.env or None)
    return result.exit_code, result.stdout, result.output


def run_subprocess(step: Step) -> tuple[int, str, str]:
    """The step as its own process (sim as ``python -m sim``), in the current folder."""
    args = [sys.executable, "-m", "sim", *step.args[1:]] if step.args[0] == "sim" else [sys.executable,
                                                                                         *step.args[1:]]
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **step.env}, check=False)
    return done.returncode, done.stdout, done.stdout + done.stderr


@contextmanager
def inside(folder: str) -> Iterator[None]:
    """The current folder set to ``folder`` for the duration."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def user_folder(folder: str) -> str:
    """``folder`` made like a fresh checkout's: symlinks to the shipped scenarios, calibrations and benchmarks."""
    for name in LINKED:
        os.symlink(os.path.join(ROOT, name), os.path.join(folder, name))
    return folder


def stand_in(path: str) -> None:
    """An empty file (a name with a suffix) or folder where a command that was only parsed would write."""
    if in_checkout(path) or os.path.exists(path):
        return
    if os.path.splitext(path)[1]:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        open(path, "w").close()
    else:
        os.makedirs(path, exist_ok=True)


def run_console(block: Block, folder: str, execute: bool = True, runner: Runner = run_in_process) -> list[Command]:
    """Check (and, when ``execute``, run) every command of a console block in ``folder``; DocsError on the first
    failure. Returns the commands, in order."""
    commands = console_commands(block)
    with inside(folder):
        stdout = ""
        for cmd in commands:
            for step in cmd.steps:
                if check_not_run(step.args, cmd.where):
                    continue
                parsed = parsed_or_none(step, cmd)
                targets = write_targets(*parsed) if parsed else []
                if not execute:
                    for target in targets:
                        stand_in(target)
                    continue
                writes = [t for t in targets if in_checkout(t)]
                if writes:
                    raise DocsError(f"{cmd.where}: writes {writes[0]} into the checkout (through the symlink): mark "
                                    f"the block {SLOW_MARK} or write elsewhere")
                stdout = run_step(cmd, step, runner, targets)
        if execute and block.table_after and "--markdown" in commands[-1].steps[-1].args and not commands[-1].quoted:
            table = "\n".join(block.table_after) + "\n"
            if stdout != table:
                raise DocsError(f"{commands[-1].where}: the table after the block is not what the command prints:"
                                f"\n{stdout}")
    return commands


def parsed_or_none(step: Step, cmd: Command):
    """click's parse of a sim step (None for other programs, and for a step whose error the docs show)."""
    if step.args[0] != "sim":
        return None
    try:
        return parse_sim(step.args[1:], cmd.where)
    except DocsError:
        if cmd.exit_code != 0 and step is cmd.steps[-1]:
            return None
        raise


def run_step(cmd: Command, step: Step, runner: Runner, targets: list[str]) -> str:
    """Run one step; check its exit code, its quoted lines (those of the command's last step) and that it wrote
    every target it names. Returns its stdout."""
    code, stdout, output = runner(step)
    expected = cmd.exit_code if step is cmd.steps[-1] else 0
    if code != expected:
        raise DocsError(f"{cmd.where}: {shlex.join(step.args)}: exit code {code}, expected {expected}\n{tail(output)}")
    if step is cmd.steps[-1]:
        absent = missing_line(cmd.quoted, stdout if expected == 0 else output)
        if absent is not None:
            raise DocsError(f"{cmd.where}: the docs quote a line the command does not print (in that order):\n"
                            f"  {absent}\nit printed:\n{tail(stdout if expected == 0 else output)}")
    for target in targets if code == 0 else []:
        if not os.path.exists(target) or (os.path.isdir(target) and not os.listdir(target)):
            raise DocsError(f"{cmd.where}: {shlex.join(step.args)}: wrote nothing at {target}")
    return stdout


def run_python(block: Block, folder: str, execute: bool = True) -> None:
    """Compile a python block (tracebacks name the doc's own lines) and, when ``execute``, run it in ``folder``."""
    try:
        code = compile("\n" * block.line + "\n".join(block.body) + "\n", block.path, "exec")
    except SyntaxError as exc:
        raise DocsError(f"{block.path}:{exc.lineno}: {exc.msg}") from None
    if execute:
        with inside(folder):
            exec(code, {"__name__": "__main__"})


def checkout_state() -> dict[str, tuple[int, int]]:
    """(size, modification time in ns) of every file under the checkout's linked folders: a run writes none."""
    state = {}
    for name in LINKED:
        for folder, _, files in os.walk(os.path.join(ROOT, name)):
            for f in files:
                st = os.stat(os.path.join(folder, f))
                state[os.path.join(folder, f)] = (st.st_size, st.st_mtime_ns)
    return state


# --- prose ---------------------------------------------------------------------------------------------------------

OPTION = re.compile(r"--?[A-Za-z][\w-]*")


def span_problem(span: str) -> str | None:
    """Why a ``sim ...`` code span does not name a subcommand and options of it (None when it does); words in
    capitals (SCENARIO, FILE) are placeholders, no file is looked at."""
    import click

    from sim.cli import main

    try:
        words = shlex.split(span.replace("\\|", " "))
    except ValueError:
        words = span.split()
    words = [w.strip("[]()") for w in words[1:]]
    sub = main.commands.get(words[0]) if words and not words[0].startswith("-") else None
    if words and not words[0].startswith("-") and sub is None and not words[0].isupper():
        return f"{words[0]}: not a sim command"
    known = {o for p in main.params for o in p.opts + p.secondary_opts} | {"-h", "--help"}
    if sub is not None:
        known |= {o for p in sub.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts}
    for word in words:
        name = word.split("=", 1)[0]
        if OPTION.fullmatch(name) and name not in known and (sub is not None or words[0].startswith("-")):
            return f"{name}: not an option of sim {words[0]}"
    return None
