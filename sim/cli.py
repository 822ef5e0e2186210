"""Command line: ``sim run``, ``sim breakeven``, ``sim sweep``, ``sim plot``, ``sim logs``, ``sim calibrate``,
``sim validate``, ``sim fit-loading``, ``sim schema``. Thin: parse, call, print."""

from __future__ import annotations

import functools
import json
import math
import os
import sys

import click

from sim.core.errors import ScenarioError, SimulationError


def _fail(message: str, code: int) -> None:
    click.echo(f"sim: error: {message}", err=True)
    sys.exit(code)


def user_errors(fn):
    """Bad input -> one line on stderr and exit 2; an impossible simulation -> exit 1. Never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            _fail(str(exc), 2)
        except SimulationError as exc:
            scenario = kwargs.get("scenario")
            _fail(f"{scenario}: {exc}" if scenario else str(exc), 1)
        except OSError as exc:  # writing --out or a calibration file
            _fail(f"{exc.filename or ''}: cannot write: {exc.strerror or exc}", 2)

    return wrapper


def common_options(fn):
    fn = click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
                      help="Change a scenario value by dotted key path (repeatable).")(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, nothing else.")(fn)
    fn = click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                      help="Write summary.json and tidy CSV tables into this folder.")(fn)
    fn = click.option("--seed", type=click.IntRange(min=0), default=None,
                      help="Random seed, a non-negative integer (default: the scenario's).")(fn)
    return fn


class OneLineErrors(click.Group):
    """Usage errors (a bad option, a missing argument) as one line on stderr with exit code 2, like every error."""

    def main(self, *args, **kwargs):
        # numpy's OpenBLAS starts a thread per core when numpy is imported (tens of ms of a short command); sim's
        # matrices are small and a sweep is parallel by processes: one BLAS thread, unless the user chose a number
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            where = f"{exc.ctx.command_path}: " if exc.ctx else ""
            _fail(where + exc.format_message().replace("\n", " "), 2)
        except click.exceptions.Exit as exc:  # --help
            sys.exit(exc.exit_code)
        except click.Abort:
            _fail("interrupted", 130)
        except Exception as exc:  # a bug, not bad input: still one line, with a way to get the traceback
            if os.environ.get("SIM_DEBUG"):
                raise
            _fail(f"internal error: {type(exc).__name__}: {exc} (a bug: please report it; "
                  "SIM_DEBUG=1 shows the traceback)", 70)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """sim: load and serve LLMs on imperfect hardware, simulated."""


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@common_options
@click.option("--uncertainty", type=click.IntRange(min=2, max=10_000), default=None, metavar="N",
              help="Run N times with parameters drawn from the scenario's `sim calibrate` covariance; print each "
              "metric as a median with a 90% interval.")
@user_errors
def run(scenario: str, seed: int | None, out_dir: str | None, as_json: bool, overrides: tuple[str, ...],
        uncertainty: int | None) -> None:
    """Simulate SCENARIO: each machine's load of the model, then every job's dispatch and run."""
    from sim.config.load import load_scenario
    from sim.core.output import atomic_write_text, dumps, write_outputs
    from sim.report import run_text
    from sim.runner import run as run_scenario
    from sim.runner import summary, tables

    scn, _ = load_scenario(scenario, overrides)
    seed = scn.seed if seed is None else seed
    if uncertainty is not None:
        from sim.calibration.uncertainty import run_with_uncertainty

        result = run_with_uncertainty(scenario, list(overrides), uncertainty, seed)
        if out_dir:
            atomic_write_text(os.path.join(out_dir, "uncertainty.json"), dumps(result))
        if as_json:
            click.echo(dumps(result), nl=False)
            return
        click.echo(f"{uncertainty} runs, parameters drawn from the calibrations' fitted distribution and the "
                   "scenario's input scatter: "
                   f"{', '.join(result['parameters'])}" + (f"; held (no standard error, or --set): "
                                                          f"{', '.join(result['held'])}" if result["held"] else ""))
        for key, v in result["metrics"].items():
            if v["p5"] != v["p95"]:
                click.echo(f"  {key:<40} {v['median']:>12.5g}  [{v['p5']:.5g}, {v['p95']:.5g}]")
        return
    res = run_scenario(scn, seed)
    summ = summary(res, scenario)
    if out_dir:
        write_outputs(out_dir, summ, tables(res))
    if as_json:
        click.echo(dumps(summ), nl=False)
    else:
        click.echo(run_text(res), nl=False)
        if out_dir:
            click.echo(f"wrote {out_dir}/summary.json and tables")


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--model", required=True, help="Model key.")
@click.option("--a", "machine_a", required=True, help="First machine.")
@click.option("--b", "machine_b", required=True, help="Second machine.")
@common_options
@click.option("--uncertainty", type=click.IntRange(min=2, max=10_000), default=None, metavar="N",
              help="Also find the break-even for N parameter draws (calibrations' covariance, the scenario's "
              "uncertainty section): median and 90% interval.")
@user_errors
def breakeven(scenario: str, model: str, machine_a: str, machine_b: str, seed: int | None, out_dir: str | None,
              as_json: bool, overrides: tuple[str, ...], uncertainty: int | None) -> None:
    """Token count where MACHINE_A and MACHINE_B break even for MODEL, by bisection over simulated jobs."""
    from sim.calibration.uncertainty import breakeven_with_uncertainty
    from sim.config.load import load_scenario
    from sim.core.output import dumps, write_outputs
    from sim.lab.breakeven import breakeven as find
    from sim.lab.breakeven import metrics
    from sim.report import breakeven_text

    scn, _ = load_scenario(scenario, overrides)
    seed = scn.seed if seed is None else seed
    result = find(scn, model, machine_a, machine_b, seed)
    evaluations = result.pop("table")
    result = {**result, "scenario_file": scenario, "metrics": metrics(result)}
    if uncertainty is not None:
        result["uncertainty"] = breakeven_with_uncertainty(scenario, list(overrides), model=model, a=machine_a,
                                                           b=machine_b, draws=uncertainty, seed=seed)
    if out_dir:
        write_outputs(out_dir, result, {"evaluations": evaluations})
    click.echo(dumps(result) if as_json else breakeven_text(result), nl=False)


@main.command()
@click.argument("target", type=click.Path(dir_okay=False))
@click.option("--axis", "axes", multiple=True, metavar="PATH=VALUES",
              help="An axis: a dotted scenario path and its values, e.g. serve.workload.clients=1,2,4 or "
              "machines.M.gpus.G.reserved_gib=0..24:4 or 1..32*2 (repeatable; added to a sweep file's axes).")
@click.option("--zip", "zip_axes", is_flag=True, help="Zip equally long axes instead of the grid.")
@click.option("--seeds", type=click.IntRange(min=1, max=10_000), default=None,
              help="Replicates per point, seeds SEED, SEED+1, ... (default 1, or the sweep file's).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="First seed (default: the scenario's).")
@click.option("--uncertainty", type=click.IntRange(min=2, max=10_000), default=None, metavar="N",
              help="N parameter draws per point and seed from the calibrations' covariance (as sim run "
              "--uncertainty); one row per draw, the same draws at every point.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Change a value at every point.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: the usable cores; 1 runs in this process).")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run on an existing Dask cluster, e.g. tcp://HOST:8786 (needs the distributed package).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder of the results: results.parquet, results.csv, sweep.json, points/ (re-runs resume).")
@click.option("--quiet", is_flag=True, help="No progress line.")
@user_errors
def sweep(target: str, axes: tuple[str, ...], zip_axes: bool, seeds: int | None, seed: int | None,
          uncertainty: int | None, overrides: tuple[str, ...], workers: int | None, dask_address: str | None,
          out_dir: str, quiet: bool) -> None:
    """Run TARGET (a scenario with --axis, or a sweep file under scenarios/sweeps/) at every point of its axes."""
    from sim.sweeps.backends import DaskBackend, pool_backend, serial_backend
    from sim.sweeps.run import run_sweep
    from sim.sweeps.spec import build_plan
    from sim.sweeps.tasks import prepare_tasks

    if workers is not None and dask_address is not None:
        raise click.UsageError("give --workers or --dask, not both")
    plan = build_plan(target, list(axes), zip_axes=zip_axes, seeds=seeds, uncertainty=uncertainty,
                      cli_sets=list(overrides))
    runs = len(plan.points) * plan.seeds * (plan.uncertainty or 1)
    dask = DaskBackend(dask_address) if dask_address is not None else None  # a wrong address fails now
    try:
        if not quiet and runs >= 1000:
            click.echo(f"sim sweep: checking the {runs} runs' scenarios...", err=True)
        prepared = prepare_tasks(plan, seed)  # every point validated before anything runs
        if dask is not None:
            backend, where = dask, f"the Dask cluster at {dask_address}"
        else:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            n = min(workers or cores, runs)
            backend = serial_backend if n <= 1 else pool_backend(n)
            where = "this process" if n <= 1 else f"{n} local worker processes"
        if not quiet:
            click.echo(f"sweep of {plan.scenario}: {len(plan.points)} points x {plan.seeds} seed"
                       f"{'s' if plan.seeds > 1 else ''}" + (f" x {plan.uncertainty} draws" if plan.uncertainty
                                                             else "") + f" = {runs} runs on {where}", err=True)
        res = run_sweep(plan, out_dir, seed, backend, quiet, prepared=prepared)
    finally:
        if dask is not None:
            dask.close()
    if res.errors:
        click.echo(f"sim: warning: {res.errors} runs cannot be simulated as asked (column 'error' says why)", err=True)
    if not res.complete:
        _fail(f"interrupted: {len(res.rows)} of {runs} runs saved in {out_dir} (the tables hold them); the same "
              "command finishes the rest", 130)
    click.echo(f"{runs} runs ({res.ran} simulated, {res.reused} from earlier runs) -> {out_dir}/results.parquet, "
               f"{out_dir}/results.csv")


@main.command()
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--x", "x", default=None, help="Column on the x axis: an axis of the sweep or a metric.")
@click.option("--y", "y", multiple=True, help="Metric on the y axis (repeatable: one panel each).")
@click.option("--hue", default=None, help="Column whose values get their own line (colour, marker, dash).")
@click.option("--facet", default=None, help="Column whose values get their own panel.")
@click.option("--preset", default=None, help="A standard figure: cliff, hit_coverage, concurrency, headroom, "
              "dispatch, load_breakdown (default with no --y: the sweep file's).")
@click.option("-o", "--out", "out_file", required=True, type=click.Path(dir_okay=False),
              help="Figure file: .png, .svg or .pdf (same data, same bytes).")
@user_errors
def plot(folder: str, x: str | None, y: tuple[str, ...], hue: str | None, facet: str | None, preset: str | None,
         out_file: str) -> None:
    """Draw a sweep's results (FOLDER written by sim sweep --out): medians, 90% bands, measured points."""
    from sim.viz.plotting import load_sweep, save
    from sim.viz.presets import draw

    sweep = load_sweep(folder)
    fig = draw(sweep, preset, x=x, y=list(y), hue=hue, facet=facet)
    save(fig, out_file)
    click.echo(f"wrote {out_file}")


@main.command()
def schema() -> None:
    """Print the JSON Schema of scenario files (for editor validation and completion)."""
    from sim.config.load import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


@main.command("fit-loading")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--table", "tables", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Measured CSV with machine, cold_gbps, hot_gbps, link_gbps, file_gb columns (repeatable).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Write the calibration YAML here (the scenario's calibrations: entry).")
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
@user_errors
def fit_loading(scenario: str, tables: tuple[str, ...], out_file: str | None, as_json: bool) -> None:
    """Fit disk bandwidths, loader costs and PCIe efficiency of SCENARIO's machines to measured load rates."""
    from sim.calibration.fit_loading import fit, load_raw_for_fit
    from sim.calibration.loading_file import calibration_yaml
    from sim.core.output import atomic_write_text, dumps

    raw = load_raw_for_fit(scenario)
    result = fit(raw, scenario, list(tables))
    poor = [r for r in result.residuals if abs(r["rel_error"]) > 0.05]
    for r in poor:
        click.echo(f"sim: warning: {r['machine']} {r['quantity']} fits {r['rel_error']:+.1%} off the measured "
                   f"{r['measured_gbps']:g} GB/s", err=True)
    text = calibration_yaml(result, scenario, list(tables), out_file)
    if out_file:
        atomic_write_text(out_file, text)
    if as_json:
        click.echo(dumps({"parameters": result.parameters, "standard_errors": result.standard_errors,
                          "exactly_determined": result.exactly_determined, "held_fixed": result.held_fixed,
                          "residuals": result.residuals,
                          "dof": result.dof}), nl=False)
    else:
        click.echo(text, nl=False)


@main.command("logs")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--csv", "as_csv", is_flag=True, help="Print one CSV row per request or statistics line.")
@click.option("--json", "as_json", is_flag=True, help="Print rows, start-up facts and counts as JSON.")
@user_errors
def logs(files: tuple[str, ...], as_csv: bool, as_json: bool) -> None:
    """Read engine logs (Basalt, Strata, llama.cpp, vLLM) into a table; a summary by default."""
    import csv
    import io

    from sim.calibration.logs import ROW_FIELDS, log_sources, read_logs, summary_lines
    from sim.core.output import dumps

    table = read_logs(log_sources(files))
    if as_json:
        click.echo(dumps({"rows": table.rows, "facts": table.facts, "lines": table.lines,
                          "not_understood": table.not_understood, "incomplete": table.incomplete,
                          "examples": [{"file": f, "line": n, "text": t} for f, n, t in table.examples]}), nl=False)
    elif as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=ROW_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table.rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        click.echo("\n".join(summary_lines(table)))


@main.command("calibrate")
@click.option("--scenario", "scenario", required=True, type=click.Path(dir_okay=False),
              help="Scenario whose calibrate.free parameters are fitted.")
@click.option("--log", "logs", multiple=True, type=click.Path(dir_okay=False), help="Engine log (repeatable).")
@click.option("--table", "tables", multiple=True, type=click.Path(dir_okay=False),
              help="Measured table the scenario maps under calibrate.tables, or a CSV of requests with log-row "
              "columns (repeatable).")
@click.option("--set", "overrides", multiple=True, help="dotted.path=value, applied before fitting (repeatable).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Common random numbers.")
@click.option("--max-evals", type=click.IntRange(min=0), default=200, show_default=True,
              help="Nelder-Mead simulations per stage (0: keep the best start).")
@click.option("--starts", type=click.IntRange(min=0), default=None,
              help="Sobol candidates per stage besides the declared start (default 2^ceil(log2(4k)), at least 8).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True,
              help="Calibration YAML to write (left out of the scenario's calibrations while fitting); "
              "NAME_report.md and NAME_plot.png go beside it.")
@user_errors
def calibrate(scenario: str, logs: tuple[str, ...], tables: tuple[str, ...], overrides: tuple[str, ...], seed: int,
              max_evals: int, starts: int | None, out_file: str) -> None:
    """Fit SCENARIO's declared free parameters to measured tables, engine logs and request tables."""
    from sim.calibration.calibrate import calibrate as run_calibrate
    from sim.calibration.files import calibration_yaml, plot_residuals, report_markdown
    from sim.calibration.result import outside
    from sim.core.output import atomic_write_text

    if not logs and not tables:
        raise click.UsageError("give at least one --log or --table")
    folder = os.path.dirname(os.path.abspath(out_file))  # found out before a fit of minutes, not after it
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        pass
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ScenarioError("--out", out_file, "a file in a folder that exists, or can be made, and is writable")
    res = run_calibrate(scenario, list(logs), list(tables), seed=seed, overrides=list(overrides), max_evals=max_evals,
                        starts=starts, exclude=out_file, log=lambda msg: click.echo(msg, err=True))
    import shlex

    command = shlex.join(["sim", "calibrate", "--scenario", scenario,
                          *(a for x in tables for a in ("--table", x)), *(a for x in logs for a in ("--log", x)),
                          *(a for x in overrides for a in ("--set", x)), "--seed", str(seed), "--max-evals",
                          str(max_evals), *(["--starts", str(starts)] if starts is not None else []),
                          "--out", out_file])
    stem = os.path.splitext(out_file)[0]
    plot = stem + "_plot.png"
    plot_residuals(res, plot)
    atomic_write_text(stem + "_report.md", report_markdown(res, command, plot))
    atomic_write_text(out_file, calibration_yaml(res, command))
    for w in res.warnings:
        click.echo(f"sim: warning: {w}", err=True)
    missed = [r for r in res.residuals if outside(r)]
    for r in missed[:5]:
        click.echo(f"sim: warning: {r['target']} ({r['role']}) simulates {r['simulated']:.4g} against "
                   f"{r['measured']:.4g} measured, outside its tolerance {r['tolerance']:g}", err=True)
    if len(missed) > 5:
        click.echo(f"sim: warning: and {len(missed) - 5} more cells outside their tolerance ({stem}_report.md marks "
                   "them)", err=True)
    for name, value in res.parameters.items():
        sd = res.log_sd[name]
        click.echo(f"{name} = {value:.6g} (relative standard error "
                   f"{format(sd, '.1%') if math.isfinite(sd) else 'none: not pinned down'})")
    click.echo(f"{len(res.residuals)} observations, {res.evaluations} simulations; report {stem}_report.md")


@main.command("validate")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--table", "tables", multiple=True, type=click.Path(dir_okay=False),
              help="With SCENARIO: a measured table it maps under calibrate.tables (repeatable; default: those of its "
              "tables found in ROOT/calibration/).")
@click.option("--root", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Project root holding scenarios/ and calibration/.")
@click.option("--only", "groups", multiple=True, type=click.Choice(["loading", "strata", "concurrency", "basalt"]),
              help="Check only these groups of the shipped tables (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the cells as JSON.")
@user_errors
def validate(scenario: str | None, tables: tuple[str, ...], root: str, groups: tuple[str, ...],
             as_json: bool) -> None:
    """Every shipped measured table against its scenario, or SCENARIO's own tables: measured, simulated, error and
    tolerance per cell. Exits 1 when any claimed cell is outside its tolerance."""
    from sim.calibration.validate import NOT_CHECKED, scenario_cells, scenario_tables
    from sim.calibration.validate import validate as run_validate
    from sim.core.output import dumps

    not_checked = NOT_CHECKED
    if scenario is None:
        if tables:
            raise click.UsageError("--table needs a SCENARIO whose calibrate.tables maps it")
        cells = run_validate(root, list(groups) or None)
    else:
        if groups:
            raise click.UsageError("--only picks groups of the shipped tables: give it without SCENARIO")
        found, not_checked = scenario_tables(scenario, list(tables), root)
        cells = scenario_cells(scenario, found)
    outside = [c for c in cells if c.status == "OUTSIDE"]
    if as_json:
        click.echo(dumps({"cells": [c.as_dict() for c in cells], "outside": len(outside),
                          "not_checked": not_checked}), nl=False)
    else:
        for c in cells:
            unit = "%" if c.kind != "share" else " pts"
            err = c.error * 100
            note = f"  {c.info}" if c.info else ""
            measured = f"{c.measured:.4g}" if c.lo is None else f"{c.lo:.4g}-{c.hi:.4g}"
            click.echo(f"{c.status:<8}{c.table:<28}{c.cell:<48}{measured:>12}{c.simulated:>12.4g}"
                       f"{err:>+9.1f}{unit} (tolerance {c.tolerance * 100:g}{unit}){note}")
        for name, why in not_checked.items():
            click.echo(f"{'-':<8}{name:<28}{why}")
        click.echo(f"{len(cells)} cells: {sum(c.status == 'ok' for c in cells)} ok, {len(outside)} outside, "
                   f"{sum(c.status == 'info' for c in cells)} reported only")
    if outside:
        sys.exit(1)


if __name__ == "__main__":
    main()
