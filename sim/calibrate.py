"""``sim calibrate``: fit a scenario's declared free parameters to real requests, with standard errors.

Observations are completed requests, from engine logs (:mod:`sim.logs`) or request tables (CSV columns named like
the log rows: ``prompt_tokens``, ``cached_tokens``, ``output_tokens``, ``acceptance`` and any of the measured
``prefill_tok_s``, ``decode_tok_s``, ``ttft_s``, ``expert_hit_rate``, ``pcie_share``). Every observed request is
replayed through the scenario's engine, one after another (its own prompt, cache hit, length and acceptance), and
the free parameters (``calibrate.free`` in the scenario: dotted paths with bounds) are moved to minimise robust
(soft-L1) residuals: log ratios for rates and times, differences in units of one point for shares. Every
evaluation uses the same random numbers, so the objective is deterministic; Nelder-Mead in log space searches it
(whole verification steps and the eager switch make it piecewise flat at fine scales, which misleads gradients).

Standard errors come from the Jacobian at the solution (log space: a parameter's ``log_sd`` is its relative
uncertainty), each observable's residuals weighted by their own RMS at the solution; a parameter whose column of the
Jacobian is flat, or whose relative standard error exceeds 100%, is flagged: the data cannot pin it down. The
calibration file keeps the log-space covariance, which ``sim run --uncertainty N`` samples from.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import ScenarioError
from .scenario import Scenario, get_dotted, load_scenario
from .tables import read_measured

RATES = ("prefill_tok_s", "decode_tok_s", "ttft_s")
SHARES = ("expert_hit_rate", "pcie_share")
SHARE_SCALE = 0.01  # one point


@dataclass
class Observation:
    source: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    acceptance: float  # NaN: the model's
    measured: dict[str, float]


@dataclass
class CalibrationResult:
    parameters: dict[str, float]
    log_sd: dict[str, float]
    log_cov: list[list[float]]
    residuals: list[dict]
    warnings: list[str] = field(default_factory=list)
    cost: float = 0.0
    evaluations: int = 0


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def observations(logs: list[str], tables: list[str]) -> list[Observation]:
    from .logs import log_sources, read_logs

    rows: list[tuple[str, dict]] = []
    if logs:
        rows += [(r["line"], r) for r in read_logs(log_sources(logs)).rows]
    for path in tables:
        _, table = read_measured(path)
        rows += [(f"{path} row {i + 1}", r) for i, r in enumerate(table)]
    out = []
    for where, r in rows:
        prompt, output = _num(r.get("prompt_tokens")), _num(r.get("output_tokens"))
        if prompt is None or output is None or output < 1:
            continue  # statistics lines and partial rows carry no request to replay
        measured = {k: v for k in (*RATES, *SHARES) if (v := _num(r.get(k))) is not None}
        cached = _num(r.get("cached_tokens")) or 0
        acc = _num(r.get("acceptance"))
        if prompt < 0 or cached < 0 or cached > prompt or (acc is not None and not 0 <= acc <= 1):
            raise ScenarioError(where, "prompt_tokens" if prompt < 0 else "cached_tokens" if cached < 0 or
                                cached > prompt else "acceptance",
                                "prompt >= cached >= 0 tokens and an acceptance fraction in [0, 1]")
        if cached >= prompt:
            measured.pop("prefill_tok_s", None)
        out.append(Observation(where, int(prompt), int(_num(r.get("cached_tokens")) or 0), int(output),
                               float("nan") if acc is None else acc, measured))
    if not any(o.measured for o in out):
        raise ScenarioError(", ".join([*logs, *tables]) or "(no input)", "", "completed requests with something "
                            f"measured ({', '.join((*RATES, *SHARES))}) to fit to")
    return out


def simulate(scn: Scenario, obs: list[Observation], seed: int) -> list[dict[str, float]]:
    """Replay the observed requests one after another on the scenario's engine; per request, the observables."""
    from .moe_serve import setup_engine
    from .server import request_work
    from .server import simulate as run_events
    from .workload import RequestTable

    sv = scn.serve
    assert sv is not None
    eng = setup_engine(scn, sv.machine)
    n = len(obs)
    table = RequestTable(np.full(n, np.nan), np.array([o.prompt_tokens for o in obs]),
                         np.array([o.cached_tokens for o in obs]), np.array([o.output_tokens for o in obs]),
                         np.array([o.acceptance for o in obs]), np.zeros(n, dtype=np.int64),
                         np.zeros(n, dtype=np.int64))
    rng = np.random.default_rng(seed)
    work = request_work(eng, table, None, rng)
    tl = run_events(table, work, 1, sv.request_overhead_s, 0.0, "fixed", None, None, rng)
    d = work.decode
    out = []
    for i, o in enumerate(obs):
        new = o.prompt_tokens - o.cached_tokens
        off = (d["peer_experts"][i] + d["cpu_experts"][i] + d["pcie_reads"][i]) / max(d["routed"][i], 1)
        out.append({"prefill_tok_s": new / work.prefill_s[i] if work.prefill_s[i] > 0 else float("nan"),
                    "decode_tok_s": work.output_tokens[i] / d["decode_s"][i] if d["decode_s"][i] > 0
                    else float("nan"),
                    "ttft_s": float(tl.first_token_s[i] - tl.sent_s[i]),
                    "expert_hit_rate": d["hits"][i] / max(d["lookups"][i], 1), "pcie_share": off})
    return out


def residuals(obs: list[Observation], sim: list[dict[str, float]]) -> list[tuple[str, str, float, float, float]]:
    """(source, observable, measured, simulated, residual) per measured cell."""
    out = []
    for o, s in zip(obs, sim, strict=True):
        for key, meas in o.measured.items():
            got = s[key]
            if key in SHARES:
                r = (got - meas) / SHARE_SCALE
            elif meas > 0 and got > 0:
                r = math.log(got / meas)
            else:
                r = 10.0  # a rate the simulation cannot produce: a large, finite residual
            out.append((o.source, key, meas, got, r))
    return out


def calibrate(path: str, logs: list[str], tables: list[str], seed: int = 0, overrides: list[str] | None = None,
              max_evals: int = 200) -> CalibrationResult:
    from scipy.optimize import least_squares, minimize

    base, raw = load_scenario(path, overrides or [])
    if base.serve is None:
        raise ScenarioError(path, "serve", "a serve section: sim calibrate replays the requests on its engine")
    free = base.calibrate.free
    if not free:
        raise ScenarioError(path, "calibrate.free", "a map of dotted.path: {lo, hi} naming what to fit")
    names = list(free)
    start = []
    for name, fp in free.items():
        found, value = get_dotted(raw, name)
        if not found and fp.start is None:
            raise ScenarioError(path, f"calibrate.free.{name}", "a path the scenario (or its calibrations) sets, or "
                                "a start value")
        if fp.lo >= fp.hi:
            raise ScenarioError(path, f"calibrate.free.{name}.hi", f"more than lo ({fp.lo:g})")
        if found and (isinstance(value, bool) or not isinstance(value, float | int) or value <= 0):
            raise ScenarioError(path, f"calibrate.free.{name}", f"a path holding a positive number (it holds "
                                f"{str(value)[:40]!r})")
        v = fp.start if fp.start is not None else float(value)
        try:  # the search moves values continuously: a whole-number field cannot be free
            load_scenario(path, [*(overrides or []), f"{name}={v * 1.0001:.8g}"])
        except ScenarioError:
            raise ScenarioError(path, f"calibrate.free.{name}", "a real-valued parameter (a fractional value is "
                                "rejected here)") from None
        start.append(min(max(v, fp.lo), fp.hi))
    obs = observations(logs, tables)
    lo = np.log([free[n].lo for n in names])
    hi = np.log([free[n].hi for n in names])
    evals = [0]

    def scenario_at(x: np.ndarray) -> Scenario:
        return load_scenario(path, [*(overrides or []), *(f"{n}={math.exp(v):.8g}" for n, v in zip(names, x,
                                                                                                       strict=True))])[0]

    def fun(x: np.ndarray) -> np.ndarray:
        evals[0] += 1
        return np.array([r[-1] for r in residuals(obs, simulate(scenario_at(x), obs, seed))])

    def robust(x: np.ndarray) -> float:  # soft-L1 with a scale of 0.1 (10% or 10 points), in the box
        z = (fun(np.clip(x, lo, hi)) / 0.1) ** 2
        return float(np.sum(2 * (np.sqrt(1 + z) - 1)))

    # step counts and the eager switch make the objective piecewise flat at fine scales: a derivative-free search
    # finds the minimum; the Jacobian for standard errors is then taken with finite steps of 5%.
    # the eager switch also makes local minima: start from the best of the scenario's values and a scrambled Sobol
    # sample of the box (log space), then refine
    from scipy.stats import qmc

    candidates = [np.clip(np.log(start), lo + 1e-9, hi - 1e-9)]
    sobol = qmc.Sobol(len(names), seed=seed).random(max(8, 2 ** math.ceil(math.log2(4 * len(names)))))
    candidates += list(lo + sobol * (hi - lo))
    x0 = min(candidates, key=robust)
    found = minimize(robust, x0, method="Nelder-Mead",
                     options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6, "adaptive": True})
    best = np.clip(found.x, lo, hi)
    res = least_squares(fun, best, bounds=(lo - 1e-9, hi + 1e-9), diff_step=0.05 / np.maximum(1.0, np.abs(best)),
                        max_nfev=1)  # scipy's step is relative to |x|: this makes it 0.05 in log space
    res.x = best
    jac, r = res.jac, res.fun
    m, k = jac.shape
    # each observable gets its own noise level (its residuals' RMS at the solution), so one the free parameters
    # cannot fix (a hit rate when routing is held) neither inflates nor dominates the others' standard errors
    kinds = [key for _, key, *_ in residuals(obs, simulate(scenario_at(best), obs, seed))]
    scale = np.ones(m)
    for kind in set(kinds):
        rows_k = np.array([q == kind for q in kinds])
        n_k = int(rows_k.sum())
        scale[rows_k] = max(math.sqrt(float(r[rows_k] @ r[rows_k]) / max(n_k - k * n_k / m, 1.0)), 1e-6)
    jw = jac / scale[:, None]
    warnings = []
    if m < k:
        warnings.append(f"{m} measured cells for {k} parameters: the fit is under-determined")
    # covariance from the SVD: a direction the data do not constrain (a singular value under 1e-8 of the largest)
    # has no finite variance, and every parameter along it gets an infinite standard error
    _, sv, vt = np.linalg.svd(jw, full_matrices=False)
    good = sv > 1e-8 * max(float(sv.max()) if sv.size else 0.0, 1e-300)
    cov = (vt[good].T / sv[good] ** 2) @ vt[good]
    blind = np.abs(vt[~good]).max(axis=0) > 1e-6 if (~good).any() else np.zeros(k, dtype=bool)
    if m < k:
        blind[:] = True
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    sd[blind] = np.inf
    cov[blind, :] = np.nan
    cov[:, blind] = np.nan
    col = np.linalg.norm(jac, axis=0)
    for i, n in enumerate(names):
        if col[i] < 1e-6 * max(col.max(), 1e-300):
            warnings.append(f"{n}: the observations do not depend on it (flat Jacobian)")
        elif blind[i]:
            warnings.append(f"{n}: only a combination with other parameters is pinned down (no standard error)")
        elif sd[i] > 1.0:
            warnings.append(f"{n}: not pinned down by these observations (relative standard error {sd[i]:.0%})")
        if abs(res.x[i] - lo[i]) < 1e-6 or abs(res.x[i] - hi[i]) < 1e-6:
            warnings.append(f"{n}: at its bound ({math.exp(res.x[i]):.4g}): widen calibrate.free.{n}")
    final = residuals(obs, simulate(scenario_at(res.x), obs, seed))
    rows = [{"observation": src, "observable": key, "measured": float(meas), "simulated": float(got),
             "error": float((got - meas) if key in SHARES else (got / meas - 1 if meas else float("nan")))}
            for src, key, meas, got, _ in final]
    return CalibrationResult({n: float(f"{math.exp(v):.6g}") for n, v in zip(names, res.x, strict=True)},
                             {n: float(f"{v:.4g}") for n, v in zip(names, sd, strict=True)},
                             [[float(f"{c:.6g}") for c in row] for row in cov], rows, warnings, float(found.fun),
                             evals[0])


def calibration_yaml(res: CalibrationResult, command: str) -> str:
    import yaml

    header = ["# Written by `sim calibrate`; do not edit by hand. Reproduce from the project root with:",
              f"#   {command}",
              "# log_sd: standard error of log(value), i.e. relative; log_cov: their covariance (order of parameters),",
              "# which `sim run --uncertainty N` samples from."]
    body = {"kind": "calibrate", "parameters": res.parameters, "log_sd": res.log_sd, "log_cov": res.log_cov,
            "warnings": res.warnings, "cost": round(res.cost, 6), "evaluations": res.evaluations,
            "residuals": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}
                          for r in res.residuals]}
    return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)


def report_markdown(res: CalibrationResult, command: str, plot: str | None) -> str:
    lines = ["# Calibration report", "", f"`{command}`", "", "| parameter | value | relative standard error |",
             "|---|---|---|"]
    lines += [f"| `{n}` | {v:.6g} | {res.log_sd[n]:.1%} |" for n, v in res.parameters.items()]
    if res.warnings:
        lines += ["", "Warnings:", ""] + [f"- {w}" for w in res.warnings]
    lines += ["", "| observation | observable | measured | simulated | error |", "|---|---|---|---|---|"]
    for r in res.residuals:
        err = f"{r['error']:+.1%}" if r["observable"] not in SHARES else f"{r['error'] * 100:+.2f} pts"
        lines.append(f"| {r['observation']} | {r['observable']} | {r['measured']:.4g} | {r['simulated']:.4g} | {err} |")
    if plot:
        lines += ["", f"![measured against simulated]({os.path.basename(plot)})"]
    return "\n".join(lines) + "\n"


def plot_residuals(res: CalibrationResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({r["observable"] for r in res.residuals})
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        pts = [(r["measured"], r["simulated"]) for r in res.residuals if r["observable"] == key]
        x, y = np.array(pts).T
        ax.scatter(x, y, s=14)
        both = np.concatenate([x, y])
        low, top = float(np.nanmin(both)), float(np.nanmax(both))
        pad = (top - low) * 0.05 or abs(top) * 0.05 or 1.0
        ax.plot([low - pad, top + pad], [low - pad, top + pad], color="grey", lw=0.8)
        ax.set_xlim(low - pad, top + pad)
        ax.set_ylim(low - pad, top + pad)
        ax.set_title(key)
        ax.set_xlabel("measured")
        ax.set_ylabel("simulated")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)
