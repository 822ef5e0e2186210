"""Dispatch break-even between two machines, found by bisection over simulated job completions.

Each evaluation runs the lab simulation for one job of n tokens pinned to a machine, with the model not resident
(the load goes through the simulated pipeline), from the scenario's initial page-cache state. Each machine draws
from its own random stream, the same for every n (common random numbers), so completion is monotone in n. Every
boundary is also computed in closed form from the loading mechanism's predicted load time and the table decode
rates, and the two are compared.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable

import numpy as np

from sim.config.scenario import Job, Scenario
from sim.core.errors import ScenarioError, SimulationError
from sim.core.progress import progress
from sim.lab.dispatch import breakeven_closed_form
from sim.lab.jobs import Lab, single_job_completion_s

MAX_TOKENS = 10**12


def _without_resident(scn: Scenario, model: str) -> Scenario:
    machines = {n: m.model_copy(update={"resident_models": [x for x in m.resident_models if x != model],
                                        "busy_until_s": 0.0})
                for n, m in scn.machines.items()}
    return scn.model_copy(update={"machines": machines})


def switch_point(pred: Callable[[int], bool]) -> tuple[bool, float]:
    """For ``pred`` monotone on [0, MAX_TOKENS]: (pred(0), smallest n where pred(n) != pred(0), inf if none)."""
    first = pred(0)
    if pred(MAX_TOKENS) == first:
        return first, math.inf
    lo, hi = 0, 1
    while pred(hi) == first:
        lo, hi = hi, min(hi * 4, MAX_TOKENS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid) == first:
            lo = mid
        else:
            hi = mid
    return first, float(hi)


def region(pred: Callable[[int], bool]) -> list[float] | None:
    """Integer tokens where ``pred`` holds, as [lo, hi) (hi inf when unbounded), or None."""
    first, switch = switch_point(pred)
    if first:
        return [0.0, switch]
    return None if math.isinf(switch) else [switch, math.inf]


def _check_names(scn: Scenario, model: str, a: str, b: str) -> None:
    def unknown(flag: str, value: str, pool: list[str], what: str) -> ScenarioError:
        hint = difflib.get_close_matches(value, pool, n=1)
        return ScenarioError(flag, "", f"no {what} '{value}'; expected one of {sorted(pool)}"
                             + (f" (did you mean '{hint[0]}'?)" if hint else ""))

    if model not in scn.models:
        raise unknown("--model", model, list(scn.models), "model")
    for flag, name in (("--machine", a), ("--machine", b)):
        if name not in scn.machines:
            raise unknown(flag, name, list(scn.machines), "machine")
        if scn.machines[name].disk is None:
            raise ScenarioError(flag, f"machines.{name}.disk", "no disk: this machine cannot load models")
        if model not in scn.machines[name].decode_tok_s:
            raise ScenarioError(flag, f"machines.{name}.decode_tok_s", f"no decode rate for model '{model}'")
    if a == b:
        raise ScenarioError("--machine", "", f"'{b}' given twice: expected two different machines")


def breakeven(scn: Scenario, model: str, a: str, b: str, seed: int) -> dict:
    """The break-even of machines ``a`` and ``b`` for ``model`` (tokens; see the module docstring), with the
    clear-win regions under the tie rule, the closed forms and every simulated job (``table``: machine, tokens,
    completed_s in seconds). The simulated jobs are counted on a progress bar (stderr, ``sim.core.progress``)."""
    _check_names(scn, model, a, b)
    base = _without_resident(scn, model)
    order = sorted(base.machines)
    memo: dict[tuple[str, int], float] = {}

    def t(machine: str, n: int) -> float:
        if (machine, n) not in memo:
            rng = np.random.default_rng([seed, order.index(machine)])
            memo[(machine, n)] = single_job_completion_s(base, machine, model, n, rng)
            bar.update()
        return memo[(machine, n)]

    lab = Lab(base, np.random.default_rng(seed))
    for n in (a, b):
        e = lab.estimate(lab.machines[n], Job(model=model, tokens=1))
        if not e.eligible:
            raise SimulationError(f"{n} cannot run {model}: {e.why_not}")
    theta = base.dispatch.tie_threshold
    with progress(None, "breakeven", unit="job") as bar:  # the bisections: every simulated job counted
        a_first, cross = switch_point(lambda n: t(a, n) < t(b, n))
        sim = {
            "breakeven_tokens": cross,
            "clear_win": {a: region(lambda n: t(b, n) >= (1 + theta) * t(a, n)),
                          b: region(lambda n: t(a, n) >= (1 + theta) * t(b, n))},
        }
        sim_load = {n: t(n, 0) for n in (a, b)}
    estimates = {n: lab.estimate(lab.machines[n], Job(model=model, tokens=1)) for n in (a, b)}
    rates = {n: e.decode_tok_s for n, e in estimates.items()}  # table rate, slowed by any spill
    load_cf = {n: e.load_s for n, e in estimates.items()}
    cf = breakeven_closed_form(load_cf[a], rates[a], load_cf[b], rates[b], theta)
    closed = {"breakeven_tokens": cf["breakeven_tokens"] if cf["breakeven_tokens"] is not None else math.inf,
              "clear_win": {a: _as_list(cf["clear_win"]["a"]), b: _as_list(cf["clear_win"]["b"])}}
    fast = a if rates[a] > rates[b] else b if rates[b] > rates[a] else None
    fast_region = sim["clear_win"][fast] if fast else None
    clear_from = fast_region[0] if fast_region and math.isinf(fast_region[1]) else math.inf
    agrees = _agree(sim["breakeven_tokens"], closed["breakeven_tokens"]) and all(
        _agree_region(sim["clear_win"][n], closed["clear_win"][n]) for n in (a, b))
    return {
        "scenario": scn.name, "seed": seed, "model": model, "a": a, "b": b,
        "faster_decoder": fast, "faster_loader": min((a, b), key=lambda n: sim_load[n]),
        "wins_short_jobs": a if a_first else b,
        "wins_long_jobs": (b if a_first else a) if math.isfinite(cross) else (a if a_first else b),
        "tie_threshold": theta, "decode_tok_s": rates, "load_s": sim_load,
        "spilled_gib": {n: e.spilled_gib for n, e in estimates.items()},
        "breakeven_tokens": sim["breakeven_tokens"],
        "clear_win_tokens": clear_from,
        "clear_win": sim["clear_win"],
        "closed_form": closed,
        "closed_form_load_s": load_cf,
        "closed_form_agrees": agrees,
        "evaluations": len(memo),
        "table": [{"machine": m, "tokens": n, "completed_s": v} for (m, n), v in sorted(memo.items())],
    }


def _as_list(r: tuple[float, float] | None) -> list[float] | None:
    return list(r) if r is not None else None


def _agree(sim: float, closed: float) -> bool:
    """An integer boundary from bisection against a real one: within one token (both infinite also agree)."""
    if math.isinf(sim) or math.isinf(closed):
        return math.isinf(sim) and math.isinf(closed)
    return abs(sim - math.ceil(closed - 1e-9)) <= 1


def _agree_region(sim: list[float] | None, closed: list[float] | None) -> bool:
    if sim is None or closed is None:
        return sim is None and closed is None
    return _agree(sim[0], closed[0]) and _agree(sim[1], closed[1])


def metrics(result: dict) -> dict[str, float]:
    """Flat numbers of a break-even result (infinite boundaries left out)."""
    out = {"breakeven_tokens": result["breakeven_tokens"], "clear_win_tokens": result["clear_win_tokens"],
           "closed_form.breakeven_tokens": result["closed_form"]["breakeven_tokens"],
           "closed_form_agrees": float(result["closed_form_agrees"])}
    for m in (result["a"], result["b"]):
        out[f"load_s.{m}"] = result["load_s"][m]
        for src, regions in (("", result["clear_win"]), ("closed_form.", result["closed_form"]["clear_win"])):
            r = regions[m]
            if r is not None:
                out[f"{src}clear_win.{m}.from_tokens"] = r[0]
                out[f"{src}clear_win.{m}.below_tokens"] = r[1]
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(float(v))}
