"""The catalog files (``sim/catalog/data/{gpus,hosts,links}.yaml``) read once and handed out as fresh copies; the
paper DRAM bandwidth of a host; the closest id to a mistyped name.

The files are read with ruamel.yaml's safe loader (YAML 1.2, a repeated key refused) and checked for shape only: a
map of lowercase ids to maps whose keys are the kind's spec or catalog-only keys, the enumerated ones (matrix_units,
fp32_basis, family, isa) among their values. Their numbers are checked by
``tests/test_catalog.py``. This module imports nothing of ``sim``, so any layer may use it."""

from __future__ import annotations

import copy
import difflib
import functools
import os
import re
from importlib import resources
from typing import Any

KINDS: tuple[str, ...] = ("gpus", "hosts", "links")

# The keys a GPU entry may carry: hardware numbers a scenario's ``gpus.<type>`` section may take, and their provenance
GPU_SPEC_KEYS: tuple[str, ...] = ("vram_gib", "hbm_gbps", "tflops", "int8_tops", "pcie_max_gen", "pcie_max_lanes",
                                  "board_power_w", "memory", "vendor", "unified", "name", "source", "note",
                                  "fp32_tflops", "matrix_units", "family")
# Catalog-only GPU keys (not filled into a scenario): the inputs of a derived FP32 rate, how fp32_tflops was had, and
# the memory sizes a unified-memory chip is sold with
GPU_INFO_KEYS: tuple[str, ...] = ("shaders", "boost_mhz", "shader_flop_per_clk", "fp32_basis", "vram_gib_options")
HOST_SPEC_KEYS: tuple[str, ...] = ("name", "source", "note", "dram", "mt_s", "channels", "cores", "threads",
                                   "bus_bits", "base_ghz", "boost_ghz", "fp32_flops_per_cycle", "isa", "e_cores",
                                   "e_boost_ghz", "e_fp32_flops_per_cycle")
HOST_INFO_KEYS: tuple[str, ...] = ("sockets",)
LINK_SPEC_KEYS: tuple[str, ...] = ("name", "source", "note", "kind", "gt_s", "encoding", "lane_gbps", "lanes", "gbps",
                                   "bidirectional_gbps")
SPEC_KEYS: dict[str, tuple[str, ...]] = {"gpus": GPU_SPEC_KEYS, "hosts": HOST_SPEC_KEYS, "links": LINK_SPEC_KEYS}
# Every key a catalog file may use: the spec keys and the catalog-only ones
FILE_KEYS: dict[str, tuple[str, ...]] = {"gpus": GPU_SPEC_KEYS + GPU_INFO_KEYS,
                                         "hosts": HOST_SPEC_KEYS + HOST_INFO_KEYS, "links": LINK_SPEC_KEYS}

MATRIX_UNITS: tuple[str, ...] = ("none", "tensor_core", "wmma", "mfma", "xmx", "neural_accelerator")
ISAS: tuple[str, ...] = ("avx2", "avx512", "neon", "sve2", "rv64gc", "rvv")
FP32_BASES: tuple[str, ...] = ("vendor", "derived")
FAMILIES: tuple[str, ...] = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "gcn", "rdna1",
                             "rdna2", "rdna3", "rdna3.5", "rdna4", "cdna2", "cdna3", "alchemist", "battlemage",
                             "apple_m1", "apple_m2", "apple_m3", "apple_m4", "apple_m5")

_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "gpus": {"matrix_units": MATRIX_UNITS, "fp32_basis": FP32_BASES, "family": FAMILIES},
    "hosts": {"isa": ISAS},
}

DRAM_BYTES_PER_CHANNEL = 8  # one 64-bit channel moves 8 bytes per transfer
_ID = re.compile(r"[a-z][a-z0-9_]*\Z")


class CatalogError(ValueError):
    """A catalog file that is not a map of ids to entries of known keys (a packaging or editing mistake)."""


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown catalog kind {kind!r}: expected one of {', '.join(KINDS)}")


def _digest(text: str) -> str:
    import hashlib

    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _parsed_copy(kind: str, text: str) -> Any:
    """The shipped parse of ``kind``'s YAML (``data/KIND.json``, what :func:`write_parsed` wrote) when it was made
    from exactly this text, else None: JSON reads in a millisecond what YAML takes 50 to parse, at every start."""
    import json

    try:
        parsed = json.loads((resources.files("sim.catalog") / "data" / f"{kind}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(parsed, dict) or parsed.get("yaml_blake2b") != _digest(text):
        return None  # stale (the YAML was edited since): the YAML is read
    return parsed.get("entries")


def _parse_yaml(text: str, where: str) -> Any:
    """The catalog file's YAML, parsed; a one-line CatalogError when it cannot be."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="safe").load(text)
    except YAMLError as exc:  # one line: the problem and where (ruamel's message spans several)
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise CatalogError(f"{where}: cannot be read: {line}{problem}") from None


def write_parsed() -> list[str]:
    """Write ``data/KIND.json`` beside each catalog file: its parse and the digest of the text it came from
    (``python -c "from sim.catalog.store import write_parsed; write_parsed()"`` after editing a catalog file; a
    test checks they are current; a stale one is never read)."""
    import json

    from ruamel.yaml import YAML

    out = []
    for kind in KINDS:
        path = resources.files("sim.catalog") / "data" / f"{kind}.yaml"
        text = path.read_text(encoding="utf-8")
        doc = {"yaml_blake2b": _digest(text), "entries": YAML(typ="safe").load(text)}
        target = os.path.join(os.path.dirname(str(path)), f"{kind}.json")
        from sim.core.output import atomic_write_text

        atomic_write_text(target, json.dumps(doc, ensure_ascii=False, indent=0, allow_nan=False) + "\n")
        out.append(target)
    return out


@functools.cache
def _entries(kind: str) -> dict[str, dict[str, Any]]:
    """The parsed file of ``kind``, read on first use and kept (callers get copies)."""
    _check_kind(kind)
    where = f"sim/catalog/data/{kind}.yaml"
    try:
        text = (resources.files("sim.catalog") / "data" / f"{kind}.yaml").read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{where}: cannot be read: {exc}") from None
    data = _parsed_copy(kind, text)
    if data is None:
        data = _parse_yaml(text, where)
    if not isinstance(data, dict) or not data:
        raise CatalogError(f"{where}: expected a map of ids to entries")
    allowed = set(FILE_KEYS[kind])
    for ident, entry in data.items():
        if not isinstance(ident, str) or not _ID.match(ident):
            raise CatalogError(f"{where}: id {ident!r} is not a lowercase identifier")
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: {ident}: expected a map of keys to values")
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise CatalogError(f"{where}: {ident}: unknown key {unknown[0]!r}; "
                               f"expected one of {', '.join(FILE_KEYS[kind])}")
        for key, choices in _CHOICES.get(kind, {}).items():
            if key in entry and entry[key] not in choices:
                raise CatalogError(f"{where}: {ident}.{key}: bad value {entry[key]!r}; expected one of "
                                   f"{', '.join(choices)}")
    return data


def entries(kind: str) -> dict[str, dict[str, Any]]:
    """id -> a fresh (deep) copy of each entry of ``kind`` (``gpus``, ``hosts`` or ``links``), in file order."""
    return copy.deepcopy(_entries(kind))


def gpu_entries() -> dict[str, dict[str, Any]]:
    """id -> a fresh copy of each GPU entry as in ``gpus.yaml`` (``name``, ``source`` and ``note`` included)."""
    return entries("gpus")


def host_entries() -> dict[str, dict[str, Any]]:
    """id -> a fresh copy of each host entry as in ``hosts.yaml``; the paper bandwidth is not in it
    (:func:`dram_paper_gbps`)."""
    return entries("hosts")


def link_entries() -> dict[str, dict[str, Any]]:
    """id -> a fresh copy of each link entry as in ``links.yaml``."""
    return entries("links")


def dram_paper_gbps(channels: int, mt_s: float) -> float:
    """Paper bandwidth of ``channels`` 64-bit DRAM channels at ``mt_s`` MT/s, in decimal GB/s:
    ``channels x 8 bytes x mt_s / 1000`` (dual-channel DDR4-3200: 51.2 GB/s)."""
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a whole number of at least 1, not {channels!r}")
    if isinstance(mt_s, bool) or not isinstance(mt_s, (int, float)) or not mt_s > 0:
        raise ValueError(f"mt_s must be a positive number of MT/s, not {mt_s!r}")
    return channels * DRAM_BYTES_PER_CHANNEL * float(mt_s) / 1000.0


def host_dram_gbps(entry: dict[str, Any]) -> float | None:
    """Paper DRAM bandwidth of a host entry, decimal GB/s: :func:`dram_paper_gbps` of its 64-bit channels, or, for a
    bus narrower than one channel (``bus_bits``, e.g. the Raspberry Pi 5's 32-bit LPDDR4X), bus_bits / 8 bytes x
    mt_s / 1000; None for an entry that gives neither (its vendor publishes no bus width)."""
    if "channels" in entry:
        return dram_paper_gbps(entry["channels"], entry["mt_s"])
    bits = entry.get("bus_bits")
    if bits is None:
        return None
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 8:
        raise ValueError(f"bus_bits must be a whole number of at least 8 bits, not {bits!r}")
    return dram_paper_gbps(1, entry["mt_s"]) * bits / (8 * DRAM_BYTES_PER_CHANNEL)  # a share of one 64-bit channel


def gpu_fp32_from_shaders(entry: dict[str, Any]) -> float | None:
    """FP32 vector TFLOP/s from an entry's stored inputs: shaders x shader_flop_per_clk (2: one FMA a clock; 4 where
    the vendor counts RDNA 3/4 dual issue) x boost_mhz / 1e6; None when the entry stores no inputs."""
    if "shaders" not in entry or "boost_mhz" not in entry:
        return None
    return entry["shaders"] * entry.get("shader_flop_per_clk", 2) * entry["boost_mhz"] / 1e6


def _plain(text: str) -> str:
    """``text`` lowercased without spaces and punctuation: ``RTX 4090`` and ``rtx-4090`` read as ``rtx4090``."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def closest(kind: str, name: str) -> str | None:
    """The id of ``kind`` closest to ``name`` (an id or a marketing name, any case and spacing) for a did-you-mean
    message: the id itself when ``name`` spells one (or an entry's name), else the first id it begins, else the
    longest id it begins with, else difflib's closest match above 0.6, else None."""
    known = _entries(kind)
    if name in known:
        return name
    spelled: dict[str, str] = {}  # plain spelling -> id, ids first so that an id wins over another entry's name
    for ident in known:
        spelled.setdefault(_plain(ident), ident)
    for ident, entry in known.items():
        spelled.setdefault(_plain(str(entry.get("name", ""))), ident)
    plain = _plain(name)
    if plain in spelled:
        return spelled[plain]
    starts = [ident for ident in known if plain and _plain(ident).startswith(plain)]
    if starts:  # "h100" -> h100_pcie, the first in file order
        return starts[0]
    within = [ident for ident in known if _plain(ident) and plain.startswith(_plain(ident))]
    if within:  # "rtx3060_12gb" -> rtx3060: the longest id the name begins with
        return max(within, key=lambda ident: len(_plain(ident)))
    match = difflib.get_close_matches(plain, list(spelled), n=1, cutoff=0.6)
    return spelled[match[0]] if match else None


def similarity(a: str, b: str) -> float:
    """How alike two names are, 0 to 1, as :func:`closest` compares them (to rank its answers across kinds)."""
    return difflib.SequenceMatcher(None, _plain(a), _plain(b)).ratio()
