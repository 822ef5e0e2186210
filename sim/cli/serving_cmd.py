"""``sim vllm``: a pasted vLLM or SGLang server command line run (or written, ``--write``) as a scenario of the dense
continuous-batching engine. Thin: parse (:mod:`sim.serving.cmdline`), build (:mod:`sim.vllm_scenario`),
print."""

from __future__ import annotations

import os
import shlex
from typing import Any

import click

from sim.cli.app import main, user_errors, warn_implausible
from sim.core.errors import ScenarioError

SCHEDULER_PATH = "machines.box.engine.scheduler."
PATHS = {"max_num_seqs": SCHEDULER_PATH + "max_num_seqs", "max_num_batched_tokens": SCHEDULER_PATH +
         "max_num_batched_tokens", "chunked_prefill_size": SCHEDULER_PATH + "max_num_batched_tokens",
         "gpu_memory_utilization": SCHEDULER_PATH + "gpu_memory_utilization", "block_size": SCHEDULER_PATH +
         "block_size", "enable_chunked_prefill": SCHEDULER_PATH + "enable_chunked_prefill",
         "enable_prefix_caching": SCHEDULER_PATH + "enable_prefix_caching", "preemption_mode": SCHEDULER_PATH +
         "preemption_mode", "num_gpu_blocks_override": SCHEDULER_PATH + "num_gpu_blocks_override",
         "max_total_tokens": SCHEDULER_PATH + "num_gpu_blocks_override", "tensor_parallel":
         "machines.box.engine.tensor_parallel", "mem_fraction_static": "machines.box.engine.runtime_gib",
         "kv_cache_memory_bytes": "machines.box.engine.iteration.kv_pool_gib", "kv_cache_dtype":
         "models.*.dense.kv_kib_per_token", "dtype": "models.*.weights_gib", "quantization": "models.*.weights_gib"}


def _value(value: Any) -> str:
    """A setting as the output shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "unset"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items() if v is not None)
    return str(value)


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def settings_lines(cmd, built) -> list[str]:
    """The settings read (each with where it came from), the flags without effect, the unknown ones, the notes."""
    from sim.serving.engine_defaults import NAMES

    r = built.resolved
    lines = [f"{NAMES[cmd.engine]} {r.version} ({cmd.program}), model {cmd.model or '-'}: {_shown(built.model_file)}",
             "settings:"]
    from sim.core.text import wrap

    width = max(len(k) for k in [*r.values, *built.sources])
    for key, value in r.values.items():
        lines += wrap(f"  {key:{width}s}  {_value(value):>10s}  {r.sources.get(key, '')}", hang=width + 14)
    for key, text in built.sources.items():
        lines += wrap(f"  {key:{width}s}  {text}", hang=width + 2)
    tail = [f"without effect on speed or memory: {' '.join(cmd.ignored) or 'none'}",
            f"not understood, left out: {' '.join(cmd.unknown) or 'none'}", *(f"note: {n}" for n in built.notes)]
    return lines + [part for line in tail for part in wrap(line)]


def scenario_yaml(built, argv: str) -> str:
    """The scenario as YAML, a comment header saying where each value came from."""
    from sim.config.yaml_io import dump_yaml

    r = built.resolved
    header = [f"# Written by: {argv}"[:2000],
              f"# A {r.engine} server's command line on sim's dense continuous-batching engine; where each value comes "
              "from:"]
    for key, value in r.values.items():
        where = PATHS.get(key, "(read, not in the scenario)")
        header.append(f"#   {key} = {_value(value)} -> {where}: {r.sources.get(key, '')}")
    for key, text in built.sources.items():
        header.append(f"#   {key}: {text}")
    header.append("# The iteration efficiencies and overhead are left out: the engine takes the card family's fitted "
                  "values and the server's overhead (sim.batching.families, iteration.server), as the run says.")
    header += [f"# note: {n}" for n in built.notes]
    from sim.core.text import wrap

    lines = [part if i == 0 else "#" + part for line in header
             for i, part in enumerate(wrap(line.replace("\n", " "), width=120, hang=4))]
    return "\n".join(lines) + "\n" + dump_yaml(built.raw)


@main.command("vllm", short_help="A pasted vLLM or SGLang line, run with its release's defaults.")
@click.argument("command_line")
@click.option("--gpu", default=None, help="Catalog GPU type (sim catalog --kind gpus), e.g. a100_80gb_sxm.")
@click.option("--gpus", type=click.IntRange(min=1, max=64), default=None,
              help="How many of that card (default: the line's tensor-parallel degree).")
@click.option("--host", default=None, help="Catalog host (sim catalog --kind hosts); optional.")
@click.option("--model", "model_path", default=None, type=click.Path(dir_okay=True),
              help="The model's config.json (default: the line's MODEL through calibration/models/index.yaml).")
@click.option("--engine-version", default=None, metavar="X.Y.Z",
              help="The vLLM or SGLang release whose defaults apply (default: the latest checked, vLLM 0.34.0, "
              "SGLang 0.5.23).")
@click.option("--requests", type=click.IntRange(min=1, max=1_000_000), default=200, show_default=True,
              help="Requests to serve.")
@click.option("--prompt", type=click.IntRange(min=1), default=1000, show_default=True, help="Prompt tokens each.")
@click.option("--gen", type=click.IntRange(min=1), default=200, show_default=True, help="Generated tokens each.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True, max=1e6), default=None,
              help="Open loop: Poisson arrivals per second (default 1 unless --clients).")
@click.option("--clients", type=click.IntRange(min=1, max=100_000), default=None,
              help="Closed loop: this many clients, each sending its next request when its last is answered.")
@click.option("--write", "write_to", default=None, type=click.Path(dir_okay=False),
              help="Also write the scenario (YAML) here; the run is then of that file, as sim run PATH gives it.")
@click.option("--no-run", is_flag=True, help="With --write: write only.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as sim run --json does, nothing else.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Random seed (default 0), kept in the scenario.")
@user_errors
def vllm(command_line: str, gpu: str | None, gpus: int | None, host: str | None, model_path: str | None,
         engine_version: str | None, requests: int, prompt: int, gen: int, rate: float | None, clients: int | None,
         write_to: str | None, no_run: bool, as_json: bool, seed: int | None) -> None:
    """Run (or --write) a scenario from a pasted vLLM or SGLang server COMMAND_LINE (vllm serve MODEL, python -m
    vllm.entrypoints.openai.api_server, python -m sglang.launch_server, sglang serve) on --gpu (a catalog type):
    the flags that decide speed and memory, every other one left out and listed, the engine version's defaults for
    the rest.

    \b
    sim vllm "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64" --gpu a100_80gb_sxm --requests 50
    """
    from sim.serving.cmdline import parse_command
    from sim.serving.engine_defaults import CURRENT, version_tuple
    from sim.vllm_scenario import Workload, build

    if rate is not None and clients is not None:
        raise ScenarioError("command line", "--rate", "give --rate (open loop) or --clients (closed loop), not both")
    if no_run and not write_to:
        raise ScenarioError("command line", "--no-run", "goes with --write PATH")
    if gpu is None:
        raise ScenarioError("command line", "--gpu", "missing: the catalog GPU type the server runs on")
    cmd = parse_command(command_line)
    version = engine_version or CURRENT[cmd.engine]
    if cmd.program == "sglang serve" and version_tuple(version, "sglang") < (0, 5, 5):
        raise ScenarioError("command line", "sglang serve", f"SGLang {version} has no serve sub-command (0.5.5 and "
                            "later); use python -m sglang.launch_server")
    load = Workload(requests=requests, prompt=prompt, gen=gen, rate_per_s=None if clients else (rate or 1.0),
                    clients=clients)
    built = build(cmd, gpu=gpu, gpus=gpus, host=host, model=model_path, version=version, workload=load, seed=seed,
                  line=command_line)
    if as_json:
        for note in built.notes:
            click.echo(f"sim: note: {note}", err=True)
    else:
        click.echo("\n".join(settings_lines(cmd, built)) + "\n")
    if write_to:
        from sim.core.output import atomic_write_text

        argv = "sim vllm " + shlex.join([command_line, "--gpu", gpu, *(["--gpus", str(gpus)] if gpus else []),
                                         *(["--host", host] if host else []), "--engine-version", version,
                                         "--requests", str(requests), "--prompt", str(prompt), "--gen", str(gen),
                                         *(["--clients", str(clients)] if clients else ["--rate", f"{rate or 1.0:g}"]),
                                         *(["--seed", str(seed)] if seed is not None else [])])
        atomic_write_text(write_to, scenario_yaml(built, argv))
        if not as_json:
            click.echo(f"wrote {write_to} (sim run {write_to})" + ("" if no_run else "; its run:") + "\n")
        if no_run:
            return
    _run(built.raw, write_to, as_json)


def _run(raw: dict, path: str | None, as_json: bool) -> None:
    """``sim run`` of the scenario: of the file ``path`` when written (the same bytes as ``sim run PATH``), else of
    the dict, validated as a file would be."""
    from sim.core.output import dumps
    from sim.report import run_text
    from sim.runner import run, summary

    if path:
        from sim.config.load import load_scenario

        scn, _ = load_scenario(path, ())
    else:
        from sim.llamacpp.machine import build_scenario

        scn = build_scenario(raw, "command line")
    label = path or "command line"
    warn_implausible(scn, label)
    res = run(scn, scn.seed)
    if as_json:
        click.echo(dumps(summary(res, label)), nl=False)
    else:
        click.echo(run_text(res), nl=False)
