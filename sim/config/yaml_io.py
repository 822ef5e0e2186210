"""Reading YAML files: repeated keys rejected, libyaml where PyYAML has it, parsed files kept."""

from __future__ import annotations

import os
import pickle
from typing import Any

import yaml

from sim.core.errors import ScenarioError


class _UniqueKeys:
    """A loader mixin that rejects a key repeated in one map (the last one would silently win)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one map", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """A SafeLoader with unique keys."""


class _FastUniqueKeyLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same on libyaml's parser when PyYAML has it (several times faster); errors are reported from a re-read
    with the pure-Python loader, so their wording does not depend on which parser is installed."""


_YAML_CACHE: dict[str, tuple[tuple[int, ...], bytes]] = {}


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_FastUniqueKeyLoader)  # noqa: S506 - a safe loader subclass
    except yaml.YAMLError:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - raises the message users see


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
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(path, "", f"YAML syntax error: {where}{problem}") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise ScenarioError(path, "", f"cannot read: {exc}") from None
