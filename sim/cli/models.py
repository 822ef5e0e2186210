"""``sim model``: a model's geometry read from its config.json or GGUF file, and the scenario ``models:`` entry it
gives."""

from __future__ import annotations

import dataclasses
import os
import re

import click

from sim.cli.app import main, user_errors


def entry_name(path: str) -> str:
    """The ``models:`` key for a model file: its name without the suffix (a config.json: its folder's name), with
    anything but letters, digits, ``-`` and ``_`` made ``_`` (a dot would split a ``--set`` path)."""
    base = os.path.basename(os.path.normpath(path))
    stem = os.path.splitext(base)[0]
    if stem == "config" or os.path.isdir(path):
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) if stem == "config" else base
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "model"


def geometry_text(g) -> str:
    """The geometry as aligned lines (units in every line)."""
    from sim.core.text import table, wrap_all

    rows = [("architecture", g.architecture), ("quantization", g.quant),
            ("layers", f"{g.layers}" + (f" ({g.moe_layers} with routed experts)" if g.is_moe else ""))]
    if g.is_moe:
        rows.append(("experts", f"{g.experts_per_layer} per layer, top-{g.top_k}, {g.shared_experts} shared"))
    rows += [("hidden", f"{g.hidden} ({g.heads} heads, {g.kv_heads} KV heads of {g.head_dim})"),
             ("vocabulary", f"{g.vocab:,} tokens"),
             ("parameters", f"{g.total_params / 1e9:.2f} B total, {g.active_params_per_token / 1e9:.2f} B active per "
                            f"token ({(g.active_params_per_token - g.embedding_params) / 1e9:.2f} B without the "
                            "embedding table)")]
    if g.is_moe:
        rows.append(("one expert", f"{g.expert_bytes / 2**20:.4g} MiB ({g.expert_params / 1e6:.4g} M parameters at "
                                   f"{g.bits_per_weight_experts:.4g} bits)"))
    rows += [("dense weights", f"{g.dense_bytes / 2**30:.4g} GiB ({g.dense_params / 1e9:.4g} B parameters at "
                               f"{g.bits_per_weight_dense:.4g} bits)"),
             ("KV cache", f"{g.kv_bytes_per_token / 1024:.4g} KiB per token of context ({g.attention_layers} "
                          "attention layers)"),
             ("weights", f"{g.weights_bytes / 2**30:.4g} GiB ({g.weights_bytes / 1e9:.4g} GB)")]
    lines = [f"{g.source}"] + table([list(r) for r in rows], [], "ll")
    if g.notes:
        lines += ["notes:"] + [f"  - {n}" for n in g.notes]
    return "\n".join(wrap_all(lines)) + "\n"


@main.command("model")
@click.argument("file", type=click.Path(dir_okay=True))
@click.option("--quant", default=None, metavar="Q",
              help="Quantization of a config.json's weights: a GGUF type or scheme (Q4_K_M, Q8_0, IQ4_XS, MXFP4, BF16, "
              "...). Default: the checkpoint's own (quantization_config, else torch_dtype).")
@click.option("--kv-type", default="f16", show_default=True, metavar="T",
              help="KV cache value type: f16, bf16, f32, q8_0, q4_0, fp8, ...")
@click.option("--name", default=None, help="Key of the scenario models: entry (default: from the file name).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (geometry, models) on stdout.")
@user_errors
def model(file: str, quant: str | None, kv_type: str, name: str | None, as_json: bool) -> None:
    """Read a model's geometry from FILE (a Hugging Face config.json, or a .gguf file's header) and print it with the
    scenario models: entry it gives."""
    import yaml

    from sim.core.output import dumps
    from sim.modelfiles import model_fields, read_model_file

    g = read_model_file(file, quant, kv_type)
    entry = {"models": {name or entry_name(file): model_fields(g)}}
    if as_json:
        geometry = dataclasses.asdict(g)
        geometry["notes"] = list(g.notes)
        click.echo(dumps({"geometry": geometry, **entry}), nl=False)
        return
    click.echo(geometry_text(g), nl=False)
    click.echo("\nscenario entry:\n" + yaml.safe_dump(entry, sort_keys=False, width=120), nl=False)
