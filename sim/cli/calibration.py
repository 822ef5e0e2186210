"""``sim calibrate``, ``sim validate``, ``sim fit-loading``, ``sim logs``, ``sim schema``: measurements in,
parameters and checks out."""

from __future__ import annotations

import json
import math
import os
import sys

import click

from sim.cli.app import calibration_out, fail, main, quiet_option, user_errors, writable_folder
from sim.core.errors import ScenarioError
from sim.core.text import plural


@main.command(short_help="The JSON Schema of scenario files, for editors.")
def schema() -> None:
    """Print the JSON Schema of scenario files (for editor validation and completion)."""
    from sim.config.load import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


def _fit_outputs(default_name: str):
    """The options a fit command shares: where it writes its calibration, JSON instead of the file's text."""

    def wrap(command):
        command = user_errors(command)
        command = click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")(command)
        return click.option("-o", "--out", "out", type=click.Path(), default=None,
                            help="Folder to write the calibration into: as the scenario's calibrations: entry in that "
                            f"folder, else {default_name}; a path ending in .yaml is the file itself.")(command)

    return wrap


@main.command("fit-loading", short_help="Fit disks, loaders and PCIe efficiency to load rates.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--table", "tables", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Measured CSV with machine, cold_gbps, hot_gbps, link_gbps, file_gb columns (repeatable).")
@_fit_outputs("loading.yaml")
def fit_loading(scenario: str, tables: tuple[str, ...], out: str | None, as_json: bool) -> None:
    """Fit disk bandwidths, loader costs and PCIe efficiency of SCENARIO's machines to measured load rates."""
    out_file = None if out is None else calibration_out(scenario, out, "loading.yaml")
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


@main.command("fit-loads", short_help="Fit the loaders' parameters to measured load times.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--table", "table", required=True, type=click.Path(dir_okay=False),
              help="Measured load times and rates, a row each (calibration/public_loads.csv).")
@_fit_outputs("loads.yaml")
def fit_loads(scenario: str, table: str, out: str | None, as_json: bool) -> None:
    """Fit the loaders' physical parameters (disk bandwidth and latency, mmap costs, start-up, PCIe efficiency) to
    the table's fit rows and report its check rows, kept out of the fit."""
    out_file = None if out is None else calibration_out(scenario, out, "loads.yaml")
    from sim.calibration.fit_loading import load_raw_for_fit
    from sim.calibration.fit_loads import calibration_yaml, fit
    from sim.core.output import atomic_write_text, dumps

    result = fit(load_raw_for_fit(scenario), scenario, table)
    text = calibration_yaml(result, scenario, table, out_file)
    if out_file:
        atomic_write_text(out_file, text)
    if as_json:
        click.echo(dumps({"parameters": result.parameters, "exactly_determined": result.exactly_determined,
                          "fit_rows": result.fit_rows, "checks": result.check_rows,
                          "checks_median_abs_rel_error": result.check_median_abs_error, "dof": result.dof}), nl=False)
    else:
        click.echo(text, nl=False)


@main.command("logs", short_help="Engine logs and llama-bench outputs, a row per request or test.")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--csv", "as_csv", is_flag=True, help="Print one CSV row per request or statistics line.")
@click.option("--json", "as_json", is_flag=True, help="Print rows, start-up facts and counts as JSON.")
@user_errors
def logs(files: tuple[str, ...], as_csv: bool, as_json: bool) -> None:
    """Read engine logs (Basalt, Strata, llama.cpp, vLLM) into a table; a summary by default. A llama-bench or
    llama-sweep-bench output (md, csv, json, jsonl) is read as its tests: `sim fit-offload --bench` fits to them. A
    llama-batched-bench output (its main: line and table, or jsonl) is read as its rows, each checked against
    its own arithmetic."""
    from sim.formats.engine_logs import ROW_FIELDS, log_sources, read_logs, summary_lines
    from sim.formats.engine_logs_io import CsvRows, JsonRows

    def write(text: str) -> None:
        click.echo(text, nl=False)

    from sim.cli.bench_logs import bench_outputs, print_bench

    benches = bench_outputs(files)
    if benches:
        if len(benches) < len(files):
            raise ScenarioError(next(f for f in files if f not in benches), "", "an engine log among llama-bench "
                                "outputs: read them with separate `sim logs` commands")
        print_bench(benches, as_csv, as_json)
        return

    sources = log_sources(files)  # every file checked before anything is written
    if as_json:
        out = JsonRows(write)
        table = read_logs(sources, sink=out.row)  # rows written as they are read, never all held
        out.finish({"facts": table.facts, "lines": table.lines, "not_understood": table.not_understood,
                    "incomplete": table.incomplete,
                    "examples": [{"file": f, "line": n, "text": t, **({"reason": why} if why else {})}
                                 for f, n, t, why in table.examples]})
    elif as_csv:
        rows = CsvRows(write, ROW_FIELDS)
        read_logs(sources, sink=rows.row)
        rows.finish()
    else:
        click.echo("\n".join(summary_lines(read_logs(sources, sink=lambda row: None))))


@main.command("calibrate", short_help="Fit a scenario's declared parameters to tables and logs.")
@click.argument("scenario", required=False, metavar="SCENARIO", type=click.Path(dir_okay=False))
@click.option("--scenario", "scenario_option", default=None, hidden=True)  # before SCENARIO; still read
@click.option("--log", "logs", multiple=True, type=click.Path(dir_okay=False), help="Engine log (repeatable).")
@click.option("--table", "tables", multiple=True, type=click.Path(dir_okay=False),
              help="Measured table the scenario maps under calibrate.tables, or a CSV of requests with log-row "
              "columns (repeatable).")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Change a scenario value by dotted key path before fitting (repeatable).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Common random numbers.")
@click.option("--max-evals", type=click.IntRange(min=0), default=200, show_default=True,
              help="Nelder-Mead simulations per stage (0: keep the best start).")
@click.option("--starts", type=click.IntRange(min=0), default=None,
              help="Sobol candidates per stage besides the declared start (default 2^ceil(log2(4k)), at least 8).")
@click.option("-o", "--out", "out", type=click.Path(), required=True,
              help="Folder to write the calibration into: as the scenario's calibrations: entry in that folder (left "
              "out while fitting), else calibration.yaml; NAME_report.md and NAME_plot.png beside it. A path ending "
              "in .yaml is the file itself.")
@quiet_option
@user_errors
def calibrate(scenario: str | None, scenario_option: str | None, logs: tuple[str, ...], tables: tuple[str, ...],
              overrides: tuple[str, ...], seed: int, max_evals: int, starts: int | None, out: str) -> None:
    """Fit SCENARIO's declared free parameters to measured tables, engine logs and request tables.

    \b
    sim calibrate scenarios/gen3_5090.yaml --table calibration/strata_gen3_5090.csv --out calibration
    """
    from sim.calibration.calibrate import calibrate as run_calibrate
    from sim.calibration.files import calibration_yaml, plot_residuals, report_markdown
    from sim.calibration.result import outside
    from sim.core.output import atomic_write_text

    if (scenario is None) == (scenario_option is None):
        raise click.UsageError("give the SCENARIO to calibrate" if scenario is None else
                               "give SCENARIO once (as the argument)")
    scenario = scenario or scenario_option
    if not logs and not tables:
        raise click.UsageError("give at least one --log or --table")
    out_file = calibration_out(scenario, out, "calibration.yaml")
    writable_folder(os.path.dirname(os.path.abspath(out_file)), out)  # found out before a fit of minutes
    res = run_calibrate(scenario, list(logs), list(tables), seed=seed, overrides=list(overrides), max_evals=max_evals,
                        starts=starts, exclude=out_file, log=lambda msg: click.echo(msg, err=True))
    import shlex

    command = shlex.join(["sim", "calibrate", scenario,
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
    click.echo(f"{plural(len(res.residuals), 'observation')}, {plural(res.evaluations, 'simulation')}; "
               f"wrote {out_file}, report {stem}_report.md")
    if getattr(res, "interrupted", False):
        fail(f"interrupted in {res.stopped_in}: wrote {out_file} with the best values so far (not converged); the "
             "same command fits again", 130)


@main.command("validate", short_help="Measured tables against their scenarios; --public: held out.")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--table", "tables", multiple=True, type=click.Path(dir_okay=False),
              help="With SCENARIO: a measured table it maps under calibrate.tables (repeatable; default: those of its "
              "tables found in ROOT/calibration/).")
@click.option("--root", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Project root holding scenarios/ and calibration/.")
@click.option("--only", "groups", multiple=True,
              type=click.Choice(["loading", "loads", "strata", "concurrency", "basalt", "offload"]),
              help="Check only these groups of the shipped tables (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the cells as JSON.")
@click.option("--public", is_flag=True, help="The fidelity benchmark instead: every public table predicted leave one "
              "source out (each source by a fit without it and its machine's other sources), written to --out.")
@click.option("--domain", "domains", multiple=True, type=click.Choice(["llama.cpp", "loads", "routing",
                                                                        "concurrency"]),
              help="With --public: only these domains (repeatable; default: all).")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default=None,
              help="With --public: the report to write (default: ROOT/docs/fidelity.md); the llama.cpp bands go "
              "beside it as llamacpp_bands.yaml (default: ROOT/calibration/llamacpp_bands.yaml, which sim advise "
              "reads).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="With --public: processes refitting held-out groups in parallel.")
@quiet_option
@user_errors
def validate(scenario: str | None, tables: tuple[str, ...], root: str, groups: tuple[str, ...],
             as_json: bool, public: bool, domains: tuple[str, ...], out: str | None, workers: int) -> None:
    """Every shipped measured table against its scenario, or SCENARIO's own tables: measured, simulated, error and
    tolerance per cell. Exits 1 when any claimed cell is outside its tolerance. With --public: the leave-one-source-
    out fidelity report over every public table (docs/fidelity.md)."""
    from sim.calibration.validate import NOT_CHECKED, scenario_cells, scenario_tables
    from sim.calibration.validate import validate as run_validate
    from sim.core.output import dumps

    if public:
        if scenario or tables or groups:
            raise click.UsageError("--public runs the fidelity benchmark over the public tables: give it without "
                                   "SCENARIO, --table or --only")
        return _public(root, list(domains), out, workers, as_json)
    if domains or out or workers != 1:
        raise click.UsageError("--domain, --out and --workers go with --public")
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
        from sim.report import validate_text

        click.echo(validate_text(cells, not_checked), nl=False)
    if outside:
        sys.exit(1)


def _public(root: str, domains: list[str], out: str | None, workers: int, as_json: bool) -> None:
    """``sim validate --public``: the benchmark, the report written atomically, a summary (or JSON) on stdout."""
    from sim.core.output import atomic_write_text, dumps
    from sim.fidelity import report
    from sim.fidelity.llamacpp import BANDS
    from sim.fidelity.run import HEADLINE, benchmark, notes

    # a report asked for elsewhere keeps its bands beside it: only the default run rewrites the shipped files
    bands_file = os.path.join(root, BANDS) if out is None else os.path.join(os.path.dirname(os.path.abspath(out)),
                                                                            os.path.basename(BANDS))
    out = out or os.path.join(root, "docs", "fidelity.md")
    results, missing = benchmark(root, domains or None, workers)
    command = "sim validate --public" + "".join(f" --domain {d}" for d in domains)
    text = report.markdown(results, command, notes(root), HEADLINE)
    if missing:
        text += "\n## Domains not built\n\n" + "".join(f"- {m}\n" for m in missing)
    for name, rs, _ in results:  # the llama.cpp domain's held-out bands: what sim advise prints its rates with
        if name == "llama.cpp":
            from sim.config.yaml_io import dump_yaml
            from sim.fidelity.llamacpp import bands

            atomic_write_text(bands_file, f"# Written by {command}: 90% bands of measured / "
                              "simulated over held-out rows (sim.llamacpp.params.BAND, BAND_WITHIN and "
                              "BAND_NEAR repeat them)\n" + dump_yaml(bands(rs), width=80))
    atomic_write_text(out, text)  # last: the report is newer than every file the run writes
    if as_json:
        rows = [{"domain": name, "table": r.observation.table, "row_id": r.observation.row_id,
                 "source": r.observation.source, "group": r.group, "quantity": r.observation.quantity,
                 "backend": r.observation.backend, "measured": r.observation.measured,
                 "simulated": r.held_out.value, "error": report.error_of(r), "mechanism": r.held_out.mechanism}
                for name, rs, _ in results for r in rs]
        click.echo(dumps({"rows": rows, "missing": missing, "report": out}), nl=False)
        return
    for name, quantity in HEADLINE:
        chosen = [r for d, rs, _ in results if d == name for r in rs if r.observation.quantity == quantity]
        if chosen:
            st = report.stats(chosen)
            click.echo(f"{name:10s} {quantity:9s} {st.rows:5d} rows {st.sources:3d} sources  held-out median "
                       f"|error| {100 * st.median:5.1f}%  within 25% {100 * st.within25:3.0f}%  in-sample "
                       f"{100 * st.in_sample:5.1f}%")
    for m in missing:
        click.echo(f"{m}: not built", err=True)
    click.echo(f"wrote {out}")
