"""``sim llama``: a pasted llama.cpp command line (llama-server, llama-cli, llama-bench, llama-sweep-bench,
llama-batched-bench) run as a scenario on the machine the options describe."""

from __future__ import annotations

import os

import click

from sim.cli.advise_options import quants_option
from sim.cli.app import main, user_errors
from sim.cli.machine_options import MachineArgs, machine_options
from sim.core.errors import ScenarioError

SCHEMA_KEYS = ("n_gpu_layers", "n_cpu_moe", "cpu_moe", "override_tensor", "ctx_size", "batch_size", "ubatch_size",
               "threads", "threads_batch", "flash_attn", "cache_type_k", "cache_type_v", "parallel", "mmap",
               "tensor_split", "kv_offload", "op_offload", "kv_unified", "fit", "fit_target_mib", "fit_ctx")
AUTO_SLOTS = 4  # llama-server's slots when -np is auto (tools/server: n_parallel < 0 -> 4, kv_unified)


def command_settings(cmd, build: int | None = None) -> tuple[dict, list[str]]:
    """The ``engine.llamacpp`` keys of a parsed command line read with the defaults of ``build`` (default: the
    current release, :mod:`sim.llamacpp.builds`), and what the engine leaves out (one note each)."""
    from sim.config.llamacpp import MAX_CTX
    from sim.llamacpp.builds import SERVER, SERVER_CLI, defaults
    from sim.llamacpp.cmdline import ALL_LAYERS

    given = cmd.settings
    d = defaults(cmd.program, build)
    out, notes = {}, list(d.notes)
    for key, value in given.items():
        if key in SCHEMA_KEYS and not (key == "kv_unified" and cmd.program == "llama-batched-bench"):
            out[key] = value
        else:
            notes.append(f"{key}={value!r}: no effect on speed or memory in the model")
    if isinstance(out.get("fit_target_mib"), list):
        targets = out["fit_target_mib"]
        out["fit_target_mib"] = max(targets)
        if len(set(targets)) > 1:
            notes.append(f"--fit-target {','.join(f'{t:g}' for t in targets)}: one margin per card; the largest, "
                         f"{max(targets):g} MiB, kept on every card")
    ngl = out.get("n_gpu_layers")
    if ngl is not None and ngl < -1:  # -ngl all (and any value below -1) is every layer
        out["n_gpu_layers"] = ALL_LAYERS
    if cmd.program == "llama-bench":
        if "flash_attn" not in given:
            out["flash_attn"] = d.values["flash_attn"]
        if ngl == -1:
            out["n_gpu_layers"] = ALL_LAYERS  # llama-bench's -ngl -1: every layer (no fit)
        return out, notes
    if cmd.program not in SERVER_CLI:  # llama-server, llama-cli and llama-batched-bench (common params)
        return out, notes
    fit = out.get("fit", d.values["fit"])
    out["fit"] = fit
    if ngl is None:
        out["n_gpu_layers"] = d.values["n_gpu_layers"]
    if out["n_gpu_layers"] == -1 and not fit:
        out["n_gpu_layers"] = ALL_LAYERS  # auto without the fit (or "use default" before b7553): every layer
    if cmd.program == "llama-batched-bench":  # common's fit and -ngl; its -c is n_kv_max (sim.cli.llamacpp_text)
        return out, notes
    if "ctx_size" not in given:
        out["ctx_size"] = d.values["ctx_size"]
    elif given["ctx_size"] == 0 and fit and d.values["explicit_full_context"]:
        out["fit_ctx"] = MAX_CTX  # an explicit -c 0 keeps the training context (PR 19070)
    if "flash_attn" not in given:
        out["flash_attn"] = d.values["flash_attn"]
    if cmd.program in SERVER and d.values["parallel"] == "auto" and "kv_unified" not in given and (
            "parallel" not in given or (given["parallel"] == 1 and not d.values["explicit_np_kept"])):
        out.update(parallel=AUTO_SLOTS, kv_unified=True)
        notes.append(f"-np auto: {AUTO_SLOTS} slots sharing one unified KV cache (llama-server's default)")
    if out["n_gpu_layers"] == -1 or out.get("ctx_size") == 0 or fit:
        notes.append(f"read as b{d.build} runs it: --fit {'on' if fit else 'off'}"
                     + (", -ngl auto" if out["n_gpu_layers"] == -1 else "")
                     + (", -c 0 (the model's training context)" if out.get("ctx_size") == 0 else ""))
    return out, notes


def build_option(text: str | None) -> int | None:
    """``--build``: a llama.cpp build number, ``7410`` or ``b7410``."""
    if text is None:
        return None
    digits = text[1:] if text[:1] in "bB" else text
    if not digits.isdigit() or not 1 <= int(digits) <= 10**6:
        raise ScenarioError("--build", text, "expected a llama.cpp build number such as b7410 (llama-server "
                            "--version prints it)")
    return int(digits)


@main.command("llama", short_help="A pasted llama.cpp command line, run on any machine.")
@click.argument("command_line")
@machine_options()
@click.option("--build", "build_text", default=None, help="The llama.cpp build the line runs on (b7410; default: a "
              "build number in the pasted text, else the current release): flags left off take its defaults.")
@click.option("--prompt", "n_prompt", type=int, default=None, help="A server or cli line: prompt tokens of the "
              "request (default 512, llama-bench's pp512).")
@click.option("--gen", "n_gen", type=int, default=None, help="A server or cli line: tokens generated (default 128).")
@click.option("--depth", "n_depth", type=int, default=None, help="A server or cli line: tokens already in the "
              "context, the conversation so far (default 0).")
@click.option("--write", "write_to", default=None, type=click.Path(dir_okay=False),
              help="Write the scenario (YAML) here instead of running it.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as sim run --json does.")
@user_errors
def llama(command_line, machine: MachineArgs, build_text, n_prompt, n_gen, n_depth, write_to, as_json):
    """Run (or --write) a scenario from a pasted llama-server / llama-cli / llama-bench / llama-sweep-bench /
    llama-batched-bench COMMAND_LINE on the machine the options describe (catalog names, or its figures; no GPU: the
    CPU alone). Flags left off take the defaults of the line's build (--build): in current builds --fit places the
    layers and sizes the context so that each card keeps 1 GiB free. The model is the command's -m when it is a GGUF
    file here, else --model (a config.json with --quant). A llama-bench line runs its tests (every value of a swept
    flag, as llama-bench does); a llama-batched-bench line prints its table, a row per -npp x -ntg x -npl test that
    fits in -c; a server or cli line runs one request, --prompt tokens then --gen, after --depth (pp512 and tg128
    at depth 0 by default)."""
    from sim.config.yaml_io import dump_yaml
    from sim.llamacpp.builds import parse_build
    from sim.llamacpp.cmdline import parse_command
    from sim.llamacpp.machine import build_scenario

    cmd = parse_command(command_line)
    path = machine.model_file
    if path is None and cmd.model_path and cmd.model_path.endswith(".gguf") and os.path.exists(cmd.model_path):
        path = cmd.model_path
    if path is None:
        raise ScenarioError("command line", "-m", f"{cmd.model_path or 'no model'}: not a GGUF file here; give "
                            "--model (a config.json, with --quant, or a .gguf)")
    if machine.host is None and not machine.has_host_figures():
        raise ScenarioError("command line", "--host", "missing: the machine's catalog host, or its figures "
                            "(--dram DDR5-6000 --channels 2 --cores 8)")
    quant = quants_option(machine.quant, None, None, most=1)[0]
    build = build_option(build_text) or parse_build(command_line)
    settings, notes = command_settings(cmd, build)
    b = cmd.bench or {}
    batched = cmd.program == "llama-batched-bench"
    asked = {"--prompt": n_prompt, "--gen": n_gen, "--depth": n_depth}
    if any(v is not None for v in asked.values()) and cmd.program not in ("llama-server", "llama-cli"):
        raise ScenarioError("command line", next(k for k, v in asked.items() if v is not None),
                            f"a {cmd.program} line names its own tests (-p, -n, -d): expected --prompt, --gen and "
                            "--depth with a llama-server or llama-cli line")
    for flag, value, low in (("--prompt", n_prompt, 0), ("--gen", n_gen, 0), ("--depth", n_depth, 0)):
        if value is not None and not low <= value <= 10_000_000:
            raise ScenarioError("command line", flag, f"expected 0 to 10,000,000 tokens, got {value}")
    if n_prompt == 0 and n_gen == 0:
        raise ScenarioError("command line", "--prompt", "expected some tokens: --prompt and --gen are both 0")
    bench = None if batched else {
        "n_prompt": [n_prompt] if n_prompt is not None else list(b.get("n_prompt", [512])),
        "n_gen": [n_gen] if n_gen is not None else list(b.get("n_gen", [128])),
        "n_depth": [n_depth] if n_depth is not None else list(b.get("n_depth", [0]))}
    if batched:
        from sim.cli.llamacpp_text import batched_notes

        notes += batched_notes(cmd, settings)
    raw = machine_dict(machine, path, quant, settings, bench)
    raw["description"] = f"From: {command_line.strip()[:400]}"
    scn = build_scenario(raw, "command line")
    notes += fit_notes(scn, "box")
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


def machine_dict(machine: MachineArgs, path: str, quant: str | None, settings: dict, bench: dict | None) -> dict:
    """The scenario (a dict) of ``machine`` running ``path`` with ``settings``, --set changes applied."""
    from sim.llamacpp.machine import scenario_dict

    raw = scenario_dict(machine.spec(), path, quant, settings, machine.model_gib, name="llama", bench=bench)
    return machine.finish(raw)


def fit_notes(scn, name: str) -> list[str]:
    """What llama.cpp's --fit does on the scenario's machine (at the largest test's context), and the flags that
    would pin its choice: none when the engine's settings leave nothing to it."""
    from sim.core.errors import SimulationError
    from sim.llamacpp.cmdline import to_command
    from sim.llamacpp.fit import resolve

    s = scn.machines[name].engine.llamacpp
    if not (s.fit or s.n_gpu_layers < 0 or s.ctx_size == 0):
        return []
    try:
        resolved, fit = resolve(scn, name, s)
    except SimulationError as exc:
        return [f"llama.cpp's --fit could not measure the placements: {exc}"]
    if fit is None:
        return [f"-c 0: the model's training context, {resolved.ctx_size:,} tokens" if s.ctx_size == 0 else
                "-ngl auto without the fit: every layer on the GPUs"]
    keys = [k for k in ("n_gpu_layers", "ctx_size", "tensor_split", "override_tensor") if k in fit.changed]
    flags = {k: getattr(resolved, k) for k in keys if getattr(resolved, k) not in (None, [])}
    if "override_tensor" in flags:
        from sim.llamacpp.fit import merged_rules

        flags["override_tensor"] = merged_rules(flags["override_tensor"])
    pinned = to_command(flags).split(" ", 3)[3] if flags else ""
    return [fit.summary()] + ([f"the fit's choice as flags: {pinned}"] if pinned and not fit.failed else [])


def _run_batched(scn, cmd, as_json: bool) -> None:
    """llama-batched-bench's tests of the line on the scenario's machine: its table, or the rows as JSON."""
    from sim.cli.llamacpp_text import batched_json, batched_text
    from sim.core.errors import SimulationError
    from sim.llamacpp.batched import batched_setup, run_batched
    from sim.llamacpp.cmdline_batched import batched_tests
    from sim.llamacpp.fit import resolve

    b, settings = cmd.bench, scn.machines["box"].engine.llamacpp
    settings = resolve(scn, "box", settings)[0]  # what llama.cpp loads: the fit's choice (as the JSON shows)
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
