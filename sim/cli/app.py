"""The ``sim`` command group and what every command shares: one-line errors and exit codes, ``--out`` folders,
the common options, ``--quiet``."""

from __future__ import annotations

import errno
import functools
import io
import os
import sys

import click

from sim.core.errors import ScenarioError, SimulationError, cut, one_line

MAX_USAGE_CHARS = 500  # of a usage error (a bad option value is quoted in it), cut in the middle beyond
READER_GONE = 128 + 13  # exit status when stdout's reader went away: 128 + SIGPIPE, as the shell reports `yes | head`


def fail(message: str, code: int) -> None:
    click.echo(f"sim: error: {message}", err=True)
    sys.exit(code)


class StdoutClosed(Exception):
    """The reader of stdout went away (EPIPE: ``sim run ... | head -1``): the rest of the output is not wanted."""


class StdoutError(OSError):
    """stdout cannot be written for another reason (closed with ``>&-``, a full disk): ``filename`` is "stdout"."""


class _Stdout(io.RawIOBase):
    """File descriptor 1 (None: closed when sim started), its write errors named: EPIPE raises
    :class:`StdoutClosed`, any other error :class:`StdoutError`. After the first error every write is dropped (the
    output is lost already), so that flushing at exit cannot raise again."""

    def __init__(self, fd: int | None):
        super().__init__()
        self._fd = fd
        self._failed = False
        self.name = "<stdout>"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._fd is not None and os.isatty(self._fd)

    def fileno(self) -> int:
        if self._fd is None:
            raise OSError(errno.EBADF, "stdout is closed")
        return self._fd

    def write(self, data) -> int:  # bytes-like (bytes, bytearray or memoryview)
        if self._failed:
            return len(data)
        try:
            if self._fd is None:
                raise OSError(errno.EBADF, "Bad file descriptor (stdout is closed)")
            return os.write(self._fd, data)
        except OSError as exc:
            self._failed = True
            if exc.errno == errno.EPIPE:
                raise StdoutClosed() from None
            raise StdoutError(exc.errno, exc.strerror or str(exc), "stdout") from None


def guard_stdout() -> None:
    """Make sys.stdout name its failures (see :class:`_Stdout`); a closed file descriptor 1 is held on /dev/null, so
    no file sim opens takes its place. Not when stdout is already replaced (a test capturing it)."""
    out = sys.stdout
    if out is not sys.__stdout__:  # replaced already: by a test's capture, or by this function
        return
    fd = None
    if out is not None:
        try:
            out.flush()
            fd = out.fileno()
            os.fstat(fd)
        except (OSError, ValueError):
            fd = None
    if fd is None:
        try:
            held = os.open(os.devnull, os.O_WRONLY)
            if held != 1:
                os.dup2(held, 1)
                os.close(held)
        except OSError:
            pass
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_Stdout(fd)), encoding=getattr(out, "encoding", None) or "utf-8",
                                  errors=getattr(out, "errors", None) or "strict",
                                  line_buffering=bool(getattr(out, "line_buffering", False)))


def user_errors(fn):
    """Bad input -> one line per problem on stderr and exit 2; an impossible simulation -> exit 1. Never a
    traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            for line in exc.lines()[:-1]:  # every problem of the file at once, each on its own line
                click.echo(f"sim: error: {line}", err=True)
            fail(exc.lines()[-1], 2)
        except SimulationError as exc:
            scenario = kwargs.get("scenario")
            fail(f"{scenario}: {exc}" if scenario else str(exc), 1)
        except OSError as exc:  # writing --out, a calibration file or stdout (StdoutError, named "stdout")
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}cannot write: {exc.strerror or exc}", 2)

    return wrapper


FILE_SUFFIXES = (".json", ".csv", ".yaml", ".yml", ".png", ".svg", ".pdf", ".parquet", ".txt", ".md", ".html",
                 ".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".bmp", ".webp", ".eps", ".ps", ".xlsx")  # named as files


def out_path(out: str, name: str, suffixes: tuple[str, ...]) -> str:
    """The file ``--out`` names: ``name`` inside the folder ``out``, or ``out`` itself when it ends in one of
    ``suffixes`` (the file form earlier commands wrote). A path ending in another file type is refused."""
    suffix = os.path.splitext(out)[1].lower()
    if suffix in suffixes:
        return out
    if suffix in FILE_SUFFIXES and not os.path.isdir(out):
        raise ScenarioError("--out", out, f"a folder to write {name} into, or a file ending in {', '.join(suffixes)}")
    return os.path.join(out, name)


def out_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--out`` of the commands that write several files: a folder; a path named like a file is refused (it would
    become a folder of that name)."""
    if value is not None and os.path.splitext(value)[1].lower() in FILE_SUFFIXES and not os.path.isdir(value):
        raise click.BadParameter(f"'{value}' looks like a file name: expected a folder (the files inside it have "
                                 "fixed names)", ctx=ctx, param=param)
    return value


def writable_folder(folder: str, given: str) -> None:
    """Make ``folder`` (for ``--out``) or say why it cannot be written, before minutes of work rather than after."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        pass
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ScenarioError("--out", given, "a folder that exists, or can be made, and is writable")


def calibration_out(scenario: str, out: str, default: str) -> str:
    """The calibration file ``--out`` names: ``out`` itself when it ends in .yaml; in the folder ``out``, the one of
    the scenario's ``calibrations:`` entries that lies in that folder (so the scenario reads back what was fitted),
    else ``default``."""
    if os.path.splitext(out)[1].lower() in (".yaml", ".yml"):
        return out
    from sim.config.yaml_io import read_yaml

    raw = read_yaml(scenario)
    entries = raw.get("calibrations") if isinstance(raw, dict) else None
    here = os.path.dirname(os.path.abspath(scenario))
    inside = [os.path.basename(e) for e in entries or [] if isinstance(e, str)
              and os.path.dirname(os.path.normpath(os.path.join(here, e))) == os.path.abspath(out)]
    return out_path(out, inside[0] if len(inside) == 1 else default, (".yaml", ".yml"))


def _quiet(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from sim.core.progress import set_enabled

        set_enabled(False)


quiet_option = click.option("--quiet", is_flag=True, expose_value=False, callback=_quiet,
                            help="No progress display (there is none either when stderr is not a terminal).")


def warn_implausible(config, path: str, skip: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Values that validate but are physically implausible, as warnings on stderr (the run goes on); those in
    ``skip`` (already said) are not repeated. Returns the warnings."""
    from sim.config.plausibility import plausibility_warnings

    found = plausibility_warnings(config, path)
    for w in found:
        if w not in skip:
            click.echo(f"sim: warning: {w}", err=True)
    return set(found)


def common_options(fn):
    """The options of the commands that run a scenario: --seed, --out (-o), --json, --set and --quiet."""
    fn = quiet_option(fn)
    fn = click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
                      help="Change a scenario value by dotted key path (repeatable).")(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, nothing else.")(fn)
    fn = click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None, callback=out_folder,
                      help="Write summary.json and tidy CSV tables into this folder.")(fn)
    fn = click.option("--seed", type=click.IntRange(min=0), default=None,
                      help="Random seed, a non-negative integer (default: the scenario's).")(fn)
    return fn


class Interrupted(Exception):
    """Ctrl-C inside a command, carried past click's own handling (which prints an empty line before its Abort)."""


class OneLineErrors(click.Group):
    """Usage errors (a bad option, a missing argument) as one line on stderr with exit code 2, like every error."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted from None

    def main(self, *args, **kwargs):
        # numpy's OpenBLAS starts a thread per core when numpy is imported (tens of ms of a short command); sim's
        # matrices are small and a sweep is parallel by processes: one BLAS thread, unless the user chose a number
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from sim.core.progress import set_enabled

        set_enabled(None)  # a progress display when stderr is a terminal, unless the command says --quiet
        guard_stdout()
        kwargs.pop("standalone_mode", None)
        given = args[0] if args else kwargs.get("args")
        nul = next((a for a in (given or ()) if isinstance(a, str) and "\0" in a), None)
        if nul is not None:  # no shell passes one; a caller of main() can, and os.stat would raise on it
            fail(f"command line: {cut(one_line(nul), 80)}: an argument holds a NUL byte: expected text without one", 2)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except StdoutClosed:  # the reader went away (| head): end quietly, as a tool killed by SIGPIPE does
            sys.exit(READER_GONE)
        except StdoutError as exc:
            fail(f"stdout: cannot write: {exc.strerror}", 2)
        except click.exceptions.NoArgsIsHelpError as exc:  # plain `sim`: the help, as --help prints it
            click.echo(exc.ctx.get_help() if exc.ctx else self.get_help(click.Context(self)))
            sys.exit(0)
        except click.UsageError as exc:
            where = f"{exc.ctx.command_path}: " if exc.ctx else ""
            fail(cut(where + exc.format_message(), MAX_USAGE_CHARS), 2)  # one short line, however long the value
        except click.exceptions.Exit as exc:  # --help
            sys.exit(exc.exit_code)
        except (click.Abort, Interrupted, KeyboardInterrupt):
            fail("interrupted", 130)
        except Exception as exc:  # a bug, not bad input: still one line, with a way to get the traceback
            if os.environ.get("SIM_DEBUG"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (a bug: please report it; "
                  "SIM_DEBUG=1 shows the traceback)", 70)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sim", message="sim %(version)s", version=None)
def main() -> None:
    """sim: load and serve LLMs on imperfect hardware, simulated."""
