"""A Hugging Face ``config.json`` as its JSON document: read through the one input layer (a regular file of at most
:data:`MAX_CONFIG_BYTES` bytes, UTF-8 text, valid JSON). What its keys mean (the model's tensors, layers and caches)
is :mod:`sim.modelfiles.hf_config`'s."""

from __future__ import annotations

from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.inputs import parse_json, read_text

MAX_CONFIG_BYTES = 16 * 2**20  # a config.json larger than this is not one (bytes; the shipped ones: at most 20 KB)
WHAT = "a model's config.json"


def read_config(path: str, key_path: str = "", what: str = WHAT) -> object:
    """The JSON document in ``path`` (any JSON value: the caller says what it expects of it); a file that cannot be
    read as ``what``, or is not JSON, is one line naming the file and ``key_path``."""
    text = read_text(path, key_path, what, max_bytes=MAX_CONFIG_BYTES)
    return parse_json(text, path, key_path, WHAT)


def read_config_object(path: str) -> dict[str, Any]:
    """config.json's top-level object, read through the one input layer (a regular file of at most
    ``MAX_CONFIG_BYTES`` bytes, UTF-8 text); anything else is one line naming the file."""
    raw = read_config(path, "", "a model's config.json (UTF-8 JSON) or a .gguf file")
    if not isinstance(raw, dict):
        raise ScenarioError(path, "", f"expected a JSON object of configuration keys, got a {type(raw).__name__}")
    return raw
