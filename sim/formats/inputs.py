"""The one input layer: every file any command reads (scenario YAML, measured tables, traces, lengths tables, engine
logs, llama-bench outputs, route traces, model configs and GGUF headers) is opened here.

Files. :func:`check_file` refuses, in one line naming the file and the key path, a path with a NUL byte, a missing
file, a folder, and anything that is not a regular file (a FIFO would hang the reader, ``/dev/zero`` would never
end); it never opens the path, so a FIFO cannot block. :func:`read_text` then reads at most ``max_bytes`` bytes
(opened without blocking and checked again on the open descriptor, so a file swapped for a pipe between the two
checks is still refused), decodes UTF-8 (a leading byte order mark dropped), refuses NUL bytes unless asked not to and
counts lines against ``max_lines``. :func:`read_head` gives a binary file's first bytes (a GGUF header) and its size.

Values. Every number a reader takes from a file is checked against the range its quantity can physically take
(:class:`sim.formats.quantities.Quantity`).
"""

from __future__ import annotations

import errno
import json
import os
import stat

from sim.core.errors import ScenarioError

MIB = 2**20
MAX_TEXT_BYTES = 256 * MIB  # a text input (table, trace, log read whole); the shipped ones: at most 1 MB
MAX_LINES = 10**7  # lines of a text input read whole
BOM = "\ufeff"


def shown_path(path: object) -> str:
    """A path as an error shows it: NUL and other control characters escaped, so the line stays one line."""
    text = os.fsdecode(path) if isinstance(path, bytes | os.PathLike) else str(path)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def file_kind(mode: int) -> str:
    """What a non-regular file is, in a user's words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse(path: str, key_path: str, mode: int, what: str) -> ScenarioError:
    if stat.S_ISDIR(mode):
        return ScenarioError(shown_path(path), key_path, f"is a directory, expected {what}")
    return ScenarioError(shown_path(path), key_path, f"not a regular file ({file_kind(mode)}): expected {what}; "
                         "save it to a file and read that")


def check_file(path: str | os.PathLike, key_path: str = "", what: str = "a file") -> os.stat_result:
    """The ``os.stat`` of ``path`` when it names a regular file; else a one-line :class:`ScenarioError` naming the
    file and ``key_path``: a NUL byte in the name, not found, a directory, a FIFO, device or socket, no permission.
    The path is never opened, so a FIFO cannot block."""
    text = os.fspath(path)
    if (b"\0" if isinstance(text, bytes) else "\0") in text:
        raise ScenarioError(shown_path(text), key_path, f"the file name holds a NUL byte: expected {what} by name")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise ScenarioError(shown_path(text), key_path, "file not found") from None
    except (OSError, ValueError) as exc:
        raise ScenarioError(shown_path(text), key_path,
                            f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(text, key_path, st.st_mode, what)
    return st


def _too_big(path: str, key_path: str, what: str, max_bytes: int) -> ScenarioError:
    size = f"{max_bytes // MIB:,} MiB" if max_bytes >= MIB else f"{max_bytes:,} bytes"
    return ScenarioError(shown_path(path), key_path, f"larger than {size}: expected {what} of at most {size}")


def read_bytes(path: str | os.PathLike, key_path: str = "", what: str = "a file", *,
               max_bytes: int = MAX_TEXT_BYTES, whole: bool = True) -> tuple[bytes, int]:
    """(the first bytes of ``path``, its size in bytes): the whole file when ``whole`` (a larger file is refused),
    else at most ``max_bytes`` (a header). Checked as :func:`check_file`, then again on the open descriptor (opened
    without blocking: a file swapped for a pipe in between is refused, never waited on)."""
    text = os.fspath(path)
    st = check_file(text, key_path, what)
    if whole and st.st_size > max_bytes:
        raise _too_big(text, key_path, what, max_bytes)
    try:
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise ScenarioError(shown_path(text), key_path, "file not found") from None
        raise ScenarioError(shown_path(text), key_path, f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(text, key_path, st.st_mode, what)
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 8 * MIB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ScenarioError(shown_path(text), key_path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        if whole:  # it grew since it was measured
            raise _too_big(text, key_path, what, max_bytes)
        data = data[:max_bytes]
    return data, st.st_size


def read_head(path: str | os.PathLike, key_path: str = "", what: str = "a file",
              max_bytes: int = MIB) -> tuple[bytes, int]:
    """(at most ``max_bytes`` bytes from the start of the regular file ``path``, its size in bytes)."""
    return read_bytes(path, key_path, what, max_bytes=max_bytes, whole=False)


def decode_text(data: bytes, path: str, key_path: str = "", what: str = "a text file", *,
                nul_ok: bool = False, max_lines: int | None = MAX_LINES) -> str:
    """``data`` as UTF-8 text (a leading byte order mark dropped), refused in one line when it is not text: invalid
    UTF-8, a NUL byte (unless ``nul_ok``), more than ``max_lines`` lines (``None``: no limit)."""
    if not nul_ok and (at := data.find(b"\0")) >= 0:
        raise ScenarioError(shown_path(path), key_path, f"not text (a NUL byte at byte {at:,}): expected {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(shown_path(path), key_path, f"not UTF-8 text (byte {exc.start:,}): expected {what}") \
            from None
    text = text.removeprefix(BOM)
    if max_lines is not None:
        breaks = text.count("\n") + text.count("\r") - text.count("\r\n")
        if breaks > max_lines:
            raise ScenarioError(shown_path(path), key_path, f"more than {max_lines:,} lines: expected {what} of at "
                                f"most {max_lines:,} lines")
    return text


def read_text(path: str | os.PathLike, key_path: str = "", what: str = "a text file", *,
              max_bytes: int = MAX_TEXT_BYTES, max_lines: int | None = MAX_LINES, nul_ok: bool = False) -> str:
    """The text of a regular file of at most ``max_bytes`` bytes and ``max_lines`` lines, UTF-8 (a leading byte
    order mark dropped), without NUL bytes (unless ``nul_ok``). Anything else is one :class:`ScenarioError` naming
    the file and ``key_path`` and saying what was expected (``what``: "a CSV table", "a YAML file", ...)."""
    data, _ = read_bytes(path, key_path, what, max_bytes=max_bytes)
    return decode_text(data, os.fspath(path), key_path, what, nul_ok=nul_ok, max_lines=max_lines)


def parse_json(text: str, source: str, key_path: str = "", what: str = "JSON") -> object:
    """``text`` parsed as JSON, or one line saying why not: a syntax error (with its line and column), nesting too
    deep, or an integer too long for Python to convert (over 4,300 digits), which ``json`` raises as ``ValueError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(source, key_path, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}: "
                            f"expected {what}") from None
    except RecursionError:
        raise ScenarioError(source, key_path, f"not valid JSON: nested too deeply: expected {what}") from None
    except ValueError:  # an integer of thousands of digits (Python converts at most 4,300)
        raise ScenarioError(source, key_path, f"an integer of more than 4,300 digits: expected {what}") from None
