"""Dispatch break-even between two machines, found by bisection over simulated job completions.

Each evaluation runs the lab simulation for one job of N tokens pinned to a machine, with the model not resident
(the load goes through the simulated pipeline), from the scenario's initial page-cache state. The closed forms of
:func:`sim.dispatch.breakeven_closed_form` are computed alongside as a check.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .dispatch import breakeven_closed_form
from .errors import SimulationError
from .labsim import Lab, single_job_completion_s
from .scenario import Scenario

MAX_TOKENS = 10**12


def _without_resident(scn: Scenario, model: str) -> Scenario:
    machines = {n: m.model_copy(update={"resident_models": [x for x in m.resident_models if x != model],
                                        "busy_until_s": 0.0})
                for n, m in scn.machines.items()}
    return scn.model_copy(update={"machines": machines})


def smallest_true(pred: Callable[[int], bool], lo: int = 0) -> float:
    """Smallest integer N >= lo with pred(N) true, for pred monotone false->true; inf if none up to MAX_TOKENS."""
    if pred(lo):
        return float(lo)
    hi = max(1, lo * 2)
    while not pred(hi):
        if hi >= MAX_TOKENS:
            return math.inf
        lo, hi = hi, min(hi * 2, MAX_TOKENS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return float(hi)


def breakeven(scn: Scenario, model: str, a: str, b: str, seed: int) -> dict:
    for name in (a, b):
        if name not in scn.machines:
            raise SimulationError(f"no machine '{name}' in the scenario (machines: {sorted(scn.machines)})")
        if model not in scn.machines[name].decode_tok_s:
            raise SimulationError(f"machine '{name}' has no decode rate for model '{model}'")
    if model not in scn.models:
        raise SimulationError(f"no model '{model}' in the scenario (models: {sorted(scn.models)})")
    base = _without_resident(scn, model)
    rates = {n: base.machines[n].decode_tok_s[model] for n in (a, b)}
    if rates[a] == rates[b]:
        raise SimulationError(f"{a} and {b} decode {model} at the same rate: the faster loader always wins")
    fast, slow = (a, b) if rates[a] > rates[b] else (b, a)
    theta = base.dispatch.tie_threshold
    memo: dict[tuple[str, int], float] = {}

    def t(machine: str, n: int) -> float:
        key = (machine, n)
        if key not in memo:
            memo[key] = single_job_completion_s(base, machine, model, n, seed)
        return memo[key]

    sim = {
        "breakeven_tokens": smallest_true(lambda n: t(fast, n) <= t(slow, n)),
        "clear_win_tokens": smallest_true(lambda n: t(slow, n) >= (1 + theta) * t(fast, n)),
        "fast_loader_clear_below_tokens": smallest_true(lambda n: t(fast, n) < (1 + theta) * t(slow, n)),
    }
    lab = Lab(base, np.random.default_rng(seed))
    load_s = {n: lab.predict_load_s(lab.machines[n], model) for n in (a, b)}
    closed = breakeven_closed_form(load_s[fast], rates[fast], load_s[slow], rates[slow], theta)
    sim_load = {n: t(n, 0) for n in (a, b)}
    return {
        "scenario": scn.name, "seed": seed, "model": model, "a": a, "b": b,
        "faster_decoder": fast, "faster_loader": min((a, b), key=lambda n: sim_load[n]),
        "tie_threshold": theta, "decode_tok_s": rates, "load_s": sim_load,
        **sim,
        "closed_form": closed,
        "closed_form_load_s": load_s,
        "evaluations": len(memo),
    }
