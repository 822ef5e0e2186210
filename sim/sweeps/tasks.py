"""The runs of a sweep: every point of its plan, per seed and parameter draw, validated and keyed."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.config.load import load_scenario
from sim.config.scenario import Scenario
from sim.core.progress import Bar, progress
from sim.sweeps.keys import run_key
from sim.sweeps.spec import Plan


@dataclass
class Task:
    """One simulation of a sweep: a point, a seed and (with --uncertainty) a parameter draw."""

    index: int  # position in the sweep's table
    point: int
    seed: int
    draw: int | None
    params: dict[str, float]
    key: str
    scenario: Scenario


@dataclass
class SweepResult:
    plan: Plan
    tasks: list[Task]
    rows: list[dict]
    ran: int  # simulated in this invocation
    reused: int  # found in the store
    complete: bool
    errors: int
    parameters: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)


def prepare_tasks(plan: Plan, seed: int | None, quiet: bool = False) -> tuple[list[Task], list[str], list[str]]:
    """Validate every point (a bad value is one line naming its --set) and key every run; (tasks, drawn parameter
    names, held parameter names). A progress bar over the points on stderr (see :mod:`sim.core.progress`) unless
    ``quiet``."""
    with progress(len(plan.point_sets), "checking points", unit="point", disable=quiet) as bar:
        return _prepare(plan, seed, bar)


def _prepare(plan: Plan, seed: int | None, bar: Bar) -> tuple[list[Task], list[str], list[str]]:
    tasks: list[Task] = []
    names: list[str] = []
    held: list[str] = []
    for p, sets in enumerate(plan.point_sets):
        bar.update()
        scn, resolved = load_scenario(plan.scenario, sets)
        base = scn.seed if seed is None else seed
        if plan.uncertainty:
            from sim.calibration.uncertainty import parameter_draws

            names, held, draw_sets = parameter_draws(plan.scenario, sets, plan.uncertainty, base)
            draws = []
            for k, dsets in enumerate(draw_sets):
                dscn, dresolved = load_scenario(plan.scenario, dsets)
                params = {n: float(s.split("=", 1)[1]) for n, s in zip(names, dsets[len(sets):], strict=True)}
                draws.append((k, params, dscn, dresolved))
        else:
            draws = [(None, {}, scn, resolved)]
        for j in range(plan.seeds):
            for k, params, dscn, dresolved in draws:
                run_seed = base + j + plan.seeds * (k or 0)
                tasks.append(Task(len(tasks), p, seed=run_seed, draw=k, params=params, key=run_key(dresolved, run_seed),
                                  scenario=dscn))
    return tasks, names, held
