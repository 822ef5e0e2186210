"""Reading YAML as editors and JSON Schema validators read it: YAML 1.2 (``30e-6`` is a number, ``yes`` and ``on``
are text, ``017`` is seventeen) through ruamel.yaml's safe loader, on its C parser where ``ruamel.yaml.clib`` is
installed; a key repeated in one map rejected; plain Python data out (dict, list, str, int, float, bool, None, dates);
parsed files kept.

Input is bounded before it is built: a file of at most ``MAX_YAML_BYTES`` bytes (a regular file: not a device or a
pipe), at most ``MAX_DEPTH`` levels of nesting and at most ``MAX_VALUES`` values once aliases are expanded (a
"billion laughs" file of a few hundred bytes would otherwise stand for billions of values)."""

from __future__ import annotations

import copy
import functools
import os
import pickle
import stat
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import BaseConstructor, ConstructorError, SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, DocumentStartEvent, ScalarEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.resolver import VersionedResolver

from sim.core.errors import ScenarioError

MAX_YAML_BYTES = 16 * 2**20  # a scenario, calibration or sweep file (the shipped ones: at most 21 kB)
MAX_DEPTH = 64  # levels of maps and lists inside one another (the shipped files: at most 7)
MAX_VALUES = 1_000_000  # keys, values, maps and lists of one document, aliases expanded
_PURE_REREAD_CHARS = 2**20  # a problem in a longer text is told in the C parser's words (the pure one takes minutes)


class YamlLimitError(MarkedYAMLError):
    """YAML that is well formed but beyond what this project reads (too deep, too many values)."""


class _UniqueKeyConstructor(SafeConstructor):
    """The safe constructor, saying which key a map repeats (the last one would otherwise silently win) in this
    project's words, and refusing a map or a list as a map key."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """SafeConstructor's, every key (merged ones too) first checked to be a scalar."""
        if isinstance(node, MappingNode):
            self.flatten_mapping(node)
            for key_node, _ in [*(getattr(node, "merge", None) or []), *node.value]:
                if not isinstance(key_node, ScalarNode):
                    raise ConstructorError(None, None, "a map key must be a scalar (text or a number), not a "
                                           f"{'map' if isinstance(key_node, MappingNode) else 'list'}",
                                           key_node.start_mark)
        return BaseConstructor.construct_mapping(self, node, deep=deep)

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


def _check_shape(text: str, pure: bool) -> None:
    """Raise :class:`YamlLimitError` when the document nests deeper than ``MAX_DEPTH`` levels or stands for more than
    ``MAX_VALUES`` values with its aliases expanded. One pass over the parser's events, without recursion and
    without building anything: each anchor's expanded size and height are kept, so an alias costs what it stands
    for."""
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (values, levels of nesting) of what it names
    stack: list[list[Any]] = []  # open maps and lists: [values so far, levels below, anchor]
    total = 0  # values of the document so far, aliases expanded

    def add(size: int, height: int, mark: Any) -> None:
        """Count a scalar or an alias (``size`` values, ``height`` levels) into the open map or list."""
        nonlocal total
        total += size
        if stack:
            stack[-1][0] += size
            stack[-1][1] = max(stack[-1][1], height)
        if len(stack) + height > MAX_DEPTH:
            raise YamlLimitError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
        if total > MAX_VALUES:
            raise YamlLimitError(None, None, f"more than {MAX_VALUES:,} values (aliases expanded)", mark)

    for event in _yaml(pure).parse(text):
        if isinstance(event, DocumentStartEvent):
            anchors.clear()
        elif isinstance(event, CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise YamlLimitError(None, None, f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
            stack.append([0, 0, event.anchor])
        elif isinstance(event, CollectionEndEvent) and stack:
            size, below, anchor = stack.pop()
            if anchor is not None:
                anchors[anchor] = (size + 1, below + 1)
            total += 1
            if stack:
                stack[-1][0] += size + 1
                stack[-1][1] = max(stack[-1][1], below + 1)
        elif isinstance(event, ScalarEvent):
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
            add(1, 0, event.start_mark)
        elif isinstance(event, AliasEvent):
            size, height = anchors.get(event.anchor, (1, 0))  # an unknown anchor: the composer says so
            add(size, height, event.start_mark)


def _parse_yaml(text: str) -> Any:
    """The data of one YAML document, its shape checked first (:func:`_check_shape`). A problem is raised from a
    re-read with the pure-Python parser, so its wording does not depend on whether the C parser is installed (but
    for a text over ``_PURE_REREAD_CHARS`` characters, which the pure parser would take minutes over)."""
    try:
        _check_shape(text, pure=False)
        return _yaml(pure=False).load(text)
    except YamlLimitError:
        raise
    except YAMLError:
        if len(text) > _PURE_REREAD_CHARS:
            raise
    _check_shape(text, pure=True)
    return _yaml(pure=True).load(text)


def _read_text(path: str) -> str:
    """A YAML file's text: a regular file of at most ``MAX_YAML_BYTES`` bytes (ScenarioError otherwise), read as
    UTF-8 text."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(st.st_mode):
        raise ScenarioError(path, "", "not a regular file (a device or a pipe?): expected a YAML file")
    too_big = ScenarioError(path, "", f"larger than {MAX_YAML_BYTES // 2**20} MiB: expected a YAML file of at most "
                            f"{MAX_YAML_BYTES // 2**20} MiB")
    if st.st_size > MAX_YAML_BYTES:
        raise too_big
    with open(path, encoding="utf-8") as fh:
        text = fh.read(MAX_YAML_BYTES + 1)  # characters; the file may have grown since
    if len(text.encode("utf-8")) > MAX_YAML_BYTES:
        raise too_big
    return text


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
        data = _parse_yaml(_read_text(path))
        frozen = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)  # a copy per call: callers may change theirs
        _YAML_CACHE[os.path.abspath(path)] = (stamp, frozen)
        return pickle.loads(frozen)
    except FileNotFoundError:
        raise ScenarioError(path, "", "file not found") from None
    except IsADirectoryError:
        raise ScenarioError(path, "", "is a directory, expected a YAML file") from None
    except YamlLimitError as exc:
        raise ScenarioError(path, "", yaml_problem(exc)) from None
    except YAMLError as exc:
        raise ScenarioError(path, "", f"YAML syntax error: {yaml_problem(exc)}") from None
    except RecursionError:  # not expected past the checks of _check_shape: still one line
        raise ScenarioError(path, "", f"nesting deeper than {MAX_DEPTH} levels") from None
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
