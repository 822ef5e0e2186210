"""``sim fit-routing``: the routing law (exponent per model, reuse, skew spread, drift) fitted to public routing
statistics or to a route trace."""

from __future__ import annotations

import os

import click

from sim.cli.app import main, user_errors


@main.command("fit-routing", short_help="Fit the routing law to routing statistics or a route trace.")
@click.option("--table", type=click.Path(dir_okay=False), default=None,
              help="Routing statistics (the columns of expert_cache.csv, e.g. calibration/routing_public.csv).")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="A route trace (CSV request,token,layer,experts or JSONL) to fit instead of a table.")
@click.option("--model", default="trace", show_default=True, help="With --trace: the model's name in the output.")
@click.option("--experts", type=click.IntRange(1, 1_000_000), default=None,
              help="With --trace: experts per layer (default: the highest id + 1).")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Calibration YAML to write (the report beside it: NAME_report.md); default: print it.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the starts and the sampled routes.")
@click.option("--no-sample", is_flag=True, help="Skip the check on sampled routes (faster).")
@user_errors
def fit_routing(table: str | None, trace: str | None, model: str, experts: int | None, out: str | None, seed: int,
                no_sample: bool) -> None:
    """Fit the routing law to a table of routing statistics (or a route trace); write its values with units,
    bounds and standard errors, the residual of every row, fitted and held out, and a report."""
    from sim.calibration.routing_fit import fit, read_table
    from sim.core.errors import ScenarioError
    from sim.core.output import atomic_write_text

    if (table is None) == (trace is None):
        raise ScenarioError("fit-routing", "--table/--trace", "give one of --table or --trace")
    notes: list[str] = []
    if trace is not None:
        obs, notes = trace_observations(trace, model, experts)
        for note in notes:
            click.echo(f"sim: warning: {trace}: {note}", err=True)
    else:
        obs = read_table(table)
    result = fit(obs, seed=seed, sample=not no_sample)
    source = table if table is not None else trace
    command = "sim fit-routing " + (f"--table {table}" if table else f"--trace {trace} --model {model}") + \
        (f" --out {out}" if out else "") + f" --seed {seed}" + (" --no-sample" if no_sample else "")
    text = calibration_yaml(result, command, source, notes)
    if out:
        atomic_write_text(out, text)
        stem = out[:-5] if out.endswith(".yaml") else out
        report = f"{stem}_report.md"
        atomic_write_text(report, report_markdown(result, command))
        click.echo(f"wrote {out} and {os.path.basename(report)}")
        p = result.params
        for m, x in sorted(p.exponents.items()):
            click.echo(f"  exponent {m}: {x:.4g}")
        click.echo(f"  locality {p.locality:.4g}, exponent_spread {p.exponent_spread:.4g}, drift_weight "
                   f"{p.drift_weight:.4g}, drift_hot_fraction {p.drift_hot_fraction:.4g}, exponent_depth_slope "
                   f"{p.exponent_depth_slope:.4g}")
    else:
        click.echo(text, nl=False)


MEANING = {
    "exponent": "Zipf exponent of the routing law per layer (routing.exponent)",
    "locality": "reuse: each position of the router's draw stream carries over to the next token with this "
                "probability (routing.locality); about this share of a token's experts repeat the previous token's "
                "beyond popularity",
    "exponent_spread": "log-sd of a request's own skew (routing.exponent_spread)",
    "exponent_depth_slope": "change of the exponent from the first MoE layer to the last "
                            "(routing.exponent_depth_slope)",
    "drift_weight": "share of a request's law on its own hot set (routing.drift_weight)",
    "drift_hot_fraction": "a request's hot set as a fraction of a layer's experts (routing.drift_hot_experts = "
                          "round(fraction x experts_per_layer))",
}


def _clean(value: object) -> object:
    import numpy as np

    if isinstance(value, tuple):
        return [_clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(f"{float(value):.6g}")
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def summary(result) -> dict[str, float]:
    """RMS error over tolerance of the fitted and of the checked rows (ranges: distance outside them)."""
    import numpy as np

    out = {}
    for role in ("fit", "check"):
        e = [r["error"] / r["tolerance"] for r in result.rows if r["role"] == role]
        out[f"rms_error_over_tolerance_{role}"] = float(np.sqrt(np.mean(np.square(e)))) if e else float("nan")
        out[f"rows_{role}"] = len(e)
    return out


def calibration_yaml(result, command: str, table: str, notes: list[str] = ()) -> str:
    """The fitted routing parameters with units, bounds, standard errors (or why held), a ready ``routing``
    section per model and every row's residual; ``notes`` (what was left out of the input) in its header."""
    from sim.calibration.routing_fit import EXPONENT, SHARED
    from sim.config.yaml_io import dump_yaml

    p = result.params
    models = sorted(p.exponents)
    geo = {o.model: o for o in result.observations}
    params: dict[str, dict] = {}
    for m in models:
        unit, lo, hi, _ = EXPONENT
        params[f"exponent.{m}"] = {"value": _clean(p.exponents[m]), "unit": unit, "lo": lo, "hi": hi,
                                   "stderr": _clean(result.stderr.get(f"exponent.{m}")), "meaning": MEANING["exponent"]}
    for name, (unit, lo, hi, _) in SHARED.items():
        entry = {"value": _clean(getattr(p, name)), "unit": unit, "lo": lo, "hi": hi}
        if name in result.held:
            entry["held"] = result.held[name]
        else:
            entry["stderr"] = _clean(result.stderr.get(name))
        entry["meaning"] = MEANING[name]
        params[name] = entry
    sections = {}
    for m in models:
        o = geo[m]
        law = p.law(m, o.layers, o.experts, o.top_k)
        sections[m] = {"geometry": {"layers": o.layers, "experts_per_layer": o.experts, "top_k": o.top_k},
                       "routing": {"exponent": _clean(law.exponent), "locality": _clean(law.locality),
                                   "exponent_spread": _clean(law.exponent_spread),
                                   "exponent_depth_slope": _clean(law.exponent_depth_slope),
                                   "drift_weight": _clean(law.drift_weight),
                                   "drift_hot_experts": law.drift_hot_experts}}
    rows = [{k: _clean(v) for k, v in r.items() if v is not None} for r in result.rows]
    body = {"kind": "fit-routing", "table": table, "seed": result.seed,
            "workload": "batch 1, each model's prompts (10, their tokens per layer from the table), a per-layer LRU of "
                        "token sets started cold per prompt",
            "parameters": params, "models": sections,
            "fit": {"cost": _clean(result.cost), "evaluations": result.evaluations,
                    **{k: _clean(v) for k, v in summary(result).items()}},
            "residuals": rows}
    header = ["# Written by `sim fit-routing`; do not edit by hand. Reproduce from the project root with:",
              f"#   {command}",
              "# Each residual: simulated (the analytic companions the counts fidelity uses) minus measured; `sampled`",
              "# is the same row measured on routes the lookup sampler drew; ranges: distance outside the range.",
              *[f"# note: {note}" for note in notes]]
    return "\n".join(header) + "\n" + dump_yaml(body)


def _fmt(value: object, unit: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (tuple, list)):
        return "-".join(_fmt(v, unit) for v in value)
    v = float(value)
    if unit == "fraction":
        return f"{100 * v:.2f}%"
    return f"{v:.3g}" if unit == "bits" else f"{v:.1f}"


def report_markdown(result, command: str) -> str:
    """The fit as a report: parameters, then a table of every row (id, quantity, measured, simulated, sampled,
    error), fitted rows first."""
    from sim.calibration.routing_fit import EXPONENT, SHARED

    p = result.params
    s = summary(result)
    lines = ["# Routing law fitted to public routing statistics", "", f"Written by `{command}`.", "",
             "Model: each token routes to top_k distinct experts per layer (Plackett-Luce from a Zipf law by rank, a "
             "request's own skew and hot set), consecutive tokens sharing experts through `locality` "
             "(sim.moe.routing); simulated values are the analytic companions (what the counts fidelity uses), "
             "`sampled` the same statistics measured on routes the lookup sampler drew (seed "
             f"{result.seed}).", "", "| parameter | value | unit | bounds | standard error |", "|---|---|---|---|---|"]
    for m in sorted(p.exponents):
        se = result.stderr.get(f"exponent.{m}")
        lines.append(f"| exponent ({m}) | {p.exponents[m]:.4g} | 1 | {EXPONENT[1]}-{EXPONENT[2]} | "
                     f"{'' if se is None else f'{se:.2g}'} |")
    for name, (unit, lo, hi, _) in SHARED.items():
        se = result.stderr.get(name)
        note = f"held: {result.held[name]}" if name in result.held else ("" if se is None else f"{se:.2g}")
        lines.append(f"| {name} | {getattr(p, name):.4g} | {unit} | {lo:g}-{hi:g} | {note} |")
    lines += ["", f"RMS error over tolerance: fitted rows {s['rms_error_over_tolerance_fit']:.2f} "
              f"({s['rows_fit']} rows), held-out checks {s['rms_error_over_tolerance_check']:.2f} "
              f"({s['rows_check']} rows). Tolerances: 1 point for hit rates and overlaps, 3 points for values the "
              "source gives as `~`.", "",
              "| row | model | quantity | role | measured | simulated | sampled | error |",
              "|---|---|---|---|---|---|---|---|"]
    for role in ("fit", "check"):
        for r in result.rows:
            if r["role"] != role:
                continue
            q = r["quantity"] + (f" @{r['capacity']}" if r.get("capacity") else "")
            unit = r["unit"]
            err = r["error"]
            err_s = f"{100 * err:+.2f} pts" if unit == "fraction" else f"{err:+.3g} {unit}"
            lines.append(f"| {r['row_id']} | {r['model']} | {q} | {role} | {_fmt(r['measured'], unit)} | "
                         f"{_fmt(r['simulated'], unit)} | {_fmt(r['sampled'], unit)} | {err_s} |")
    return "\n".join(lines) + "\n"


MIN_LAYER_TOKENS = 2  # a layer routing fewer tokens has no consecutive pair: nothing of its reuse to fit


def _spans(ids: list[int]) -> str:
    """Sorted whole numbers as runs: [4, 5, 6, 9] -> '4-6, 9'."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def trace_observations(path: str, model: str, experts: int | None) -> tuple[list, list[str]]:
    """The observations a route trace gives (:func:`trace_rows`), and notes on what was left out: the layers that
    route fewer than ``MIN_LAYER_TOKENS`` tokens (a far layer id among near ones, the ids between it and them).
    A trace with no layer left, or nothing to fit, is a one-line error naming the file and ``--trace``."""
    from sim.calibration.routing_fit import geometry_problem
    from sim.core.errors import ScenarioError
    from sim.formats.route_trace import read_route_trace

    full = read_route_trace(path, "--trace")
    trace, dropped = full.without_sparse_layers(MIN_LAYER_TOKENS)
    if trace is None:
        raise ScenarioError(path, "--trace", f"every layer routes fewer than {MIN_LAYER_TOKENS} tokens: expected "
                            "consecutive tokens of a layer to fit the routing law to")
    import numpy as np

    if experts is not None and experts < trace.expert_count:
        raise ScenarioError("--experts", str(experts), f"fewer experts per layer than {path} routes to: expected at "
                            f"least {trace.expert_count} (its highest expert id + 1)")
    tokens = int(np.unique(trace.request, return_counts=True)[1].max()) // trace.layers  # a request's, per layer
    too_large = geometry_problem(trace.layers, experts or trace.expert_count, tokens)
    if too_large:
        raise ScenarioError(path, "--trace", too_large)
    notes = []
    if dropped:
        many = len(dropped) > 1
        notes.append(f"layer{'s' if many else ''} {_spans(dropped)} of 0-{full.layers - 1} route"
                     f"{'' if many else 's'} fewer than {MIN_LAYER_TOKENS} tokens{' each' if many else ''}: left out "
                     f"of the fit ({trace.layers} layers kept)")
    obs = trace_rows(trace, model, experts)
    if not any(o.role == "fit" for o in obs):
        raise ScenarioError(path, "--trace", "no statistic to fit: expected consecutive tokens of a request in a "
                            "layer (the overlap) or at least 8 experts a layer (the LRU hit rates)")
    return obs, notes


def trace_rows(trace, model: str, experts: int | None = None, capacities: tuple[int, ...] = (8, 12, 16, 24, 32, 48,
                                                                                                64, 96, 128)
               ) -> list:
    """A route trace's statistics as observations of ``model`` (every other capacity and the odd prompts held out
    as checks), to fit the routing law to a trace instead of a table."""
    import numpy as np

    from sim.calibration.routing_fit import Observation
    from sim.moe.trace_replay import lru_hit_rates

    n = experts or trace.expert_count
    geo = dict(model=model, layers=trace.layers, experts=n, top_k=trace.top_k)
    caps = [c for c in capacities if c <= n]
    out = [Observation(f"lru-{c}", quantity="lru_hit_rate", capacity=c, measured=float(h),
                       role="fit" if i % 2 == 0 else "check", **geo)
           for i, (c, h) in enumerate(zip(caps, lru_hit_rates(trace, caps), strict=True))]
    o1, who = trace.overlap(1)
    for i, r in enumerate(np.unique(who).tolist()):
        tokens = max(int(np.count_nonzero(trace.request == r) // max(trace.layers, 1)), 1)  # a request in few layers
        out.append(Observation(f"overlap-{r}", quantity="overlap", measured=float(o1[who == r].mean()),
                               prompt=str(r), tokens=tokens, role="fit" if i % 2 == 0 else "check", **geo))
    for ds in ((2,), (8, 16)):
        vals = [trace.overlap(x)[0] for x in ds]
        if all(v.size for v in vals):
            out.append(Observation(f"overlap-d{'-'.join(map(str, ds))}", quantity="overlap_d", distances=ds,
                                   measured=float(np.mean([v.mean() for v in vals])), role="fit", **geo))
    return out

