"""Fit the expert-routing law and the decode step-cost mechanism of an MoE engine to the Strata measurements.

Two rounds are simulated from one scenario: round 1 as written (another tenant on the GPU) and round 2 with the
engine GPU's ``reserved_gib`` set to 0 (the source says the rounds differ only in that tenant being stopped). Their
requests are pooled, as the source pooled its 2,890 telemetry triples, and bucketed like ``strata_spill_buckets.csv``.

Targets (``calibration/``): round-1 median hit rate, round-1 decode tok/s and both GPU utilisations
(``strata_gen3_5090.csv``) and the spill and hit-rate buckets (``strata_spill_buckets.csv``). Reported as checks but
not fitted: round-2 single-stream decode (``strata_parallel_slots.csv``, another experiment of the source,
at odds with its own power-ratio figure) and the spill share of the one request of ``logs/strata_sample.log``.
Each target's error is measured in units of its tolerance (the issue's: 1.5 points of hit rate, 7% of round-1 decode,
15% per bucket; 3 points of GPU utilisation) and the loss sums their fourth powers, a soft minimax that keeps every
target inside its tolerance rather than trading one off for the others; Nelder-Mead searches the
free parameters in log or logit space with common random numbers (one seed for every evaluation), so the objective
is deterministic. Held parameters are assumptions the tables cannot separate; each is listed with its reason.

The power model is then solved in closed form: with compute and idle watts held, the stalled watts that give the
measured round-2 / round-1 power ratio.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np
import yaml

from .errors import ScenarioError
from .moe_serve import serve, serve_metrics, spill_buckets
from .scenario import Scenario, load_scenario
from .tables import read_measured

MODEL_ROUTING = "models.{model}.moe.routing."
ENGINE_STEP = "machines.{machine}.engine.step."


@dataclass(frozen=True)
class Free:
    path: str  # relative: "routing.exponent" or "step.dense_s"
    start: float
    lo: float
    hi: float
    unit: str
    meaning: str
    logit: bool = False  # a share in (0, 1)


# Starting values: the result of earlier searches (300 evaluations at 400 requests per round from round-number
# guesses, 150 at 1,000 with squared errors, 150 at 1,000 with this loss), except link_share: those searches left it
# at its 0.5 start while the >5% bucket ran 13-17% fast on unseen seeds; 0.43 balances it against the plateau there.
# The shipped calibration refines these at 2,000 requests per round, where the sparse >5% bucket is less noisy.
FREE = [
    Free("routing.exponent", 1.1691, 0.5, 2.5, "1", "Zipf exponent of expert popularity per layer"),
    Free("routing.exponent_spread", 0.0859, 0.005, 1.0, "1", "log-sd of a request's own skew around the profile"),
    Free("step.dense_s", 8.039e-3, 1e-4, 0.1, "s", "GPU time of a verification step outside routed experts"),
    Free("step.cpu_expert_s", 18.27e-6, 1e-6, 1e-3, "s", "host CPU time per missed expert it computes"),
    Free("step.graph_break_s", 7.316e-3, 1e-5, 0.1, "s", "cost per step of running eagerly after a PCIe read"),
    Free("step.host_s", 0.9293e-3, 1e-5, 0.02, "s", "host time per step with the GPU idle"),
    Free("step.link_share", 0.43, 0.02, 1.0, "fraction", "share of the link's copy rate expert reads get", logit=True),
    Free("step.break_idle_share", 0.1440, 1e-3, 0.999, "fraction", "share of the eager overhead with the GPU idle",
         logit=True),
]

HELD = {
    "routing.locality": (0.0, "the log's lookups/routed ratio (1.52) is below what popularity alone gives; no extra "
                         "temporal locality is visible"),
    "routing.drift_weight": (0.0, "per-request skew (exponent_spread) already spreads requests as the buckets need; "
                             "a hot set off the profile adds nothing these tables can see"),
    "step.gpu_expert_s": (0.77e-6, "1.382 MB per expert at the RTX 5090's 1,792 GB/s memory bandwidth (card spec)"),
    "step.pcie_latency_s": (30e-6, "assumed per-layer transfer set-up; not separable from link_share here"),
}


POWER_HELD = {
    "busy_w": (575.0, "RTX 5090 total graphics power (card spec, not measured); absolute J/token scale with it"),
    "idle_w": (30.0, "assumed idle draw of the card (not measured)"),
}


@dataclass
class Target:
    name: str
    measured: float
    kind: str  # "rate" (error: log ratio) or "share" (error: difference)
    tolerance: float  # rate: relative (0.15 = 15%); share: absolute (0.015 = 1.5 points)
    source: str
    fitted: bool = True  # False: reported as a check only


@dataclass
class MoeFit:
    parameters: dict[str, float]
    held: dict[str, float]
    targets: list[dict]
    loss: float
    evaluations: int
    power: dict[str, float] = field(default_factory=dict)


def _value(rows: list[dict], quantity: str, table: str) -> float:
    """A quantity of a ``quantity,value,...`` table; a range ``a-b`` gives its midpoint."""
    for r in rows:
        if r["quantity"] == quantity:
            text = str(r["value"])
            try:
                lo, _, hi = text.partition("-") if not text.startswith("-") else (text, "", "")
                return (float(lo) + float(hi)) / 2 if hi else float(lo)
            except ValueError:
                raise ScenarioError(table, quantity, f"bad value {text!r}: expected a number") from None
    raise ScenarioError(table, quantity, "missing: expected a row with this quantity")


def strata_targets(tables_dir: str) -> list[Target]:
    """The measured figures the fit aims at, read from the calibration tables (provenance in their headers)."""
    main_file = os.path.join(tables_dir, "strata_gen3_5090.csv")
    _, main = read_measured(main_file)
    _, slots = read_measured(os.path.join(tables_dir, "strata_parallel_slots.csv"))
    _, buckets = read_measured(os.path.join(tables_dir, "strata_spill_buckets.csv"))
    g, b = "strata_gen3_5090.csv", "strata_spill_buckets.csv"
    out = [
        Target("r1_hit_rate_median", _value(main, "round1_decode_hit_rate", main_file) / 100, "share", 0.015, g),
        Target("r1_decode_tok_s", _value(main, "round1_decode_tok_s", main_file), "rate", 0.07, g),
        Target("r1_gpu_busy_share", _value(main, "gpu_utilization_round1", main_file) / 100, "share", 0.03, g),
        Target("r2_gpu_busy_share", _value(main, "gpu_utilization_round2", main_file) / 100, "share", 0.03, g),
        # checks, not fitted: a single-stream figure from another experiment of the source (section 7),
        # which its own telemetry buckets and power ratio (82% more tokens: ~256 tok/s) do not agree with
        Target("r2_decode_tok_s", float(next(r for r in slots if int(r["parallel"]) == 1)
                                        ["single_stream_decode_tok_s"]), "rate", 0.07, "strata_parallel_slots.csv",
               fitted=False),
    ]
    for r in buckets:
        hi = None if r["high_pct"] in (None, "") else float(r["high_pct"])
        out.append(Target(bucket_key(r["bucket_by"], float(r["low_pct"]), hi), float(r["decode_tok_s"]), "rate",
                          0.15, b))
    log = os.path.join(tables_dir, "logs", "strata_sample.log")
    if os.path.exists(log):
        m = re.search(r"\(([\d.]+)% of all \d+ routed\)", open(log, encoding="utf-8").read())
        if m:
            out.append(Target("r1_spill_share_median", float(m.group(1)) / 100, "share", 0.01,
                              "logs/strata_sample.log (one request)", fitted=False))
    return out


def outside_tolerance(row: dict) -> bool:
    """A fitted target row of :class:`MoeFit` whose simulated value misses its tolerance."""
    sim, meas = row["simulated"], row["measured"]
    if not row["fitted"]:
        return False
    if sim is None or not math.isfinite(sim):
        return True
    err = abs(sim / meas - 1) if row["kind"] == "rate" else abs(sim - meas)
    return err > row["tolerance"]


def bucket_key(by: str, lo: float, hi: float | None) -> str:
    return f"{by}_{lo:g}_{'up' if hi is None else format(hi, 'g')}"


def _round_scenarios(path: str, overrides: list[str]) -> tuple[Scenario, Scenario]:
    r1, _ = load_scenario(path, overrides)
    sv = r1.serve
    assert sv is not None
    gpu = r1.machines[sv.machine].engine.gpu  # type: ignore[union-attr]
    r2, _ = load_scenario(path, [*overrides, f"machines.{sv.machine}.gpus.{gpu}.reserved_gib=0"])
    return r1, r2


def observe(path: str, overrides: list[str], requests: int, seed: int) -> dict:
    """Simulate both rounds; the observables the targets name, plus the records and metrics of each round."""
    r1, r2 = _round_scenarios(path, [*overrides, f"serve.requests={requests}"])
    e1, rec1, _ = serve(r1, np.random.default_rng([seed, 1]))
    e2, rec2, _ = serve(r2, np.random.default_rng([seed, 2]))
    m1, m2 = serve_metrics(e1, rec1), serve_metrics(e2, rec2)
    obs = {"r1_hit_rate_median": m1["expert_hit_rate"], "r1_decode_tok_s": m1["decode_tok_s"],
           "r1_gpu_busy_share": m1["gpu_busy_share"], "r2_gpu_busy_share": m2["gpu_busy_share"],
           "r2_decode_tok_s": m2["decode_tok_s"], "r1_spill_share_median": m1["pcie_spill_share"]}
    for row in spill_buckets(rec1 + rec2):
        key = bucket_key(row["bucket_by"], row["low_pct"], row["high_pct"])
        obs[key] = float("nan") if row["decode_tok_s"] is None else row["decode_tok_s"]
        obs[key + "_n"] = row["requests"]
    obs["_rounds"] = ((e1, rec1, m1), (e2, rec2, m2))
    return obs


def loss_terms(obs: dict, targets: list[Target]) -> list[float]:
    """Per target: (error / tolerance) ** 4, 0 for checks; an empty bucket counts as ten tolerances off."""
    out = []
    for t in targets:
        sim = obs.get(t.name, float("nan"))
        if not t.fitted:
            out.append(0.0)
        elif not np.isfinite(sim) or (t.kind == "rate" and sim <= 0):
            out.append(1e4)
        elif t.kind == "rate":
            out.append((math.log(sim / t.measured) / math.log1p(t.tolerance)) ** 4)
        else:
            out.append(((sim - t.measured) / t.tolerance) ** 4)
    return out


def _paths(scn: Scenario) -> tuple[str, str]:
    sv = scn.serve
    assert sv is not None
    eng = scn.machines[sv.machine].engine
    assert eng is not None
    return MODEL_ROUTING.format(model=eng.model), ENGINE_STEP.format(machine=sv.machine)


def _absolute(rel: str, routing: str, step: str) -> str:
    head, name = rel.split(".", 1)
    return (routing if head == "routing" else step) + name


def _rel(path: str) -> str:
    """``models.M.moe.routing.exponent`` -> ``routing.exponent``."""
    return ".".join(path.split(".")[-2:])


def _to_x(f: Free, v: float) -> float:
    if f.logit:
        return math.log(v / (1 - v))
    return math.log(v)


def _from_x(f: Free, x: float) -> float:
    v = 1 / (1 + math.exp(-x)) if f.logit else math.exp(x)
    return min(max(v, f.lo), f.hi)


def fit_moe(path: str, tables_dir: str, requests: int = 2000, seed: int = 0, max_evals: int = 40,
            start: dict[str, float] | None = None, log=None) -> MoeFit:
    from scipy.optimize import minimize

    targets = strata_targets(tables_dir)
    base, _ = load_scenario(path)
    routing, step = _paths(base)
    held = [f"{_absolute(k, routing, step)}={v}" for k, (v, _) in HELD.items()]
    start = start or {}
    x0 = np.array([_to_x(f, start.get(_absolute(f.path, routing, step), f.start)) for f in FREE])
    evals = [0]

    def overrides(x: np.ndarray) -> list[str]:
        pairs = zip(FREE, x, strict=True)
        return held + [f"{_absolute(f.path, routing, step)}={_from_x(f, xi):.6g}" for f, xi in pairs]

    def objective(x: np.ndarray) -> float:
        evals[0] += 1
        total = float(sum(loss_terms(observe(path, overrides(x), requests, seed), targets)))
        if log is not None and evals[0] % 10 == 0:
            log(f"evaluation {evals[0]}: loss {total:.4f}")
        return total

    res = minimize(objective, x0, method="Nelder-Mead",
                   options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-4, "adaptive": True})
    best = overrides(res.x)
    params = {o.split("=")[0]: float(o.split("=")[1]) for o in best[len(held):]}
    obs = observe(path, best, requests, seed)
    rows = [{"target": t.name, "measured": t.measured, "simulated": round(float(obs.get(t.name, float("nan"))), 4),
             "requests": obs.get(f"{t.name}_n"), "tolerance": t.tolerance, "kind": t.kind, "fitted": t.fitted,
             "source": t.source}
            for t in targets]
    for r in rows:
        if r["requests"] is None:
            del r["requests"]
    fit = MoeFit(params, {_absolute(k, routing, step): v for k, (v, _) in HELD.items()}, rows,
                 float(res.fun), evals[0])
    table = os.path.join(tables_dir, "strata_gen3_5090.csv")
    ratio = _value(read_measured(table)[1], "power_ratio_round2_over_round1", table)
    stalled = solve_stalled_w(obs["_rounds"][0][2], obs["_rounds"][1][2], ratio)
    power = step.replace(".step.", ".power.")
    if math.isfinite(stalled) and 0 <= stalled:
        fit.power = {power + k: v for k, (v, _) in POWER_HELD.items()} | {power + "stalled_w": round(stalled, 2)}
    return fit


def solve_stalled_w(m1: dict, m2: dict, ratio: float) -> float:
    """Watts while busy-but-stalled that make round 2's mean power ``ratio`` times round 1's, with the computing and
    idle watts held: power = (busy_w * compute + stalled_w * waiting + idle_w * idle) per second of decode, linear in
    stalled_w. Uses the time shares of :func:`sim.moe_serve.serve_metrics`."""
    busy_w, idle_w = POWER_HELD["busy_w"][0], POWER_HELD["idle_w"][0]

    def parts(m: dict) -> tuple[float, float]:
        waiting = m["gpu_busy_share"] - m["compute_share"]
        idle = 1.0 - m["gpu_busy_share"]
        return busy_w * m["compute_share"] + idle_w * idle, waiting

    fixed1, wait1 = parts(m1)
    fixed2, wait2 = parts(m2)
    # fixed2 + s * wait2 = ratio * (fixed1 + s * wait1); no solution (nan) when the rounds wait alike
    den = wait2 - ratio * wait1
    return (ratio * fixed1 - fixed2) / den if abs(den) > 1e-12 else float("nan")


def moe_calibration_yaml(fit: MoeFit, command: str) -> str:
    header = ["# MoE routing and step-cost calibration written by `sim fit-moe`; do not edit by hand.",
              "# Reproduce from the project root with:", f"#   {command}",
              "# Targets: calibration/strata_gen3_5090.csv, strata_parallel_slots.csv, strata_spill_buckets.csv",
              "# (provenance in each header: source write-up 004_2da337f677d0ffea.txt) and logs/strata_sample.log.",
              "# Held values are assumptions the tables cannot separate from a fitted one; reasons under held_reason."]
    units = {f.path: f.unit for f in FREE}
    everything = {**fit.held, **fit.parameters, **fit.power}
    body = {
        "kind": "moe",
        "parameters": everything,
        "units": {k: units.get(_rel(k), "s" if k.endswith("_s") else "W" if k.endswith("_w") else "1")
                  for k in everything},
        "fitted": list(fit.parameters),
        "held_reason": {**{k: HELD[_rel(k)][1] for k in fit.held},
                        **{k: POWER_HELD[k.rsplit(".", 1)[1]][1] for k in fit.power if not k.endswith("stalled_w")}},
        "power_note": "stalled_w: round 2 draws power_ratio_round2_over_round1 (strata_gen3_5090.csv) times round 1"
        if fit.power else "no stalled_w >= 0 gives the measured power ratio with these time shares: power not set",
        "loss": round(fit.loss, 6),
        "evaluations": fit.evaluations,
        "targets": fit.targets,
    }
    return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)
