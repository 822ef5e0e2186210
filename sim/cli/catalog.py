"""``sim catalog``: the hardware catalog shipped with sim, as tables, one entry in full, or JSON."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from sim.catalog import KINDS, closest, entries, host_dram_gbps
from sim.catalog.store import FILE_KEYS, similarity
from sim.cli.app import fail, main
from sim.core.errors import cut
from sim.core.text import WIDTH, table, wrap
from sim.formats.inputs import shown_path

MAX_NAME_CHARS = 80  # of a name an error quotes (cut in the middle beyond)

TITLES = {"gpus": "GPUs", "hosts": "hosts", "links": "links"}
DERIVED = "derived, not stored: channels x 8 bytes x mt_s / 1000"
DERIVED_BITS = "derived, not stored: bus_bits / 8 bytes x mt_s / 1000"


def cell(value: Any) -> str:
    """A value as a table cell: numbers as the file gives them, thousands separated (``1,792``, ``0.9846``,
    ``362.05``); ``-`` when the entry has none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return format(value, ",.6g")
    return str(value)


def with_derived(kind: str, data: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``data`` with each host's paper DRAM bandwidth added as ``dram_gbps`` (GB/s); other kinds as they are."""
    if kind == "hosts":
        for entry in data.values():
            entry["dram_gbps"] = host_dram_gbps(entry)
    return data


def _pcie(e: dict[str, Any]) -> str:
    if e.get("unified"):
        return "unified"
    if "pcie_max_gen" not in e:
        return "-"
    return f"{e['pcie_max_gen']}.0 x{e.get('pcie_max_lanes', '?')}"


def _fp32(e: dict[str, Any]) -> str:
    """The FP32 vector rate, marked ``*`` where it is derived (shaders x FLOP per clock x boost clock)."""
    return cell(e.get("fp32_tflops")) + ("*" if e.get("fp32_basis") == "derived" else "")


def _channels(e: dict[str, Any]) -> str:
    if "channels" in e:
        return cell(e["channels"])
    return f"{e['bus_bits']} bits" if "bus_bits" in e else "-"


def _ghz(e: dict[str, Any]) -> str:
    if "base_ghz" not in e and "boost_ghz" not in e:
        return "-"
    return f"{cell(e.get('base_ghz'))}/{cell(e.get('boost_ghz'))}"


SHORT_MATRIX = {"tensor_core": "tensor", "neural_accelerator": "neural"}  # the table's names for the long kinds


def _matrix(e: dict[str, Any]) -> str:
    kind = e.get("matrix_units")
    return SHORT_MATRIX.get(kind, kind) if kind is not None else "-"


def _flops(e: dict[str, Any]) -> str:
    if "fp32_flops_per_cycle" not in e:
        return "-"
    if e.get("e_cores"):
        return f"{e['fp32_flops_per_cycle']}/{cell(e.get('e_fp32_flops_per_cycle'))}"
    return str(e["fp32_flops_per_cycle"])


def _cores(e: dict[str, Any]) -> str:
    """Cores / threads; a hybrid CPU's cores as performance + efficiency."""
    if "cores" not in e:
        return "-"
    cores = f"{e['cores'] - e['e_cores']}+{e['e_cores']}" if e.get("e_cores") else str(e["cores"])
    return f"{cores}/{cell(e.get('threads'))}"


# per kind: (header, unit, alignment, the cell of an entry); the name column is fitted to the width left over
COLUMNS: dict[str, list[tuple[str, str, str, Any]]] = {
    "gpus": [("vram", "GiB", "r", lambda e: cell(e.get("vram_gib"))),
             ("memory", "", "l", lambda e: cell(e.get("memory"))),
             ("bandwidth", "GB/s", "r", lambda e: cell(e.get("hbm_gbps"))),
             ("FP16", "TFLOP/s", "r", lambda e: cell(e.get("tflops"))),
             ("FP32", "TFLOP/s", "r", _fp32),
             ("matrix", "units", "l", _matrix),
             ("INT8", "TOPS", "r", lambda e: cell(e.get("int8_tops"))),
             ("power", "W", "r", lambda e: cell(e.get("board_power_w"))),
             ("PCIe", "gen x lanes", "l", _pcie)],
    "hosts": [("DRAM", "", "l", lambda e: cell(e.get("dram"))),
              ("rate", "MT/s", "r", lambda e: cell(e.get("mt_s"))),
              ("channels", "64-bit", "r", _channels),
              ("bandwidth", "GB/s *", "r", lambda e: cell(e.get("dram_gbps"))),
              ("cores", "/threads", "r", _cores),
              ("clock", "GHz", "r", _ghz),
              ("FP32", "FLOP/cyc", "r", _flops),
              ("ISA", "", "l", lambda e: cell(e.get("isa")))],
    "links": [("lanes", "", "r", lambda e: cell(e.get("lanes"))),
              ("per lane", "GB/s", "r", lambda e: cell(e.get("lane_gbps"))),
              ("per direction", "GB/s", "r", lambda e: cell(e.get("gbps"))),
              ("both directions", "GB/s", "r", lambda e: cell(e.get("bidirectional_gbps")))],
}

NOTES = {
    "gpus": "FP16: dense FP16/BF16 matrix TFLOP/s (the matrix units'), FP32 accumulate, no sparsity; FP32: vector "
            "(shader) TFLOP/s at the boost clock, * derived as shaders x FLOP/clk x boost clock; matrix: the kind of "
            "matrix unit (tensor: tensor_core, neural: neural_accelerator); INT8: dense TOPS; -: no vendor figure",
    "hosts": f"* {DERIVED}, bus_bits / 8 bytes for a narrower bus (paper bandwidth); cores: performance + "
             "efficiency where hybrid; clock: base/boost of the (performance) cores; FP32: FLOP per cycle per core "
             "(performance/efficiency); ISA: widest vector instructions; -: no vendor figure",
    "links": "per direction after line encoding (PCIe: an x16 link); both directions where the vendor states the total",
}


def kind_lines(kind: str, data: dict[str, dict[str, Any]]) -> list[str]:
    """The table of one kind: id, name and the numbers, units in a second header row; within :data:`WIDTH`."""
    cols = COLUMNS[kind]
    rows = [[ident, e.get("name", ""), *(c[3](e) for c in cols)] for ident, e in data.items()]
    heads = [["id", "name", *(c[0] for c in cols)], ["", "", *(c[1] for c in cols)]]
    fixed = [max(len(r[i]) for r in [*heads, *rows]) for i in range(len(heads[0])) if i != 1]
    room = WIDTH - 2 - 2 * (len(heads[0]) - 1) - sum(fixed)  # what the name column may take
    for r in rows:
        r[1] = "\n".join(textwrap.wrap(r[1], max(room, 16))) or "-"
    lines = [f"{TITLES[kind]} ({len(data)}):"]
    lines += table(rows, heads, "ll" + "".join(c[2] for c in cols))
    lines += wrap(f"  {NOTES[kind]}")
    return lines


def entry_lines(kind: str, ident: str, entry: dict[str, Any]) -> list[str]:
    """One entry in full: every key the file gives it (units in the key names), derived values marked, the source
    and the note."""
    lines = [f"{ident} ({kind}): {entry.get('name', '')}"]
    keys = [k for k in entry if k in FILE_KEYS[kind] and k not in ("name", "source", "note")]  # in file order
    pad = max(len(k) for k in [*keys, "dram_gbps", "source"]) + 2
    for key in keys:
        value = entry[key]
        shown = str(value).lower() if isinstance(value, bool) else value
        if key == "fp32_tflops" and entry.get("fp32_basis") == "derived":
            how = f"{entry.get('shaders')} shaders x {entry.get('shader_flop_per_clk', 2)} FLOP/clk x " \
                  f"{entry.get('boost_mhz')} MHz" if "shaders" in entry else "see the note"
            shown = f"{value} (derived: {how})"
        lines.append(f"  {key.ljust(pad)}{shown}")
    if kind == "hosts" and entry.get("dram_gbps") is not None:
        how = DERIVED if "channels" in entry else DERIVED_BITS
        lines.append(f"  {'dram_gbps'.ljust(pad)}{cell(entry['dram_gbps'])} ({how})")
    lines.append(f"  {'source'.ljust(pad)}{entry.get('source', '-')}")  # a URL is never broken, however long
    if entry.get("note"):
        lines += textwrap.wrap(entry["note"], WIDTH, initial_indent="  " + "note".ljust(pad),
                               subsequent_indent=" " * (2 + pad), break_long_words=False, break_on_hyphens=False)
    return lines


def lookup(name: str, kinds: tuple[str, ...]) -> tuple[str, str]:
    """(kind, id) of the entry whose id is ``name`` (any case) among ``kinds``; an unknown name fails with a
    did-you-mean, exit 2."""
    for kind in kinds:
        if name.lower() in entries(kind):
            return kind, name.lower()
    guesses = []
    for kind in kinds:
        guess = closest(kind, name)
        if guess is not None:
            entry = entries(kind)[guess]
            score = max(similarity(name, guess), similarity(name, str(entry.get("name", ""))))
            guesses.append((score, kind, guess))
    where = f"no {kinds[0]} entry" if len(kinds) == 1 else "no entry"
    if guesses:
        _, kind, guess = max(guesses, key=lambda g: g[0])
        hint = f"did you mean '{guess}'" + ("" if len(kinds) == 1 else f" ({kind})") + "?"
    else:
        hint = "`sim catalog" + (f" --kind {kinds[0]}" if len(kinds) == 1 else "") + "` lists the ids"
    fail(f"catalog: {where} '{cut(shown_path(name), MAX_NAME_CHARS)}'; {hint}", 2)  # one short line, any name
    raise AssertionError("unreachable")  # fail exits


@main.command("catalog", short_help="The GPUs, hosts and links sim knows, with their sources.")
@click.argument("name", required=False)
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only this kind of entry (default: all three).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, nothing else.")
def catalog_command(name: str | None, kind: str | None, as_json: bool) -> None:
    """The hardware catalog shipped with sim: GPUs, hosts and links, with vendor figures and their sources.

    Without NAME a table per kind; with NAME (an id, e.g. rtx4090) that entry in full. --json prints
    {"gpus": {...}, "hosts": {...}, "links": {...}} (every key of the files; hosts with their derived dram_gbps).

    \b
    sim catalog --kind gpus
    sim catalog rtx4090
    """
    from sim.core.output import dumps

    kinds = (kind,) if kind else KINDS
    if name is not None:
        found, ident = lookup(name, kinds)
        data = {found: with_derived(found, {ident: entries(found)[ident]})}
    else:
        data = {k: with_derived(k, entries(k)) for k in kinds}
    if as_json:
        click.echo(dumps(data), nl=False)
        return
    if name is not None:
        (found, only), = data.items()
        (ident, entry), = only.items()
        click.echo("\n".join(entry_lines(found, ident, entry)))
        return
    blocks = ["\n".join(kind_lines(k, data[k])) for k in kinds]
    click.echo("\n\n".join(blocks))
    click.echo(f"\n{sum(len(v) for v in data.values())} entries; sources and notes: sim catalog ID")
