"""llama.cpp's defaults by build: what a flag left off a command line means in the build that runs it.

A build is llama.cpp's release number (``b7410``): the count of commits on master (``git rev-list --count HEAD``, as
``cmake/build-info.cmake`` and the release workflow compute it), printed by ``--version`` as ``version: 7410
(abcdef0)`` and by llama-bench as ``build: abcdef0 (7410)``. Each row of :data:`CHANGES` names a default, its value
before and after, the pull request that changed it, and the builds around the change: ``before``, the last build
known to have the old value, and ``since``, the first known to have the new one. Where these are not adjacent the
change is not pinned to one build; a build between them is read with the new value, and :func:`defaults` says so.

Sources: the pull requests named; ``common/common.h`` and ``common/arg.cpp`` of ggml-org/llama.cpp for the values;
the release tags each PR first appears in from a downstream project's changelog of llama.cpp tags and a timeline
made with ``git describe --contains`` on a full clone (both secondary: docs/research/llamacpp_defaults.md lists
them, with what was not found).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CURRENT_BUILD = 11541  # the newest release found (about 2026-10-10; docs/research/llamacpp_defaults.md)
SERVER = ("llama-server",)
SERVER_CLI = ("llama-server", "llama-cli", "llama-batched-bench")  # the tools of common_params and its fit
BENCH = ("llama-bench",)


@dataclass(frozen=True)
class Change:
    """One default that changed: settings ``key`` from ``old`` to ``new`` for ``programs``, between build ``before``
    (the last known with ``old``; 0: not known) and build ``since`` (the first known with ``new``)."""

    key: str
    old: Any
    new: Any
    before: int
    since: int
    pr: str
    programs: tuple[str, ...]
    note: str = ""

    @property
    def pinned(self) -> bool:
        return self.before > 0 and self.since - self.before <= 4  # release tags skip a few numbers


_PR = "https://github.com/ggml-org/llama.cpp/pull/"
# -ngl: -1 is auto (the fit places layers), 999 every layer, 0 the CPU alone; -c: 0 the model's training context
CHANGES: tuple[Change, ...] = (
    Change("n_gpu_layers", 0, 999, 6324, 6325, _PR + "15434", SERVER_CLI,
           "llama: use FA + max. GPU layers by default (the library default was 0, the CPU, except on Metal)"),
    Change("flash_attn", False, "auto", 6324, 6325, _PR + "15434", SERVER_CLI,
           "-fa became on|off|auto, default auto; a bare -fa of older builds is on"),
    Change("fit", False, True, 7406, 7410, _PR + "16653", SERVER_CLI,
           "--fit: parameters the user did not set are fitted to free device memory, keeping --fit-target (1024 "
           "MiB) free on each card, the context no shorter than --fit-ctx (4096)"),
    Change("n_gpu_layers", 999, -1, 7406, 7410, _PR + "16653", SERVER_CLI,
           "an -ngl left unset is the fit's to choose (b7553, PR 18266, made it the value 'auto' and 'all' every "
           "layer)"),
    Change("ctx_size", 4096, 0, 0, 7410, _PR + "16653", SERVER_CLI,
           "-c unset: the model's training context, cut by the fit; the change is not pinned: the last common.h "
           "read with 4096 predates the fit, the first with the fit has 0"),
    Change("parallel", 1, "auto", 0, 7079, _PR + "16736", SERVER,
           "a server with one slot starts 4 sharing one unified KV cache (-kvu); until b7433 an explicit -np 1 "
           "was overridden too; the first build is not pinned (b7079 is the first known to do it)"),
    Change("explicit_np_kept", False, True, 7432, 7433, _PR + "17997", SERVER,
           "-np defaults to -1, auto (4 slots, unified KV); an explicit -np N keeps N slots, KV not unified"),
    Change("explicit_full_context", False, True, 7539, CURRENT_BUILD, _PR + "19070", SERVER_CLI,
           "an explicit -c 0 keeps the full training context (the fit no longer cuts it); before, -c 0 was cut "
           "as an unset -c was (issue 18376 at b7539); the first build is not pinned"),
    Change("flash_attn", False, "auto", 9436, 9437, _PR + "23714", BENCH,
           "llama-bench: -fa defaults to auto and -ngl to -1 (every layer) instead of off and 99"),
)


def parse_build(text: str) -> int | None:
    """A build number in a pasted line, log or bench output: ``b7410``, ``version: 7410 (abcdef0)`` (``--version``),
    ``build: abcdef0 (7410)`` (llama-bench's table and logs) or ``build = 7410``; None when there is none."""
    import re

    for pattern in (r"version:\s*(\d{3,6})\s*\(", r"build[:=]\s*[0-9a-f]{6,40}\s*\((\d{3,6})\)",
                    r"build\s*=\s*(\d{3,6})\b", r"\bb(\d{4,6})\b"):
        match = re.search(pattern, text)
        if match:
            return int(match[1])
    return None


@dataclass(frozen=True)
class BuildDefaults:
    """The defaults of one build for one program, and the notes a reader should see (a change not pinned to one
    build, a build older than the table knows)."""

    build: int
    values: dict[str, Any]
    notes: tuple[str, ...]


def defaults(program: str, build: int | None = None) -> BuildDefaults:
    """What ``program`` of ``build`` (default :data:`CURRENT_BUILD`) does with the flags :data:`CHANGES` name when a
    line leaves them off: ``n_gpu_layers`` (-1: the fit's), ``flash_attn``, ``fit``, ``ctx_size`` (0: the model's),
    ``parallel`` (``"auto"``: 4 slots sharing a unified KV cache), ``explicit_np_kept`` (an explicit ``-np 1`` is
    kept), ``explicit_full_context`` (an explicit ``-c 0`` is not cut by the fit)."""
    build = CURRENT_BUILD if build is None else build
    values: dict[str, Any] = {"n_gpu_layers": 999 if program in BENCH else 0, "flash_attn": False, "fit": False,
                              "ctx_size": 4096, "parallel": 1, "explicit_np_kept": True,
                              "explicit_full_context": False}
    notes = []
    for change in CHANGES:
        if program not in change.programs:
            continue
        if build >= change.since or (change.before and build > change.before):
            values[change.key] = change.new
            if build < change.since:
                notes.append(f"b{build} is between b{change.before} and b{change.since}, where {change.key}'s "
                             f"default changed ({change.pr}): read with the new value, {change.new!r}")
        elif not change.before:
            notes.append(f"b{build} may already have {change.key} {change.new!r} ({change.pr}): the change is not "
                         f"pinned to a build (first known: b{change.since}); read with {change.old!r}")
    if values["parallel"] == "auto" and build < 7433:
        values["explicit_np_kept"] = False  # -np 1 was overridden as well
    oldest = min(change.before for change in CHANGES if change.before)
    if build <= oldest and program in SERVER_CLI:
        notes.append(f"b{build}: the table starts at b{oldest + 1}; before PR 10136 (merged 2024-11-02, its build not "
                     "found) an unset -c was the model's training context, read here as 4096: give -c")
    return BuildDefaults(build, values, tuple(notes))
