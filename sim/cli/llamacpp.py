"""``sim advise`` (the best llama.cpp placements of a model on a machine) and ``sim fit-offload`` (the llama.cpp
engine's cost parameters from public offload sweeps); ``sim llama`` is :mod:`sim.cli.llama_cmd`."""

from __future__ import annotations

import json
import os
import time

import click

from sim.cli.advise_options import (
    margin_option,
    quant_sizes,
    quants_option,
    search_lists,
    shown,
    token_options,
    unified_search,
)
from sim.cli.app import fail, main, user_errors
from sim.cli.machine_options import SEVERAL_QUANTS_HELP, MachineArgs, machine_options, machine_scenario
from sim.config.llamacpp import FIT_TARGET_MIB
from sim.core.errors import ScenarioError
from sim.formats.quantities import TOKENS_PER_S

MAX_EVALUATIONS = 1000  # sim fit-offload's least-squares iterations (each a Jacobian over every parameter), at most


def _anchor(text: str | None, base) -> dict:
    """``--anchor 'n_cpu_moe=30,ubatch_size=512:tg=25.3,pp=150'``: the placement a user measured and its rates
    (measurements: each a token rate in :data:`sim.formats.quantities.TOKENS_PER_S`'s range)."""
    if text is None:
        return {}
    from sim.config.llamacpp import LlamaCpp

    place, sep, rates = text.partition(":")
    if not sep:
        raise ScenarioError("--anchor", shown(text), "expected 'KEY=VALUE,...:tg=RATE,pp=RATE' (llama.cpp keys, tok/s)")
    fields = {}
    for item in filter(None, place.split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in LlamaCpp.model_fields:
            raise ScenarioError("--anchor", shown(key), "expected an engine.llamacpp key (n_cpu_moe, n_gpu_layers, "
                                "...)")
        fields[key.strip()] = value.strip()
    from pydantic import ValidationError

    try:
        settings = base.model_copy(update={}) if not fields else LlamaCpp(**(base.model_dump() | fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ScenarioError("--anchor", ".".join(str(x) for x in first["loc"]), first["msg"]) from None
    out = {}
    for item in filter(None, rates.split(",")):
        test, _, value = item.partition("=")
        if test.strip() not in ("tg", "pp"):
            raise ScenarioError("--anchor", shown(test), "expected tg=RATE or pp=RATE (tok/s)")
        rate = TOKENS_PER_S.parse(value, "--anchor", test.strip())
        out[test.strip()] = (settings, rate)
    if not out:
        raise ScenarioError("--anchor", shown(text), "expected the rates you measured after ':' (tg=RATE and/or "
                            "pp=RATE, tok/s)")
    return out


def size_source(scn, name: str, machine: MachineArgs) -> str:
    """Where the model's size comes from: the GGUF header, --model-gib, or config.json and the quant's recipe."""
    spec = scn.models[scn.machines[name].engine.model]
    if machine.model_gib is not None:
        return f"--model-gib {machine.model_gib:g} (every tensor scaled to it)"
    if (spec.file or "").endswith(".gguf"):
        return "the GGUF header (its tensors' types and shapes)"
    return f"config.json and the per-tensor recipe of {spec.quant} (llama.cpp's quantize rules): give --model " \
        "FILE.gguf or --model-gib for the file's own size"


def fit_choice(scn, name: str, ctx: int, n_prompt: int, n_gen: int, depth: int):
    """What llama-server with only ``-c`` (current defaults: --fit on, -ngl auto, f16 KV, -ub 512) would run: its
    candidate, or the reason it does not load."""
    from sim.core.errors import SimulationError
    from sim.llamacpp.advise import evaluate
    from sim.llamacpp.fit import resolve

    base = scn.machines[name].engine.llamacpp.model_copy(update={"fit": True, "n_gpu_layers": -1, "ctx_size": ctx})
    try:
        settings, fit = resolve(scn, name, base)
        return evaluate(scn, name, settings, n_prompt=n_prompt, n_gen=n_gen, depth=depth), fit
    except SimulationError as exc:
        return None, str(exc)


def rerun_in_llama(adv, machine: MachineArgs, top: int, scn=None, name: str | None = None) -> int:
    """Re-run every placement the advice will show through ``sim llama``'s path (its flags pasted as a llama-server
    line, read with the current build's defaults) on the machine the options describe, or on the scenario's
    (``scn``, machine ``name``: its engine with the pasted flags over it); one that does not load there is dropped.
    How many were."""
    from sim.cli.llama_cmd import command_settings, machine_dict
    from sim.cli.llamacpp_text import GOALS, command
    from sim.core.errors import SimulationError
    from sim.llamacpp.bench import run_bench
    from sim.llamacpp.cmdline import parse_command
    from sim.llamacpp.machine import build_scenario

    dropped, loads = 0, set()  # the placements re-run already, that loaded (a later round shows them again)
    for _ in range(len(adv.candidates)):
        shown = {id(c): c for goal, _ in GOALS for c in adv.best(goal, top) if id(c) not in loads}
        bad = []
        for c in shown.values():
            cmd = parse_command(command(c, "model.gguf"))
            settings, _ = command_settings(cmd)
            try:
                if scn is not None:
                    engine = scn.machines[name].engine.llamacpp.model_copy(update=settings)
                    rows = run_bench(scn, name, engine, n_prompt=[512], n_gen=[128], n_depth=[0])
                else:
                    raw = machine_dict(machine.with_quant(c.quant or machine.quant), machine.model_file,
                                       c.quant or machine.quant, settings,
                                       {"n_prompt": [512], "n_gen": [128], "n_depth": [0]})
                    rows = run_bench(build_scenario(raw, "command line"), "box")
            except SimulationError:
                rows = None
            if rows is None or any(r.error for r in rows):
                bad.append(c)
            else:
                loads.add(id(c))
        if not bad:
            break
        adv.candidates = [c for c in adv.candidates if all(c is not b for b in bad)]
        dropped += len(bad)
    return dropped


@main.command(short_help="Best llama.cpp placements of a model on a machine, to paste.")
@click.argument("scenario", required=False, type=click.Path(exists=True, dir_okay=False))
@machine_options(SEVERAL_QUANTS_HELP)
@click.option("--prompt", "n_prompt", type=int, default=512, show_default=True, help="Prompt tokens (pp test).")
@click.option("--gen", "n_gen", type=int, default=128, show_default=True, help="Generated tokens (tg test).")
@click.option("--depth", type=int, default=0, show_default=True, help="Context already in the KV cache (tokens).")
@click.option("--ctx", type=int, default=8192, show_default=True, help="-c: KV cells to allocate (tokens).")
@click.option("--parallel", "parallel", default="1", show_default=True, help="-np values to search, e.g. 1,2,4.")
@click.option("--ubatch", "ubatches", default=None, help="-ub values to search [default: 512,1024,2048, and 4096 "
              "for prompts of 4096 tokens or more].")
@click.option("--kv", "kv_types", default="f16,q8_0", show_default=True, help="KV cache types to search.")
@click.option("--anchor", default=None, help="A run you measured: 'n_cpu_moe=30:tg=25.3,pp=150' (the placement's "
              "keys, then tok/s): predictions scale to it (the band stays the held-out one unless the spread within "
              "one setup is narrower).")
@click.option("--margin-gib", type=float, default=FIT_TARGET_MIB / 1024, show_default=True, help="VRAM a placement "
              "must leave free on every card (GiB): what llama.cpp's --fit keeps (--fit-target).")
@click.option("--top", type=int, default=3, show_default=True, help="How many placements per goal.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@user_errors
def advise(scenario, machine: MachineArgs, n_prompt, n_gen, depth, ctx, parallel, ubatches, kv_types, anchor,
           margin_gib, top, as_json):
    """The best llama.cpp placements (--n-cpu-moe, -ngl, -ub, KV type, -np) of a model on a machine, for decode,
    for prefill and for a request of --prompt + --gen tokens: predicted tok/s with a 90% band, VRAM and RAM, and
    the flags to paste. The machine comes from SCENARIO (its llama.cpp engine) or from --model, --gpu, --host."""
    from sim.llamacpp.advise import advise as search

    token_options(n_prompt, n_gen, depth, ctx)
    if top < 1:
        raise ScenarioError("--top", str(top), "expected at least 1")
    margin_gib = margin_option(margin_gib)
    start = time.perf_counter()
    quants = quants_option(machine.quant, anchor, machine.model_gib)
    if ubatches is None:  # a ubatch longer than the prompt cannot gain
        ubatches = "512,1024,2048" + (",4096" if n_prompt >= 4096 else "")
    nps, ubs, kvs = search_lists(parallel, ubatches, kv_types, len(quants))
    from sim.llamacpp.advise import merged
    from sim.llamacpp.params import BAND as band
    from sim.llamacpp.params import BAND_NEAR as near
    from sim.llamacpp.params import BAND_WITHIN as within

    advices = {}
    for q in quants:
        scn, name = machine_scenario(scenario, machine.with_quant(q))
        unified = unified_search(scn, name)
        base = scn.machines[name].engine.llamacpp
        advices[q] = search(scn, name, n_prompt=n_prompt, n_gen=n_gen, depth=depth, ctx=ctx,
                            anchor=_anchor(anchor, base), ubatches=ubs, kv_types=kvs, parallel=nps, band=band,
                            band_within=within, margin_gib=margin_gib, band_near=near)
    adv = advices[quants[0]] if len(quants) == 1 else merged(advices)
    if not adv.candidates:
        first = next(iter(adv.rejected.values()), "no placement searched")
        fail(f"no placement of the model loads on this machine ({len(adv.rejected)} tried); the first: {first}", 1)
    if scenario is None or len(quants) == 1:  # a scenario's machine: its own engine under the pasted flags
        dropped = rerun_in_llama(adv, machine, top, *((scn, name) if scenario is not None else ()))
        if dropped:
            click.echo(f"sim: note: {dropped} placement(s) left out: they did not load when re-run as sim llama runs "
                       "them", err=True)
    what = {"scenario": scn, "machine": name, "n_prompt": n_prompt, "n_gen": n_gen, "depth": depth, "ctx": ctx,
            "seconds": time.perf_counter() - start, "unified": unified, "margin_gib": margin_gib,
            "quants": {q: a for q, a in advices.items()} if len(quants) > 1 else {},
            "sizes": quant_sizes(advices, scn, name) if len(quants) > 1 else {},
            "size_from": size_source(scn, name, machine), "fit": fit_choice(scn, name, ctx, n_prompt, n_gen, depth)}
    if as_json:
        from sim.cli.llamacpp_text import advice_json

        click.echo(json.dumps(advice_json(adv, what, top), indent=2, allow_nan=False))
        return
    from sim.cli.llamacpp_text import advice_text

    click.echo("\n".join(advice_text(adv, what, top)))


@main.command("fit-offload", short_help="Fit llama.cpp's shared cost parameters to llama-bench tables.")
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The project folder holding calibration/public/ and llamacpp_setups.yaml.")
@click.option("--out", "-o", "out", default=None,
              help="The fitted parameters (YAML); default calibration/llamacpp.yaml, or with --bench "
              "calibration/<scenario>_llamacpp.yaml. The public fit's residual report goes beside it.")
@click.option("--bench", "bench_files", multiple=True, type=click.Path(dir_okay=False),
              help="Your own llama-bench output (md, csv, json, jsonl, sweep-bench; repeatable): fit --scenario's "
              "engine to it instead of the public sweeps.")
@click.option("--scenario", default=None, type=click.Path(exists=True, dir_okay=False),
              help="With --bench: the scenario of the machine the runs come from (its llama.cpp engine).")
@click.option("--max-evaluations", type=int, default=60, show_default=True,
              help="Least-squares iterations at most (each a Jacobian over every parameter; 1 to 1,000).")
@user_errors
def fit_offload(root, out, bench_files, scenario, max_evaluations):
    """Fit the llama.cpp engine's shared cost parameters (per backend, never per card) to every public llama-bench
    table (calibration/public/, mapped by calibration/llamacpp_setups.yaml). How well they predict sources left
    out is `sim validate --public`. With --bench and --scenario: fit your machine's engine to your own llama-bench
    runs; the scenario reads the result back when you add the file to its `calibrations:`."""
    if not 1 <= max_evaluations <= MAX_EVALUATIONS:
        raise ScenarioError("--max-evaluations", str(max_evaluations), f"expected 1 to {MAX_EVALUATIONS:,} "
                            "iterations")
    if bench_files or scenario:
        if not (bench_files and scenario):
            raise ScenarioError("command line", "--bench" if scenario else "--scenario",
                                "missing: --bench FILE and --scenario SCENARIO go together")
        return _fit_own(scenario, bench_files, out, max_evaluations)
    out = out or "calibration/llamacpp.yaml"
    from sim.calibration.llamacpp_cases import read_cases
    from sim.calibration.llamacpp_fit import fit, predict
    from sim.calibration.llamacpp_report import report_markdown, result_yaml
    from sim.config.yaml_io import dump_yaml
    from sim.core.output import atomic_write_text

    table = read_cases(root)
    click.echo(f"sim fit-offload: {len(table.cases)} measured numbers of {len({c.source for c in table.cases})} "
               f"sources, {len(table.excluded)} rows not expressed", err=True)
    result = fit(table.cases, max_evaluations=max_evaluations)
    predictions = predict(table.cases, result.params)
    command = f"sim fit-offload --root {root} --out {out}"
    doc = result_yaml(result, table, predictions, command)
    header = [f"# The llama.cpp engine's cost parameters, written by: {command}",
              "# sim.llamacpp.params.DEFAULTS repeats these values (a test keeps them equal)."]
    atomic_write_text(out, "\n".join(header) + "\n" + dump_yaml(doc))
    report = os.path.join(os.path.dirname(out) or ".", "llamacpp_report.md")
    atomic_write_text(report, report_markdown(result, table, predictions))
    for key, v in doc["summary"].items():
        click.echo(f"{key:32s} in-sample median |error| {v['median_abs_error']:.4g} over {v['rows']} rows")
    click.echo(f"wrote {out} and {report} ({result.evaluations} evaluations)")


def _fit_own(scenario: str, bench_files: tuple[str, ...], out: str | None, max_evaluations: int = 60) -> None:
    """``sim fit-offload --bench FILE --scenario S``: a calibration file for S's llama.cpp engine."""
    from sim.calibration.own_runs import (
        at_bounds,
        check_run_count,
        fit_own,
        loadable,
        merge_repeats,
        own_runs,
        simulate,
    )
    from sim.config.yaml_io import dump_yaml
    from sim.core.output import atomic_write_text
    from sim.formats.bench_files import is_bench_output, read_bench_file
    from sim.llamacpp.params import unit

    scn, machine = machine_scenario(scenario, MachineArgs(os_name="linux"))
    base = scn.machines[machine].engine.llamacpp
    runs, notes, warnings = [], [], []
    for path in bench_files:
        text_runs = read_bench_file(path)
        if not text_runs.records and text_runs.bad:  # rows, none readable (1e300 t/s): the first one's reason
            raise ScenarioError(path, f"line {text_runs.bad[0].line}", text_runs.bad[0].reason)
        warnings += [f"{path}: line {b.line}: {b.reason} (row left out)" for b in text_runs.bad]
        if not is_bench_output(text_runs):
            raise ScenarioError(path, "", f"no llama-bench table or records found ({len(text_runs.skipped)} other "
                                "lines): expected llama-bench's md, csv, json or jsonl output, or sweep-bench's")
        found, why = own_runs(text_runs, base)
        runs += found
        notes += [f"{path}: {n}" for n in why]
    if not runs:
        raise ScenarioError(bench_files[0], "", "no pp or tg test to fit")
    source = bench_files[0] if len(bench_files) == 1 else "bench"
    runs, why = merge_repeats(runs)
    notes += [f"{source}: {n}" for n in why]
    check_run_count(runs, source)
    from sim.llamacpp.bench import bench_setup

    before = bench_setup(scn, machine, runs[0].settings, runs[0].tokens + runs[0].depth).engine.hw.params
    runs, why = loadable(scn, machine, runs, before)
    notes += [f"{source}: {n}" for n in why]
    if not runs:
        raise ScenarioError(bench_files[0], "", "no pp or tg test that loads on the scenario's machine: "
                            + (why[0] if why else "none to fit"))
    after, names = fit_own(scn, machine, runs, before, max_evaluations)
    warnings += at_bounds(after, names)
    for w in warnings:
        click.echo(f"sim: warning: {w}", err=True)
    for n in notes:
        click.echo(f"sim: note: {n}", err=True)
    click.echo(f"{'test':14s} {'measured':>9s} {'before':>9s} {'after':>9s}  flags")
    for r in runs:
        label = f"{r.test}{r.tokens}" + (f" @ d{r.depth}" if r.depth else "")
        flags = f"-ngl {r.settings.n_gpu_layers} -ncmoe {r.settings.n_cpu_moe} -ub {r.settings.ubatch_size}"
        click.echo(f"{label:14s} {r.measured:9.2f} {simulate(scn, machine, r, before):9.2f} "
                   f"{simulate(scn, machine, r, after):9.2f}  {flags}")
    prefix = f"machines.{machine}.engine.llamacpp.costs"
    plain = {n: n.split(".", 1)[0] for n in names}  # the engine's own backend's value: costs.FAMILY
    got = after.lookup()
    doc = {"kind": "fit-offload", "parameters": {f"{prefix}.{plain[n]}": got[n] for n in names},
           "units": {f"{prefix}.{plain[n]}": unit(n) for n in names},
           "runs": [f"{p}" for p in bench_files]}
    stem = os.path.splitext(os.path.basename(scenario))[0]
    out = out or os.path.join("calibration", f"{stem}_llamacpp.yaml")
    header = [f"# Written by: sim fit-offload --scenario {scenario} " + " ".join(f"--bench {p}" for p in bench_files),
              f"# Your runs ({len(runs)} tests) moved these from the public fit; list this file under the scenario's",
              "# calibrations: to use them (values the scenario sets itself win)."]
    atomic_write_text(out, "\n".join(header) + "\n" + dump_yaml(doc))
    was = before.lookup()
    click.echo(f"wrote {out}: " + ", ".join(f"{n} {was[n]:.4g} -> {got[n]:.4g}" for n in names))
