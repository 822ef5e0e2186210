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
             ("layer kinds", _kinds(g.layer_kinds) + (f", window {g.sliding_window} tokens" if g.sliding_window
                                                      and "sliding" in g.layer_kinds else ""))]
    if g.kv_lora_rank:
        rows.append(("MLA", f"kv_lora_rank {g.kv_lora_rank}, q_lora_rank {g.q_lora_rank}, qk_nope "
                            f"{g.qk_nope_head_dim} + qk_rope {g.qk_rope_head_dim}, v_head_dim {g.v_head_dim}"))
    if g.recurrent_state_bytes:
        rows.append(("linear attention", f"{g.linear_key_heads} key / {g.linear_value_heads} value heads of "
                                         f"{g.linear_key_head_dim} / {g.linear_value_head_dim}, conv "
                                         f"{g.linear_conv_kernel}: {g.recurrent_state_bytes / 2**20:.4g} MiB of "
                                         "state per sequence per layer (f32)"))
    rows += [("KV cache", f"{g.kv_bytes_per_token / 1024:.4g} KiB per token of context ({g.attention_layers} "
                          "attention layers)"),
             ("weights", f"{g.weights_bytes / 2**30:.4g} GiB ({g.weights_bytes / 1e9:.4g} GB, {len(g.tensors)} "
                         f"tensors: {_types(g)}; {g.bytes_from})")]
    if g.mtp_tensors:
        rows.append(("MTP blocks", f"{g.mtp_bytes / 2**30:.4g} GiB more in a file that keeps them (not counted)"))
    lines = [f"{g.source}"] + table([list(r) for r in rows], [], "ll")
    if g.notes:
        lines += ["notes:"] + [f"  - {n}" for n in g.notes]
    return "\n".join(wrap_all(lines)) + "\n"


def _kinds(kinds: tuple[str, ...]) -> str:
    """Layer kinds as counts: '30 linear, 10 full'."""
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    return ", ".join(f"{n} {k}" for k, n in counts.items()) or "none"


def _types(g) -> str:
    """The tensor types by share of the bytes: 'Q4_K 71%, Q6_K 27%, F32 0%'."""
    by: dict[str, float] = {}
    for t in g.tensors:
        by[t.qtype] = by.get(t.qtype, 0.0) + t.bytes
    total = sum(by.values()) or 1.0
    return ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:4])


@main.command("model", short_help="A model's geometry from a config.json or a GGUF header.")
@click.argument("file", type=click.Path(dir_okay=True))
@click.option("--quant", default=None, metavar="Q",
              help="Quantization of a config.json's weights: a llama.cpp file type (Q4_K_M, Q8_0, IQ4_XS, MXFP4_MOE, "
              "BF16, ...: each tensor's type by llama.cpp's rules; i1- in front: with an importance matrix), an "
              "ik_llama.cpp type (IQ4_KS, ...), a GGUF type for every tensor (Q4_K), an Unsloth UD- mix (with "
              "--weights-gib), or a "
              "checkpoint format (MXFP4, FP8). Default: the checkpoint's own (quantization_config, else torch_dtype).")
@click.option("--kv-type", default="f16", show_default=True, metavar="T",
              help="KV cache value type: f16, bf16, f32, q8_0, q4_0, fp8, ...")
@click.option("--weights-gib", type=float, default=None, metavar="G",
              help="The real file's size (GiB): a config.json's tensors scaled to it (needed for an Unsloth UD- mix, "
              "whose per-tensor types cannot be derived).")
@click.option("--name", default=None, help="Key of the scenario models: entry (default: from the file name).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (geometry, models) on stdout.")
@user_errors
def model(file: str, quant: str | None, kv_type: str, weights_gib: float | None, name: str | None,
          as_json: bool) -> None:
    """Read a model's geometry from FILE (a Hugging Face config.json, or a .gguf file's header) and print it with the
    scenario models: entry it gives."""
    from sim.config.yaml_io import dump_yaml
    from sim.core.errors import ScenarioError
    from sim.core.output import dumps
    from sim.formats.quantities import SIZE_BYTES
    from sim.modelfiles import model_fields, read_model_file

    if weights_gib is not None and (not weights_gib > 0 or SIZE_BYTES.problem(weights_gib * 2**30)):
        raise ScenarioError("--weights-gib", str(weights_gib), f"expected a positive size in GiB, at most "
                            f"{SIZE_BYTES.hi / 2**30:,.0f} GiB")
    g = read_model_file(file, quant, kv_type, weights_bytes=weights_gib * 2**30 if weights_gib else None)
    entry = {"models": {name or entry_name(file): model_fields(g)}}
    if as_json:
        geometry = dataclasses.asdict(g)
        geometry["notes"] = list(g.notes)
        for key in ("tensors", "mtp_tensors"):
            geometry[key] = [dict(t, shape=list(t["shape"])) for t in geometry[key]]
        geometry["layer_kinds"] = list(g.layer_kinds)
        click.echo(dumps({"geometry": geometry, **entry}), nl=False)
        return
    click.echo(geometry_text(g), nl=False)
    click.echo("\nscenario entry:\n" + dump_yaml(entry), nl=False)
