"""``sim advise`` (the best llama.cpp placements of a model on a machine), ``sim fit-offload`` (the llama.cpp
engine's cost parameters from public offload sweeps) and ``sim llama`` (a scenario from a pasted llama.cpp command
line)."""

from __future__ import annotations

import json
import os
import time

import click

from sim.cli.advise_options import (
    machine_spec,
    margin_option,
    quant_sizes,
    quants_option,
    search_lists,
    shown,
    token_options,
    unified_search,
)
from sim.cli.app import fail, main, user_errors
from sim.core.errors import ScenarioError
from sim.formats.quantities import TOKENS_PER_S

MAX_EVALUATIONS = 1000  # sim fit-offload's least-squares iterations (each a Jacobian over every parameter), at most

MACHINE_OPTIONS = [
    click.option("--model", "model_file", default=None, help="A config.json (with --quant) or a "
                 ".gguf file; default: the scenario's model."),
    None,  # --quant: its help depends on the command (machine_options)
    click.option("--model-gib", type=float, default=None, help="The GGUF file's size (GiB): tensors scaled to it."),
    click.option("--gpu", default=None, help="Catalog GPU type (sim catalog), e.g. rtx4060ti_16gb."),
    click.option("--gpus", type=int, default=1, show_default=True, help="How many of that card, at most 16 "
                 "(llama.cpp's GGML_CUDA_MAX_DEVICES); 0: llama.cpp on the CPU alone."),
    click.option("--host", default=None, help="Catalog host (sim catalog --kind hosts), e.g. ryzen7_9700x."),
    click.option("--ram-gib", type=float, default=None, help="Host RAM installed (GiB): placements needing more "
                 "are left out."),
    click.option("--os", "os_name", type=click.Choice(["linux", "windows", "macos"]), default=None,
                 help="windows: WDDM keeps VRAM for the desktop and falls back to shared memory; default macos for an "
                 "Apple chip, linux otherwise."),
    click.option("--slot-gen", type=int, default=None, help="PCIe generation of the slot (default: the card's)."),
    click.option("--slot-lanes", type=int, default=16, show_default=True, help="PCIe lanes of the slot."),
    click.option("--reserved-gib", type=float, default=0.0, help="VRAM other processes hold on each card (GiB)."),
    click.option("--gpu-gib", type=float, default=None, help="A unified-memory chip (GB10, Strix Halo, Apple): "
                 "what its GPU may allocate of the pool (GiB), as iogpu.wired_limit_mb or the GTT size sets it; "
                 "default: the platform's rule (sim advise then searches up to all the OS leaves and says what to "
                 "set)."),
]


QUANT_HELP = "Quantization of a config.json model (Q4_K_M, MXFP4_MOE, ...)."
SEVERAL_QUANTS_HELP = QUANT_HELP[:-1] + "; several, comma-separated, are ranked together."


def machine_options(quant_help: str = QUANT_HELP):
    """The machine and model options of sim advise and sim llama, with ``quant_help`` as --quant's help."""
    def decorate(fn):
        for option in reversed(MACHINE_OPTIONS):
            fn = (option or click.option("--quant", default=None, help=quant_help))(fn)
        return fn
    return decorate


def _machine_scenario(scenario, model_file, quant, model_gib, gpu, gpus, host, ram_gib, os_name, slot_gen,
                      slot_lanes, reserved_gib, settings: dict | None = None, bench: dict | None = None,
                      gpu_gib: float | None = None):
    """(scenario, machine name): the scenario file's llama.cpp machine, or one built from the options."""
    from sim.llamacpp.machine import build_scenario, scenario_dict

    if scenario is not None:
        from sim.config.load import load_scenario

        scn, _ = load_scenario(scenario)
        names = [n for n, m in scn.machines.items() if m.engine is not None and m.engine.llamacpp is not None]
        if not names:
            raise ScenarioError(scenario, "machines", "no machine with an engine.llamacpp section")
        return scn, names[0]
    missing = [flag for flag, v in (("--model", model_file), ("--gpu", gpu), ("--host", host)) if v is None]
    if missing:
        raise ScenarioError("command line", missing[0], "missing: give a scenario, or --model, --gpu and --host")
    spec = machine_spec(gpu, gpus, host, ram_gib, os_name, slot_gen, slot_lanes, reserved_gib, gpu_gib)
    raw = scenario_dict(spec, model_file, quant, settings or {}, model_gib, bench=bench)
    return build_scenario(raw, "command line"), "box"


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


@main.command(short_help="Best llama.cpp placements of a model on a machine, to paste.")
@click.argument("scenario", required=False, type=click.Path(exists=True, dir_okay=False))
@machine_options(SEVERAL_QUANTS_HELP)
@click.option("--prompt", "n_prompt", type=int, default=512, show_default=True, help="Prompt tokens (pp test).")
@click.option("--gen", "n_gen", type=int, default=128, show_default=True, help="Generated tokens (tg test).")
@click.option("--depth", type=int, default=0, show_default=True, help="Context already in the KV cache (tokens).")
@click.option("--ctx", type=int, default=8192, show_default=True, help="-c: KV cells to allocate (tokens).")
@click.option("--parallel", "parallel", default="1", show_default=True, help="-np values to search, e.g. 1,2,4.")
@click.option("--ubatch", "ubatches", default="512,1024,2048", show_default=True, help="-ub values to search.")
@click.option("--kv", "kv_types", default="f16,q8_0", show_default=True, help="KV cache types to search.")
@click.option("--anchor", default=None, help="A run you measured: 'n_cpu_moe=30:tg=25.3,pp=150' (the placement's "
              "keys, then tok/s): predictions scale to it (the band stays the held-out one unless the spread within "
              "one setup is narrower).")
@click.option("--margin-gib", type=float, default=0.5, show_default=True, help="VRAM a placement must leave free "
              "on every card (GiB).")
@click.option("--top", type=int, default=3, show_default=True, help="How many placements per goal.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@user_errors
def advise(scenario, model_file, quant, model_gib, gpu, gpus, host, ram_gib, os_name, slot_gen, slot_lanes,
           reserved_gib, gpu_gib,
           n_prompt, n_gen, depth, ctx, parallel, ubatches, kv_types, anchor, margin_gib, top, as_json):
    """The best llama.cpp placements (--n-cpu-moe, -ngl, -ub, KV type, -np) of a model on a machine, for decode,
    for prefill and for a request of --prompt + --gen tokens: predicted tok/s with a 90% band, VRAM and RAM, and
    the flags to paste. The machine comes from SCENARIO (its llama.cpp engine) or from --model, --gpu, --host."""
    from sim.llamacpp.advise import advise as search

    token_options(n_prompt, n_gen, depth, ctx)
    if top < 1:
        raise ScenarioError("--top", str(top), "expected at least 1")
    margin_gib = margin_option(margin_gib)
    start = time.perf_counter()
    quants = quants_option(quant, anchor, model_gib)
    nps, ubs, kvs = search_lists(parallel, ubatches, kv_types, len(quants))
    from sim.llamacpp.advise import merged
    from sim.llamacpp.params import BAND as band
    from sim.llamacpp.params import BAND_WITHIN as within

    advices = {}
    for q in quants:
        scn, machine = _machine_scenario(scenario, model_file, q, model_gib, gpu, gpus, host, ram_gib, os_name,
                                         slot_gen, slot_lanes, reserved_gib, gpu_gib=gpu_gib)
        unified = unified_search(scn, machine)
        base = scn.machines[machine].engine.llamacpp
        advices[q] = search(scn, machine, n_prompt=n_prompt, n_gen=n_gen, depth=depth, ctx=ctx,
                            anchor=_anchor(anchor, base), ubatches=ubs, kv_types=kvs, parallel=nps, band=band,
                            band_within=within, margin_gib=margin_gib)
    adv = advices[quants[0]] if len(quants) == 1 else merged(advices)
    if not adv.candidates:
        first = next(iter(adv.rejected.values()), "no placement searched")
        fail(f"no placement of the model loads on this machine ({len(adv.rejected)} tried); the first: {first}", 1)
    what = {"scenario": scn, "machine": machine, "n_prompt": n_prompt, "n_gen": n_gen, "depth": depth, "ctx": ctx,
            "seconds": time.perf_counter() - start, "unified": unified, "margin_gib": margin_gib,
            "quants": {q: a for q, a in advices.items()} if len(quants) > 1 else {},
            "sizes": quant_sizes(advices, scn, machine) if len(quants) > 1 else {}}
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


SCHEMA_KEYS = ("n_gpu_layers", "n_cpu_moe", "cpu_moe", "override_tensor", "ctx_size", "batch_size", "ubatch_size",
               "threads", "flash_attn", "cache_type_k", "cache_type_v", "parallel", "mmap", "tensor_split",
               "kv_offload", "op_offload")


def command_settings(cmd) -> tuple[dict, list[str]]:
    """The ``engine.llamacpp`` keys of a parsed command line, and what the engine leaves out (one note each)."""
    out, notes = {}, []
    for key, value in cmd.settings.items():
        if key in SCHEMA_KEYS:
            out[key] = value
        else:
            notes.append(f"{key}={value!r}: no effect on speed or memory in the model")
    if out.get("n_gpu_layers") == -1:  # auto: llama.cpp's --fit places what fits (done by `fit_auto`)
        out["n_gpu_layers"] = 999
        notes.append("-ngl auto: every layer on the GPU, then --n-cpu-moe raised until it fits (llama.cpp's --fit)")
        out["_fit"] = True
    if cmd.unknown:
        notes.append(f"not understood, left out: {' '.join(cmd.unknown)}")
    return out, notes


def fit_auto(scn, machine: str, margin_gib: float = 1.0):
    """llama.cpp's ``--fit``: the fewest layers' experts on the CPU that leave ``margin_gib`` free on every card."""
    from sim.core.errors import SimulationError
    from sim.llamacpp.bench import bench_setup
    from sim.llamacpp.setup import placement_model

    m = scn.machines[machine]
    base = m.engine.llamacpp
    spec = scn.models[m.engine.model]
    layers = placement_model(spec.file, spec.quant, spec.weights_gib).geometry.layers  # dense blocks may lead
    for n in range(base.n_cpu_moe, layers + 1):
        s = base.model_copy(update={"n_cpu_moe": n})
        try:
            st = bench_setup(scn, machine, s, s.ctx_size)
        except SimulationError:
            continue
        if all(mem.free is None or mem.total <= mem.free - margin_gib * 2**30 for mem in st.memory):
            return s
    return base


@main.command("llama", short_help="A pasted llama.cpp command line, run on catalog hardware.")
@click.argument("command_line")
@machine_options()
@click.option("--write", "write_to", default=None, type=click.Path(dir_okay=False),
              help="Write the scenario (YAML) here instead of running it.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as sim run --json does.")
@user_errors
def llama(command_line, model_file, quant, model_gib, gpu, gpus, host, ram_gib, os_name, slot_gen, slot_lanes,
          reserved_gib, gpu_gib, write_to, as_json):
    """Run (or --write) a scenario from a pasted llama-server / llama-cli / llama-bench / llama-sweep-bench /
    llama-batched-bench COMMAND_LINE on the machine --gpu and --host name (catalog types). The model is the command's
    -m when it is a GGUF file here, else --model (a config.json with --quant). A llama-bench line runs its tests
    (every value of a swept flag, as llama-bench does); a llama-batched-bench line prints its table, a row per -npp x
    -ntg x -npl test that fits in -c; a server or cli line runs llama-bench's defaults, pp512 and tg128."""
    from sim.config.yaml_io import dump_yaml
    from sim.llamacpp.cmdline import parse_command
    from sim.llamacpp.machine import build_scenario, scenario_dict

    cmd = parse_command(command_line)
    path = model_file
    if path is None and cmd.model_path and cmd.model_path.endswith(".gguf") and os.path.exists(cmd.model_path):
        path = cmd.model_path
    if path is None:
        raise ScenarioError("command line", "-m", f"{cmd.model_path or 'no model'}: not a GGUF file here; give "
                            "--model (a config.json, with --quant, or a .gguf)")
    missing = [flag for flag, v in (("--gpu", gpu), ("--host", host)) if v is None]
    if missing:
        raise ScenarioError("command line", missing[0], "missing: the machine's catalog GPU type and host")
    quant = quants_option(quant, None, None, most=1)[0]
    settings, notes = command_settings(cmd)
    auto = settings.pop("_fit", False)
    b = cmd.bench or {}
    batched = cmd.program == "llama-batched-bench"
    bench = None if batched else {"n_prompt": list(b.get("n_prompt", [512])), "n_gen": list(b.get("n_gen", [128])),
                                  "n_depth": list(b.get("n_depth", [0]))}
    if batched:
        from sim.cli.llamacpp_text import batched_notes

        notes += batched_notes(cmd, settings)
    spec = machine_spec(gpu, gpus, host, ram_gib, os_name, slot_gen, slot_lanes, reserved_gib, gpu_gib)
    raw = scenario_dict(spec, path, quant, settings, model_gib, name="llama", bench=bench)
    raw["description"] = f"From: {command_line.strip()[:400]}"
    scn = build_scenario(raw, "command line")
    if auto:
        fitted = fit_auto(scn, "box")
        raw["machines"]["box"]["engine"]["llamacpp"]["n_cpu_moe"] = fitted.n_cpu_moe
        scn = build_scenario(raw, "command line")
    for note in notes:
        click.echo(f"sim: note: {note}", err=True)
    if write_to:
        from sim.core.output import atomic_write_text

        atomic_write_text(write_to, dump_yaml(raw))
        click.echo(f"wrote {write_to} (sim run {write_to})" + (
            "; a scenario holds the machine and engine, not llama-batched-bench's -npp / -ntg / -npl tests: run the "
            "line with sim llama" if batched else ""))
        return
    if batched:
        _run_batched(scn, cmd, as_json)
        return
    _run_with_sweeps(raw, scn, cmd, as_json)


def _run_batched(scn, cmd, as_json: bool) -> None:
    """llama-batched-bench's tests of the line on the scenario's machine: its table, or the rows as JSON."""
    from sim.cli.llamacpp_text import batched_json, batched_text
    from sim.core.errors import SimulationError
    from sim.llamacpp.batched import batched_setup, run_batched
    from sim.llamacpp.cmdline_batched import batched_tests

    b, settings = cmd.bench, scn.machines["box"].engine.llamacpp
    rows = run_batched(scn, "box", settings, b["n_pp"], b["n_tg"], b["n_pl"], pp_shared=b["is_pp_shared"])
    done = {(r.pp, r.tg, r.b) for r in rows}
    skipped = [test for test in batched_tests(b) if test not in done]
    try:
        setup = batched_setup(scn, "box", settings, b["n_pl"] or [1])
    except SimulationError:
        setup = None  # the rows say why
    what = {"scenario": scn, "machine": "box", "settings": settings, "bench": b, "setup": setup, "skipped": skipped}
    if as_json:
        from sim.core.output import dumps

        click.echo(dumps(batched_json(rows, what)), nl=False)
        return
    click.echo("\n".join(batched_text(rows, what)))


def _run_with_sweeps(raw: dict, scn, cmd, as_json: bool) -> None:
    """``sim run`` of the scenario; with llama-bench sweeps, once per combination of the swept values, each
    validated and checked as a scenario file would be; at most MAX_BENCH_TESTS tests in all. A test that cannot
    load is null in JSON (its rate, time and memory) with its ``error``, as ``sim run --json`` writes it."""
    import copy
    import itertools

    from sim.core.output import dumps
    from sim.llamacpp.machine import build_scenario
    from sim.report import run_text
    from sim.runner import run, summary

    swept = {k: v for k, v in cmd.sweeps.items() if k in SCHEMA_KEYS}
    _check_tests(scn, swept)
    combos = [dict(zip(swept, values, strict=True)) for values in itertools.product(*swept.values())] or [{}]
    docs = []
    for combo in combos:
        case = scn
        if combo:
            varied = copy.deepcopy(raw)
            varied["machines"]["box"]["engine"]["llamacpp"].update(combo)
            case = build_scenario(varied, "command line")
        res = run(case, scn.seed)
        if as_json:
            docs.append(summary(res, "command line") | {"sweep": combo})
        else:
            if combo:
                click.echo(", ".join(f"{k}={v}" for k, v in combo.items()) + ":")
            click.echo(run_text(res), nl=False)
    if as_json:
        click.echo(dumps(docs[0] if len(docs) == 1 else docs), nl=False)


def _check_tests(scn, swept: dict[str, list]) -> None:
    """A llama-bench line's tests (its -p and -n lengths at every -d, once per combination of the swept flags'
    values), at most MAX_BENCH_TESTS, as a scenario's bench section."""
    from sim.config.llamacpp import MAX_BENCH_TESTS
    from sim.llamacpp.cmdline import bench_flag

    tests = scn.bench.tests() if scn.bench is not None else 1
    for values in swept.values():
        tests *= len(values)
    if tests > MAX_BENCH_TESTS:
        flags = " x ".join(["-p/-n/-d tests", *(bench_flag(key) for key in swept)])
        raise ScenarioError("command line", "bench", f"{flags} make {tests:,} tests: expected at most "
                            f"{MAX_BENCH_TESTS:,} (split the sweep into several runs, each a part of its values)")


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

    scn, machine = _machine_scenario(scenario, None, None, None, None, 1, None, None, "linux", None, 16, 0.0)
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
