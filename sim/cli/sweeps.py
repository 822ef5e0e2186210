"""``sim sweep`` and ``sim plot``: many runs of a scenario, and their figures."""

from __future__ import annotations

import os

import click

from sim.cli.app import fail, main, out_folder, out_path, user_errors, warn_implausible
from sim.core.text import plural


@main.command(short_help="A scenario at every point of its axes (resumable; Dask too).")
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
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), callback=out_folder,
              help="Folder of the results: results.parquet, results.csv, sweep.json, points/ (re-runs resume).")
@click.option("--max-runs", "max_runs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Refuse a sweep of more than N runs, points x seeds x draws (default 100,000).")
@click.option("--quiet", is_flag=True, help="No progress display (there is none either when stderr is not a terminal).")
@user_errors
def sweep(target: str, axes: tuple[str, ...], zip_axes: bool, seeds: int | None, seed: int | None,
          uncertainty: int | None, overrides: tuple[str, ...], workers: int | None, dask_address: str | None,
          out_dir: str, max_runs: int | None, quiet: bool) -> None:
    """Run TARGET (a scenario with --axis, or a sweep file under scenarios/sweeps/) at every point of its axes."""
    from sim.sweeps.backends import DaskBackend, pool_backend, serial_backend
    from sim.sweeps.run import run_sweep
    from sim.sweeps.spec import MAX_RUNS, build_plan
    from sim.sweeps.tasks import prepare_tasks

    if workers is not None and dask_address is not None:
        raise click.UsageError("give --workers or --dask, not both")
    plan = build_plan(target, list(axes), zip_axes=zip_axes, seeds=seeds, uncertainty=uncertainty,
                      cli_sets=list(overrides), max_runs=max_runs or MAX_RUNS)
    runs = len(plan.points) * plan.seeds * (plan.uncertainty or 1)
    dask = DaskBackend(dask_address) if dask_address is not None else None  # a wrong address fails now
    try:
        prepared = prepare_tasks(plan, seed, quiet)  # every point validated before anything runs
        from sim.sweeps.overlays import resolve_plan_overlays

        resolve_plan_overlays(plan)  # a bad measured table: its one line, before the banner
        from sim.config.load import load_scenario

        warn_implausible(load_scenario(plan.scenario, plan.base_sets)[0], plan.scenario)  # once, at the base
        if dask is not None:
            backend, where = dask, f"the Dask cluster at {dask_address}"
        else:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            n = min(workers or cores, runs)
            backend = serial_backend if n <= 1 else pool_backend(n)
            where = "this process" if n <= 1 else f"{n} local worker processes"
        if not quiet:
            click.echo(f"sweep of {plan.scenario}: {plural(len(plan.points), 'point')} x {plural(plan.seeds, 'seed')}"
                       + (f" x {plural(plan.uncertainty, 'draw')}" if plan.uncertainty else "")
                       + f" = {plural(runs, 'run')} on {where}", err=True)
        res = run_sweep(plan, out_dir, seed, backend, quiet, prepared=prepared)
    finally:
        if dask is not None:
            dask.close()
    if res.errors:
        click.echo(f"sim: warning: {plural(res.errors, 'run')} cannot be simulated as asked (column 'error' says "
                   "why)", err=True)
    if not res.complete:
        fail(f"interrupted: {len(res.rows):,} of {plural(runs, 'run')} saved in {out_dir} (the tables hold them); "
             "the same command finishes the rest", 130)
    click.echo(f"{plural(runs, 'run')} ({res.ran:,} simulated, {res.reused:,} from earlier runs) -> "
               f"{out_dir}/results.parquet, {out_dir}/results.csv")


@main.command(short_help="A sweep's figure: medians, 90% bands, the measured points.")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--x", "x", default=None, metavar="COLUMN",
              help="Column on the x axis: an axis of the sweep or a metric.")
@click.option("--y", "y", multiple=True, metavar="METRIC", help="Metric on the y axis (repeatable: one panel each).")
@click.option("--hue", default=None, metavar="COLUMN",
              help="Column whose values get their own line (colour, marker, dash).")
@click.option("--facet", default=None, metavar="COLUMN", help="Column whose values get their own panel.")
@click.option("--preset", default=None, metavar="NAME",
              help="A standard figure: cliff, hit_coverage, concurrency, headroom, dispatch, load_breakdown (default "
              "with no --y: the sweep file's).")
@click.option("-o", "--out", "out", required=True, type=click.Path(),
              help="Folder to write the figure into, as PRESET.FORMAT (figure.FORMAT without a preset); a path "
              "ending in .png, .svg or .pdf is the figure file itself.")
@click.option("--format", "fmt", type=click.Choice(["png", "svg", "pdf"]), default="png", show_default=True,
              help="Figure format in a folder given to --out (same data, same bytes).")
@user_errors
def plot(folder: str, x: str | None, y: tuple[str, ...], hue: str | None, facet: str | None, preset: str | None,
         out: str, fmt: str) -> None:
    """Draw a sweep's results (FOLDER written by sim sweep --out): medians, 90% bands, measured points."""
    from sim.viz.plotting import load_sweep, save
    from sim.viz.presets import draw

    sweep = load_sweep(folder)
    fig = draw(sweep, preset, x=x, y=list(y), hue=hue, facet=facet)
    name = preset or ((sweep.manifest.get("plot") or {}).get("preset") if not y else None) or "figure"
    out_file = out_path(out, f"{name}.{fmt}", (".png", ".svg", ".pdf"))
    save(fig, out_file)
    click.echo(f"wrote {out_file}")
