"""Reading YAML as editors and JSON Schema validators read it: YAML 1.2 (``30e-6`` is a number, ``yes`` and ``on``
are text, ``017`` is seventeen) through ruamel.yaml's safe loader, on its C parser where ``ruamel.yaml.clib`` is
installed; a key repeated in one map rejected; plain Python data out (dict, list, str, int, float, bool, None, dates);
parsed files kept."""

from __future__ import annotations

import copy
import functools
import os
import pickle
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import ConstructorError, SafeConstructor
from ruamel.yaml.error import YAMLError
from ruamel.yaml.resolver import VersionedResolver

from sim.core.errors import ScenarioError


class _UniqueKeyConstructor(SafeConstructor):
    """The safe constructor, saying which key a map repeats (the last one would otherwise silently win) in this
    project's words."""

    def check_mapping_key(self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any) -> bool:
        if key in mapping:
            raise ConstructorError(None, None, f"key {key!r} appears twice in one map", key_node.start_mark)
        return True


class _Yaml12Resolver(VersionedResolver):
    """YAML 1.2's rules for every document, whatever its ``%YAML`` line says (ruamel's own resolver looks the version
    up for every value it reads: most of a parse's time)."""

    processing_version = (1, 2)


def _yaml(pure: bool) -> YAML:
    """A new safe YAML 1.2 reader (one per parse: a reader keeps its state between documents)."""
    reader = YAML(typ="safe", pure=pure)
    reader.Constructor = _UniqueKeyConstructor
    reader.Resolver = _Yaml12Resolver
    reader.allow_duplicate_keys = False
    return reader


def _parse_yaml(text: str) -> Any:
    """The data of one YAML document. A problem is raised from a re-read with the pure-Python parser, so its wording
    does not depend on whether the C parser is installed."""
    try:
        return _yaml(pure=False).load(text)
    except YAMLError:
        return _yaml(pure=True).load(text)


_YAML_CACHE: dict[str, tuple[tuple[int, ...], bytes]] = {}


def read_yaml(path: str) -> Any:
    """Read a YAML file; any problem becomes a one-line ScenarioError. Parsed files are kept (keyed by their
    modification time and size) and each call gets its own copy, so a sweep that loads one scenario a thousand times
    parses it once."""
    try:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        hit = _YAML_CACHE.get(os.path.abspath(path))
        if hit is not None and hit[0] == stamp:
            return pickle.loads(hit[1])
        with open(path, encoding="utf-8") as fh:
            data = _parse_yaml(fh.read())
        frozen = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)  # a copy per call: callers may change theirs
        _YAML_CACHE[os.path.abspath(path)] = (stamp, frozen)
        return pickle.loads(frozen)
    except FileNotFoundError:
        raise ScenarioError(path, "", "file not found") from None
    except IsADirectoryError:
        raise ScenarioError(path, "", "is a directory, expected a YAML file") from None
    except YAMLError as exc:
        raise ScenarioError(path, "", f"YAML syntax error: {yaml_problem(exc)}") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise ScenarioError(path, "", f"cannot read: {exc}") from None


def yaml_problem(exc: YAMLError) -> str:
    """A YAML error on one line: ``line L column C: what`` (1-based), or what alone when it has no place."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    context = getattr(exc, "context", None)
    if context and problem.startswith("but "):  # "expected a single document in the stream but found another"
        problem = f"{context} {problem}"
    return (where + problem).replace("\n", " ")


def parse_scalar(text: str) -> Any:
    """A value written on a command line (``--set path=VALUE``) read as the scenario file would read it, YAML 1.2:
    numbers (``30e-6`` too), ``true``/``false``, ``null``, ``[lists]``, ``{maps}``; blank is ``""``, and text that is
    not valid YAML stays the text. Each call gets its own copy of a list or map."""
    value = _scalar(text)
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


@functools.lru_cache(maxsize=65536)
def _scalar(text: str) -> Any:
    """parse_scalar, kept: sweeps repeat the same values."""
    if not text.strip():
        return ""
    try:
        return _parse_yaml(text)
    except YAMLError:
        return text
