"""``sim run``, ``sim compare``, ``sim breakeven``: one scenario simulated, compared, or bisected."""

from __future__ import annotations

import os

import click

from sim.cli.app import (
    common_options,
    fail,
    main,
    out_folder,
    quiet_option,
    user_errors,
    warn_implausible,
    writable_folder,
)


@main.command(short_help="One scenario: loads, jobs, the served workload, its metrics.")
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
    warn_implausible(scn, scenario)
    seed = scn.seed if seed is None else seed
    if uncertainty is not None:
        from sim.calibration.uncertainty import run_with_uncertainty

        result = run_with_uncertainty(scenario, list(overrides), uncertainty, seed)
        if out_dir:
            atomic_write_text(os.path.join(out_dir, "uncertainty.json"), dumps(result))
        if as_json:
            click.echo(dumps(result), nl=False)
        else:
            from sim.report import uncertainty_text

            click.echo(uncertainty_text(result, uncertainty), nl=False)
        if result.get("interrupted"):
            fail(f"interrupted: the summary is over the {result['draws_done']} of {uncertainty} draws done"
                 + (f" (saved in {out_dir}/uncertainty.json)" if out_dir else ""), 130)
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


@main.command(short_help="A change as a difference against the scenario, on paired seeds.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--vs", "variants", multiple=True, metavar="VARIANT",
              help="A variant: a scenario file, or changes to SCENARIO 'PATH=VALUE[; PATH=VALUE]', optionally named "
              "'NAME: PATH=VALUE' (repeatable). Without --vs the variant is SCENARIO with the --set changes.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Without --vs: the change to compare against SCENARIO as it is. With --vs: applied to every case.")
@click.option("--metric", "patterns", multiple=True, metavar="PATTERN",
              help="Only metrics matching this shell pattern, e.g. 'decode_*' (repeatable; default: all that differ).")
@click.option("--all", "show_all", is_flag=True, help="Also list the metrics that are equal in every case.")
@click.option("--markdown", is_flag=True, help="Print a Markdown table instead: a row per case, a column per metric.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="First seed (default: the scenario's).")
@click.option("--seeds", type=click.IntRange(min=1, max=1000), default=1, show_default=True,
              help="Paired seeds per case: values are medians, changes medians of the paired differences with their "
              "5th and 95th percentiles.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, nothing else.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None, callback=out_folder,
              help="Write comparison.json and comparison.csv into this folder.")
@quiet_option
@user_errors
def compare(scenario: str, variants: tuple[str, ...], overrides: tuple[str, ...], patterns: tuple[str, ...],
            show_all: bool, markdown: bool, seed: int | None, seeds: int, as_json: bool, out_dir: str | None) -> None:
    """What changes: SCENARIO against a variant, every metric of both on the same seeds and the change.

    \b
    sim compare scenarios/gen3_5090.yaml --set machines.strata_box.gpus.gpu0.reserved_gib=0
    sim compare scenarios/gen3_5090.yaml --metric 'decode_*' --vs 'LRU: machines.strata_box.engine.policy=lru'
    """
    from sim.compare import COLUMNS, Case, as_dict, parse_variant, rows
    from sim.compare import compare as run_compare
    from sim.compare import markdown as compare_markdown
    from sim.compare import text as compare_text
    from sim.config.load import load_scenario
    from sim.core.output import Table, dumps, write_outputs

    if not variants and not overrides:
        raise click.UsageError("give --set changes to compare against the scenario as it is, or --vs VARIANT")
    if as_json and markdown:
        raise click.UsageError("give --json or --markdown, not both")
    if out_dir:
        writable_folder(out_dir, out_dir)
    if variants:
        baseline = Case("baseline", scenario, overrides)
        cases = [parse_variant(v, baseline) for v in variants]
    else:
        baseline = Case("baseline", scenario)
        cases = [Case("; ".join(overrides), scenario, overrides)]
    base = load_scenario(scenario, baseline.overrides)[0]
    warned = set()
    for case in (baseline, *cases):  # each case's warnings once (a variant mostly repeats the baseline's)
        config = base if case is baseline else load_scenario(case.path, case.overrides)[0]
        warned |= warn_implausible(config, case.path, skip=warned)
    first = base.seed if seed is None else seed
    seed_list = list(range(first, first + seeds))
    result = run_compare(baseline, cases, seed_list, patterns)
    if out_dir:
        write_outputs(out_dir, as_dict(result, patterns), {"comparison": Table(COLUMNS, rows(result, patterns))},
                      summary_name="comparison.json")
    if as_json:
        click.echo(dumps(as_dict(result, patterns)), nl=False)
    elif markdown:
        click.echo(compare_markdown(result, patterns), nl=False)
    else:
        click.echo(compare_text(result, patterns, show_all), nl=False)
        if out_dir:
            click.echo(f"wrote {out_dir}/comparison.json and comparison.csv")


@main.command(short_help="The job length where two machines break even, load counted.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--model", required=True, metavar="NAME", help="The model, a key under models.")
@click.option("--machine", "machines", multiple=True, metavar="NAME",
              help="A machine to compare: give it twice, the first and the second.")
@click.option("--a", "machine_a", default=None, hidden=True)  # before --machine; still read
@click.option("--b", "machine_b", default=None, hidden=True)
@common_options
@click.option("--uncertainty", type=click.IntRange(min=2, max=10_000), default=None, metavar="N",
              help="Also find the break-even for N parameter draws (calibrations' covariance, the scenario's "
              "uncertainty section): median and 90% interval.")
@user_errors
def breakeven(scenario: str, model: str, machines: tuple[str, ...], machine_a: str | None, machine_b: str | None,
              seed: int | None, out_dir: str | None, as_json: bool, overrides: tuple[str, ...],
              uncertainty: int | None) -> None:
    """Token count where two machines break even for MODEL, by bisection over simulated jobs.

    \b
    sim breakeven scenarios/home_lab.yaml --model 9B --machine mining_box --machine rtx4090_box
    """
    from sim.calibration.uncertainty import breakeven_with_uncertainty
    from sim.config.load import load_scenario
    from sim.core.output import Table, dumps, write_outputs
    from sim.lab.breakeven import breakeven as find
    from sim.lab.breakeven import metrics
    from sim.report import breakeven_text

    machines = machines + tuple(m for m in (machine_a, machine_b) if m is not None)
    if len(machines) != 2:
        raise click.UsageError(f"give --machine twice (the two machines to compare), got {len(machines)}")
    machine_a, machine_b = machines
    scn, _ = load_scenario(scenario, overrides)
    warn_implausible(scn, scenario)
    seed = scn.seed if seed is None else seed
    result = find(scn, model, machine_a, machine_b, seed)
    evaluations = result.pop("table")
    result = {**result, "scenario_file": scenario, "metrics": metrics(result)}
    if uncertainty is not None:
        result["uncertainty"] = breakeven_with_uncertainty(scenario, list(overrides), model=model, a=machine_a,
                                                           b=machine_b, draws=uncertainty, seed=seed)
    if out_dir:
        write_outputs(out_dir, result, {"evaluations": Table(("machine", "tokens", "completed_s"), evaluations)})
    click.echo(dumps(result) if as_json else breakeven_text(result), nl=False)
    drawn = result.get("uncertainty") or {}
    if drawn.get("interrupted"):
        fail(f"interrupted: the break-even's interval is over the {drawn['draws_done']} of {uncertainty} draws done",
             130)
