"""What a pasted server command line shares whatever the program: the shell around it (pipes, list operators,
redirections, environment assignments) and the shape of a number, for the readers of llama.cpp's and vLLM's or
SGLang's command lines (:mod:`sim.llamacpp.cmdline`, :mod:`sim.serving.cmdline`)."""

from __future__ import annotations

import re
import shlex
from collections import deque

SHELL_STOP = frozenset({"|", "||", "&&", ";", "&", "|&"})  # the command ends here
REDIRECT = re.compile(r"(?:[0-9]*|&)(?:>>?|<)(&[0-9-]+)?(.*)")  # 2>&1, >out.txt, > out.txt
ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")  # VAR=value before the program
INT = re.compile(r"[+-]?[0-9]{1,12}")  # longer is out of range (and int() of 4300+ digits raises)
FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def shell_tail(args: deque[str], token: str, ignored: list[str]) -> bool:
    """Keep a pipe or list operator with the rest of the line, or a redirection, in ``ignored``; True if ``token``
    was one (``args``: the tokens after it, consumed as needed)."""
    if token in SHELL_STOP:
        ignored.append(f"{token} {shlex.join(args)}".strip())
        args.clear()
        return True
    redirect = REDIRECT.fullmatch(token)
    if redirect:
        ignored.append(token if redirect[1] or redirect[2] or not args else shlex.join([token, args.popleft()]))
    return bool(redirect)


_WINDOWS = re.compile(r"(?:^|[\s\"'])[A-Za-z]:\\")  # a drive path: the line is not a POSIX shell's


def physical_lines(line: object, source: str, max_chars: int) -> list[str]:
    """The lines of a pasted command (backslash continuations joined); not text, or longer than ``max_chars``
    characters, is a one-line error naming ``source``."""
    from sim.core.errors import ScenarioError

    if not isinstance(line, str):
        raise ScenarioError(source, "", "expected the command line as text")
    if len(line) > max_chars:
        raise ScenarioError(source, "", f"expected at most {max_chars} characters, got {len(line)}")
    return re.sub(r"\\[ \t]*\r?\n", " ", line).split("\n")


def split_words(physical: str) -> list[str]:
    """The words of one line as a POSIX shell reads them (``#`` starts a comment); a Windows line (a drive path such
    as ``C:\\\\llama``) keeps its backslashes. Unbalanced quotes raise ValueError."""
    lexer = shlex.shlex(physical, posix=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    if _WINDOWS.search(physical):
        lexer.escape = ""
    return list(lexer)
