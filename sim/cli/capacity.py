"""``sim capacity``: the highest request rate, or the most concurrent users, a served scenario takes within goals."""

from __future__ import annotations

import time

import click

from sim.cli.app import main, quiet_option, user_errors, warn_implausible

AXES = {"rate": "rate_per_s", "clients": "clients"}


@main.command(short_help="The most users or requests per second that meet latency goals.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--goal", "goal_texts", multiple=True, required=True, metavar="GOAL",
              help="A bound every answer meets, e.g. 'ttft_p99<1s', 'tpot_p99<50ms', 'e2e_p50<=20s' (repeatable): "
              "ttft, tpot, e2e or queue_wait with p50, p90, p95, p99, mean or max; or 'rejected_share<0.01'.")
@click.option("--load", type=click.Choice(sorted(AXES)), default=None,
              help="What to search over: rate (an open loop's requests/s) or clients (a closed loop's users). "
              "Default: the scenario workload's own.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Change the scenario first.")
@click.option("--seeds", type=click.IntRange(min=1, max=100), default=5, show_default=True,
              help="Paired seeds: each is searched on its own random stream; the answer is their median.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="First seed (default: the scenario's).")
@click.option("--rtol", type=click.FloatRange(min=1e-4, max=0.5), default=0.02, show_default=True,
              help="A rate is bisected to this relative width (users: to one).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, nothing else.")
@quiet_option
@user_errors
def capacity(scenario: str, goal_texts: tuple[str, ...], load: str | None, overrides: tuple[str, ...], seeds: int,
             seed: int | None, rtol: float, as_json: bool) -> None:
    """The most load SCENARIO's server takes while meeting every --goal, with its spread over seeds.

    \b
    sim capacity scenarios/a100_llama3_8b.yaml --goal 'ttft_p99<1s' --goal 'tpot_p99<50ms'
    sim capacity scenarios/gen3_5090_concurrency.yaml --load clients --goal 'ttft_p99<2s'
    """
    from sim.capacity import axis_of, find_capacity, parse_goal, scenario_evaluator
    from sim.config.load import load_scenario
    from sim.core.output import dumps

    goals = [parse_goal(t) for t in goal_texts]
    base, _ = load_scenario(scenario, overrides)
    if base.serve is None:
        raise click.UsageError(f"{scenario}: no serve section: a capacity needs a served workload")
    warn_implausible(base, scenario)
    axis = axis_of(base.serve.workload.kind, AXES.get(load) if load else None, scenario)
    evaluate, start, ramp, ceiling = scenario_evaluator(scenario, overrides, goals, axis)
    first = base.seed if seed is None else seed
    t0 = time.perf_counter()
    result = find_capacity(evaluate, goals, list(range(first, first + seeds)), min(start, ceiling), axis, rtol=rtol,
                           ceiling=ceiling)
    wall = time.perf_counter() - t0
    out = as_dict(result, base.serve.workload.kind, ramp, base.serve.requests, wall)
    click.echo(dumps(out) if as_json else text(out), nl=not as_json)


def as_dict(result, kind: str, ramp_s: float, requests: int, wall_s: float) -> dict:
    """The answer, its spread, each goal's value at it, the goodput, and every seed's search."""
    import numpy as np

    at = result.at_answer

    def median(values):
        return float(np.median(values)) if len(values) else float("nan")

    return {
        "axis": result.axis, "capacity": result.capacity, "low": result.low, "high": result.high,
        "bounded": result.bounded, "seeds": [s.seed for s in result.searches], "runs": result.runs,
        "goals": {g.text: {"key": g.key, "bound": g.bound, "at_capacity": median([o.values[g.key] for o in at])}
                  for g in result.goals},
        "goodput_per_s": median([o.goodput_per_s for o in at]),
        "requests_per_s": median([o.requests_per_s for o in at]),
        "throughput_tok_s": median([o.throughput_tok_s for o in at]),
        "workload": kind, "ramp_s": ramp_s, "requests_per_run": requests,
        "steady_window": "requests sent between the 10% and 90% quantiles of the send times"
                         + (f", and after the {ramp_s:g} s ramp" if ramp_s else ""),
        "per_seed": [{"seed": s.seed, "capacity": s.capacity, "bounded": s.bounded,
                      "tried": [[o.load, o.met] for o in s.runs]} for s in result.searches],
        "wall_s": wall_s,
    }


def text(d: dict) -> str:
    rate = d["axis"] == "rate_per_s"
    unit = "requests/s" if rate else "concurrent users"

    def fmt(x: float) -> str:
        return f"{x:.3g}" if rate else f"{x:.0f}"

    goals = ", ".join(d["goals"])
    if d["capacity"] <= 0:
        return f"capacity: no load meets {goals} (tried down to the lowest)\n"
    head = f"capacity: {fmt(d['capacity'])} {unit} meet {goals}"
    if not d["bounded"]:
        head += (" (and more: every load met the goals up to the search's ceiling"
                 + (", one user per request of a run: more requests, --set serve.requests=N, to go further)"
                    if not rate else ")"))
    lines = [head,
             f"  spread over {len(d['seeds'])} paired seeds: {fmt(d['low'])} to {fmt(d['high'])} {unit}"
             f" ({d['runs']} runs in {d['wall_s']:.1f} s)"]
    for text_, g in d["goals"].items():
        v = g["at_capacity"]
        shown = f"{v:.3g}" if g["key"] == "rejected_share" else f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
        lines.append(f"  at capacity: {g['key']} {shown} (goal {text_})")
    lines.append(f"  goodput {d['goodput_per_s']:.3g} requests/s meeting every bound themselves, of "
                 f"{d['requests_per_s']:.3g} completed; {d['throughput_tok_s']:,.0f} output tok/s")
    users = "open-loop Poisson arrivals" if rate else (
        f"closed-loop users started over a {d['ramp_s']:g} s ramp" if d["ramp_s"]
        else "closed-loop users all started at once (set serve.workload.ramp_s to spread them)")
    lines.append(f"  measured in steady state: {d['steady_window']}; {users}; {d['requests_per_run']:,} requests "
                 "a run")
    return "\n".join(lines) + "\n"
