"""YAML in and out through one library, ruamel.yaml.

Reading YAML as editors and JSON Schema validators read it: YAML 1.2 (``30e-6`` is a number, ``yes`` and ``on`` are
text, ``017`` is seventeen) through ruamel.yaml's safe loader, on its C parser where ``ruamel.yaml.clib`` is
installed; a key repeated in one map rejected; plain Python data out (dict, list, str, int, float, bool, None, dates);
parsed files kept.

Input is bounded before it is built: a file of at most ``MAX_YAML_BYTES`` bytes (a regular file: not a device or a
pipe; read by :func:`sim.formats.inputs.read_text`), at most ``MAX_DEPTH`` levels of nesting and at most ``MAX_VALUES``
values once aliases are expanded (a "billion laughs" file of a few hundred bytes would otherwise stand for billions
of values).

Values are built or refused, never half-built: a number is at most ``MAX_NUMBER`` in magnitude (what a float holds;
an integer of 5,000 digits is refused before Python is asked to convert it), a tagged value must be what its tag
says (``!!float abc`` is refused), and a tag that gives no plain data (``!!binary``, ``!!set``, ``!!omap``,
``!!pairs``, ``!!python/...``, a local ``!tag``) is refused; each with the line and column of the value.

Writing (:func:`dump_yaml`: calibration files, scenarios written by ``sim llama --write`` and ``sim vllm --write``,
model entries) gives block style in the order of the data, lines wrapped at 120 characters by ruamel's C emitter
(libyaml's), and numbers every YAML reader takes as numbers, 1.1 or 1.2 (``1.0e-05``, not ``1e-05``).
"""

from __future__ import annotations

import copy
import functools
import math
import os
import pickle
import sys
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import BaseConstructor, ConstructorError, SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, DocumentStartEvent, ScalarEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.representer import SafeRepresenter
from ruamel.yaml.resolver import VersionedResolver

from sim.core.errors import ScenarioError, cut
from sim.formats.inputs import check_file, read_text

MAX_YAML_BYTES = 16 * 2**20  # a scenario, calibration or sweep file (the shipped ones: at most 21 kB)
MAX_DEPTH = 64  # levels of maps and lists inside one another (the shipped files: at most 7)
MAX_VALUES = 1_000_000  # keys, values, maps and lists of one document, aliases expanded
MAX_NUMBER = sys.float_info.max  # magnitude of a number, at most: what a float holds (about 1.8e308)
_MAX_INT_CHARS = 1030  # an integer written longer (underscores and sign left out) is beyond MAX_NUMBER in any base
_PURE_REREAD_CHARS = 2**20  # a problem in a longer text is told in the C parser's words (the pure one takes minutes)
_CORE = "tag:yaml.org,2002:"
_EXPECTED = {"int": "an integer", "float": "a number", "bool": "true or false", "null": "null (~, null or nothing)",
             "timestamp": "a date (YYYY-MM-DD) or a time stamp", "str": "text", "seq": "a list", "map": "a map"}
_NULLS = ("", "~", "null", "Null", "NULL")
_PLAIN = "this project reads text, numbers, true/false, null, dates, lists and maps"


class YamlLimitError(MarkedYAMLError):
    """YAML that is well formed but beyond what this project reads (too deep, too many values)."""


class YamlValueError(ConstructorError):
    """A value YAML cannot build into plain data: a number out of range, text that is not what its tag says, a tag
    that gives no plain data."""


def _value_error(node: Any, problem: str) -> YamlValueError:
    return YamlValueError(None, None, problem, node.start_mark)


def _shown(text: Any, width: int = 40) -> str:
    """A value's text as a message quotes it: at most about ``width`` characters, one line."""
    return repr(cut(str(text), width))


def _number_shown(text: str) -> str:
    """A long number's text as a message quotes it: its ends and how many characters it has."""
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text):,} characters)"


def _out_of_range(node: Any, kind: str) -> YamlValueError:
    return _value_error(node, f"{kind} {_number_shown(str(node.value))} is out of range: a number is at most about "
                        f"{MAX_NUMBER:.2g} in magnitude".replace("e+", "e"))


class _UniqueKeyConstructor(SafeConstructor):
    """The safe constructor, saying which key a map repeats (the last one would otherwise silently win) in this
    project's words, refusing a map or a list as a map key, and building only plain data (see the module's
    docstring): a value that cannot be built is a :class:`YamlValueError` at its place, never a ValueError."""

    def construct_non_recursive_object(self, node: Any, tag: str | None = None) -> Any:
        """SafeConstructor's, a value its constructor cannot build (``!!float abc``, ``2001-13-45``) refused at its
        place."""
        try:
            return super().construct_non_recursive_object(node, tag)
        except YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, ArithmeticError) as exc:
            raise _value_error(node, _not_what_tag_says(node, tag or node.tag, exc)) from None

    def construct_yaml_int(self, node: Any) -> int:
        """An integer of at most ``MAX_NUMBER`` in magnitude; a longer one is refused before it is converted."""
        if isinstance(node, ScalarNode) and len(str(node.value).replace("_", "").lstrip("+-")) > _MAX_INT_CHARS:
            raise _out_of_range(node, "the integer")
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_NUMBER:
            raise _out_of_range(node, "the integer")
        return value

    def construct_yaml_float(self, node: Any) -> float:
        """A number; one written finite that a float cannot hold (``1e400``) is refused (``.inf`` stays inf)."""
        value = super().construct_yaml_float(node)
        if math.isinf(value) and "inf" not in str(node.value).lower():
            raise _out_of_range(node, "the number")
        return value

    def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
        """A date or a time stamp; text that is neither (``!!timestamp abc``) refused in the words of the others."""
        try:
            return super().construct_yaml_timestamp(node, values)
        except YamlValueError:
            raise
        except ConstructorError as exc:
            raise _value_error(node, _not_what_tag_says(node, node.tag, exc)) from None

    def construct_yaml_null(self, node: Any) -> None:
        """null, written ``~``, ``null`` or nothing (``!!null abc`` is refused, not read as null)."""
        if isinstance(node, ScalarNode) and node.value not in _NULLS:
            raise _value_error(node, f"{_shown(node.value)} cannot be read as null (!!null): expected ~, null or "
                               "nothing")
        return None

    def construct_not_plain(self, node: Any) -> None:
        """A core tag that gives no plain data (bytes, a set, pairs): refused."""
        raise _value_error(node, f"a value tagged {_tag_name(node.tag)} is not read: {_PLAIN}")

    def construct_undefined(self, node: Any) -> None:
        raise _value_error(node, f"unknown tag {_shown(_tag_name(node.tag))}: {_PLAIN}")

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


for _tag in ("binary", "set", "omap", "pairs"):
    _UniqueKeyConstructor.add_constructor(_CORE + _tag, _UniqueKeyConstructor.construct_not_plain)
for _tag in ("int", "float", "null", "timestamp"):
    _UniqueKeyConstructor.add_default_constructor(_tag)  # this class's own, not SafeConstructor's
_UniqueKeyConstructor.add_constructor(None, _UniqueKeyConstructor.construct_undefined)


def _tag_name(tag: Any) -> str:
    """``!!float`` for YAML's core ``tag:yaml.org,2002:float``; a local tag as written."""
    text = str(tag)
    return "!!" + text[len(_CORE):] if text.startswith(_CORE) else text


def _not_what_tag_says(node: Any, tag: Any, exc: Exception) -> str:
    """Why ``node`` cannot be built as ``tag`` says, in a user's words."""
    name = str(tag)[len(_CORE):] if str(tag).startswith(_CORE) else ""
    expected = _EXPECTED.get(name, "a value of this tag")
    value = node.value if isinstance(node, ScalarNode) else f"a {node.id}"
    problem = f"{_shown(value)} cannot be read as {expected} ({_tag_name(tag)})"
    if name == "timestamp":  # often written as a date by mistake: say why, and how to keep it text
        problem += (f": {cut(str(exc), 100)}" if isinstance(exc, ValueError) and str(exc) else "") + \
            "; quote it to keep it as text"
    return problem


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


def parse_yaml(text: str) -> Any:
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
    """A YAML file's text: a regular file of at most ``MAX_YAML_BYTES`` bytes, UTF-8 without NUL bytes (a one-line
    ScenarioError otherwise, from :func:`sim.formats.inputs.read_text`)."""
    return read_text(path, "", "a YAML file", max_bytes=MAX_YAML_BYTES, max_lines=None)


_YAML_CACHE: dict[str, tuple[tuple[int, ...], bytes]] = {}


def read_yaml(path: str) -> Any:
    """Read a YAML file; any problem becomes a one-line ScenarioError. Parsed files are kept (keyed by their
    modification time and size) and each call gets its own copy, so a sweep that loads one scenario a thousand times
    parses it once."""
    try:
        st = check_file(path, "", "a YAML file")  # a NUL byte in the name, not found, a folder, a FIFO: one line
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        hit = _YAML_CACHE.get(os.path.abspath(path))
        if hit is not None and hit[0] == stamp:
            return pickle.loads(hit[1])
        data = parse_yaml(_read_text(path))
        frozen = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)  # a copy per call: callers may change theirs
        _YAML_CACHE[os.path.abspath(path)] = (stamp, frozen)
        return pickle.loads(frozen)
    except (YamlLimitError, YamlValueError) as exc:
        raise ScenarioError(path, "", yaml_problem(exc)) from None
    except YAMLError as exc:
        raise ScenarioError(path, "", f"YAML syntax error: {yaml_problem(exc)}") from None
    except RecursionError:  # not expected past the checks of _check_shape: still one line
        raise ScenarioError(path, "", f"nesting deeper than {MAX_DEPTH} levels") from None
    except OSError as exc:
        raise ScenarioError(path, "", f"cannot read: {exc.strerror or exc}") from None


def yaml_problem(exc: YAMLError) -> str:
    """A YAML error on one line: ``line L column C: what`` (1-based), or what alone when it has no place."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    context = getattr(exc, "context", None)
    if context and problem.startswith("but "):  # "expected a single document in the stream but found another"
        problem = f"{context} {problem}"
    return (where + problem).replace("\n", " ")


def parse_scalar(text: str, source: str = "--set", key_path: str = "") -> Any:
    """A value written on a command line (``--set path=VALUE``) read as the scenario file would read it, YAML 1.2:
    numbers (``30e-6`` too), ``true``/``false``, ``null``, ``[lists]``, ``{maps}``; blank is ``""``, and text that is
    not valid YAML stays the text. A value YAML reads but cannot build (a number out of range, ``!!float abc``, a
    list nested too deep) is a one-line ScenarioError at ``source: key_path``. Each call gets its own copy of a list
    or map."""
    try:
        value = _scalar(text)
    except (YamlLimitError, YamlValueError) as exc:
        raise ScenarioError(source, key_path or cut(text, 60), exc.problem or yaml_problem(exc)) from None
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


@functools.lru_cache(maxsize=65536)
def _scalar(text: str) -> Any:
    """parse_scalar, kept: sweeps repeat the same values."""
    if not text.strip():
        return ""
    try:
        return parse_yaml(text)
    except (YamlLimitError, YamlValueError):
        raise
    except YAMLError:
        return text


class _PortableRepresenter(SafeRepresenter):
    """Plain data as YAML that 1.1 readers (PyYAML, many editors) read as this project's 1.2 reader does: a float in
    exponent form keeps a decimal point (``1.0e-05``), which YAML 1.1 needs to see a number."""

    def represent_float(self, data: float) -> ScalarNode:
        node = super().represent_float(data)
        if "e" in node.value and "." not in node.value and "inf" not in node.value:
            node.value = node.value.replace("e", ".0e", 1)
        return node


_PortableRepresenter.add_representer(float, _PortableRepresenter.represent_float)


def dump_yaml(data: Any, width: int = 120) -> str:
    """``data`` (plain dicts, lists, text, numbers, booleans, None) as a YAML document: block style, maps in their
    own order, text as UTF-8, lines wrapped at ``width`` characters where a value allows it."""
    import io

    writer = YAML(typ="safe")  # the C emitter where ruamel.yaml.clib is installed (a dependency on CPython)
    writer.Representer = _PortableRepresenter
    writer.default_flow_style = False
    writer.sort_base_mapping_type_on_output = False
    writer.width = width
    writer.allow_unicode = True
    out = io.StringIO()
    writer.dump(data, out)
    return out.getvalue()
