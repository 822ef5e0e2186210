"""Fit the Basalt multi-GPU engine (FIELD_NOTES section 4) to its measured tables, in four independent stages.

1. Prefill (analytic, :mod:`sim.prefill`): per-token compute, the rate experts stream at, the extra time of a token
   beyond the resident KV window and a set-up time, to the context sweep's cold prefill medians, the bench's
   pp16384 and the 12 requests of the engine log (two of them prompt-cache hits with a few hundred new tokens).
2. Routing: the Zipf exponent and the per-request skew spread, to the log's median expert hit rate and median share
   of routed experts served off the primary GPU (the log's ``pcie=``). A per-layer Zipf law placed hottest-first
   cannot give both medians (99.25% of lookups hit and 6.75% of a step's distinct experts off the primary: at that
   hit rate a step touches about 2.7% off it), so both get loose tolerances (1 point, 30%) and the fit settles
   between them, inside the measured ranges (97.0-99.8%, 4.3-16.5%).
3. Decode: the primary's step time ``dense_s``, to the context sweep's decode medians (at each tier's acceptance) and
   the log's per-request decode at each request's own acceptance.
4. Driver paging on the 2-GPU setup: the rate at which the driver pages expert weights in on an oversubscribed
   peer, to the 35-44 tok/s of peer-reserve 600 (basalt_peer_reserve.csv).

Each stage minimises the sum of (error / tolerance)^4 (errors in log ratio for rates, difference for shares), a
soft minimax that keeps every target inside its tolerance. Tolerances: the issue's (prefill sweep 10%, bench 15%,
decode 15%, the paging band 25%) and, for the log's single requests, which the issue does not test, 30%. Checks
that are reported but not fitted carry ``fitted: false``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import yaml

from .decode_batch import decode_many
from .errors import ScenarioError
from .fit_moe import _value
from .moe_serve import setup_engine
from .prefill import prefill_seconds
from .scenario import load_scenario
from .tables import read_measured

ENGINE = "machines.basalt_box.engine."
ROUTING = "models.basalt_pack.moe.routing."
LOG_TOL = 0.3  # single runs of one log, which the issue does not test: they shape the fit without outvoting the tables
LOG_OUTLIER_DECODE = 108.9  # tok/s: the one log request far below every other at its acceptance (reported only)


@dataclass
class BasaltTargets:
    prefill: list[tuple[str, int, int, float, float, bool]]  # name, prompt, cached, seconds, tolerance, fitted
    decode: list[tuple[str, int, np.ndarray, float, float, bool]]  # name, tokens, acceptances, tok/s, tol, fitted
    hit_median: float
    offload_median: float
    hit_range: tuple[float, float]
    offload_range: tuple[float, float]
    paged_decode: float  # tok/s, middle of the 35-44 band
    full_speed: list[tuple[str, float, float]]  # name, reserve MiB, lowest measured tok/s


def _num(row: dict, key: str, path: str) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        raise ScenarioError(path, key, f"bad value {row.get(key)!r}: expected a number") from None


def basalt_targets(tables: str) -> BasaltTargets:
    main_path = os.path.join(tables, "basalt_3gpu.csv")
    _, main = read_measured(main_path)
    sweep_path = os.path.join(tables, "basalt_context_sweep.csv")
    _, sweep = read_measured(sweep_path)
    log_path = os.path.join(tables, "basalt_serve_requests.csv")
    _, log = read_measured(log_path)
    reserve_path = os.path.join(tables, "basalt_peer_reserve.csv")
    _, reserve = read_measured(reserve_path)

    prefill = [("bench_pp16384_cold", 16384, 0, 16384 / _value(main, "bench_prefill_16k_cold", main_path), 0.15,
                True)]
    decode = []
    for r in sweep:
        n = int(_num(r, "prompt_tokens", sweep_path))
        prefill.append((f"sweep_{r['tier']}_prefill", n, 0, n / _num(r, "prefill_tok_s_median", sweep_path), 0.10,
                        True))
        acc = np.linspace(_num(r, "acceptance_min_pct", sweep_path), _num(r, "acceptance_max_pct", sweep_path),
                          25) / 100
        for kind in ("cold", "cached"):
            decode.append((f"sweep_{r['tier']}_decode_{kind}", 512, acc,
                           _num(r, f"decode_{kind}_median", sweep_path), 0.15, True))
    for i, r in enumerate(log):
        prompt, cached = int(_num(r, "prompt_tokens", log_path)), int(_num(r, "cached_tokens", log_path))
        prefill.append((f"log_{i + 1}_prefill", prompt, cached, _num(r, "prefill_s", log_path), LOG_TOL, True))
        rate = _num(r, "decode_tok_s", log_path)
        decode.append((f"log_{i + 1}_decode", int(_num(r, "output_tokens", log_path)),
                       np.array([_num(r, "acceptance", log_path)]), rate, LOG_TOL, rate != LOG_OUTLIER_DECODE))
    bench_acc = np.array([0.885])  # the log's requests decoding at the bench's rate had 88-89% acceptance
    decode.append(("bench_decode", 512, bench_acc, _value(main, "bench_decode", main_path), 0.15, False))

    def span(quantity: str) -> tuple[float, float]:
        text = next(r["value"] for r in main if r["quantity"] == quantity)
        lo, hi = (float(x) / 100 for x in text.split("-"))
        return lo, hi

    hits = [_num(r, "hit_rate", log_path) for r in log]
    offload = [_num(r, "pcie_share", log_path) for r in log]
    paged = next(r for r in reserve if float(r["peer_reserve_mib"]) == 600)
    lo, hi = (float(x) for x in str(paged["decode_tok_s_values"]).split("-"))
    full = [(f"reserve_{int(float(r['peer_reserve_mib']))}_decode", float(r["peer_reserve_mib"]),
             min(float(x) for x in str(r["decode_tok_s_values"]).split(";")))
            for r in reserve if float(r["peer_reserve_mib"]) != 600]
    return BasaltTargets(prefill, decode, float(np.median(hits)), float(np.median(offload)), span(
        "expert_hit_rate_range"), span("pcie_share_range"), (lo + hi) / 2, full)


def _loss(errors: list[float]) -> float:
    return float(sum(e ** 4 for e in errors))


@dataclass
class BasaltFit:
    parameters: dict[str, float]
    rows: list[dict] = field(default_factory=list)


PREFILL_FREE = (("prefill.token_s", 8e-5, "s", "GPU time per prompt token"),
                ("prefill.stream_gbps", 14.0, "GB/s", "rate experts stream to the primary during prefill"),
                ("prefill.kv_spill_token_s", 4e-5, "s", "extra time per prompt token beyond kv_resident_tokens"),
                ("prefill.fixed_s", 0.06, "s", "set-up time per prefill"))


def fit_basalt(three_gpu: str, two_gpu: str, tables: str, requests: int = 300, seed: int = 0, log=None) -> BasaltFit:
    from scipy.optimize import minimize, minimize_scalar

    say = log or (lambda _msg: None)
    t = basalt_targets(tables)
    params: dict[str, float] = {}
    rows: list[dict] = []

    def engine(extra: dict[str, float], path: str = three_gpu):
        sets = [f"{k}={v:.6g}" for k, v in {**params, **extra}.items()]
        scn, _ = load_scenario(path, sets)
        return setup_engine(scn, "basalt_box")

    # 1. prefill
    prompts = np.array([p[1] for p in t.prefill])
    cached = np.array([p[2] for p in t.prefill])
    measured = np.array([p[3] for p in t.prefill])
    tol = np.array([p[4] for p in t.prefill])

    def prefill_at(x: np.ndarray) -> np.ndarray:
        values = {ENGINE + k: float(v) for (k, *_), v in zip(PREFILL_FREE, np.exp(x), strict=True)}
        return prefill_seconds(engine(values), prompts, cached)

    res = minimize(lambda x: _loss(list(np.log(prefill_at(x) / measured) / tol)),
                   np.log([f[1] for f in PREFILL_FREE]), method="Nelder-Mead",
                   options={"maxfev": 800, "xatol": 1e-5, "fatol": 1e-9})
    params |= {ENGINE + k: float(f"{v:.4g}") for (k, *_), v in zip(PREFILL_FREE, np.exp(res.x), strict=True)}
    sim = prefill_seconds(engine({}), prompts, cached)
    rows += [_row(name, n / s_meas if n > c else s_meas, n / s if n > c else s, tol_, "rate", fit,
                  "prefill tok/s" if n > c else "prefill s") for (name, n, c, s_meas, tol_, fit), s
             in zip(t.prefill, sim, strict=True)]
    say(f"prefill: {params}")

    # 2. routing (hit rate and off-primary share do not depend on step costs)
    rng_seed = seed

    def routing_obs(x: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray]:
        eng = engine({ROUTING + "exponent": x[0], ROUTING + "exponent_spread": math.exp(x[1])})
        d = decode_many(eng, np.full(requests, 1000), np.full(requests, 0.72), np.random.default_rng(rng_seed))
        hit = d["hits"] / d["lookups"]
        off = (d["peer_experts"] + d["cpu_experts"] + d["pcie_reads"]) / d["routed"]
        return float(np.median(hit)), float(np.median(off)), hit, off

    def routing_loss(x: np.ndarray) -> float:
        hit, off, _, _ = routing_obs(x)
        return _loss([(hit - t.hit_median) / 0.01, math.log(off / t.offload_median) / 0.3])

    res = minimize(routing_loss, np.array([1.3, math.log(0.1)]), method="Nelder-Mead",
                   options={"maxfev": 80, "xatol": 1e-3, "fatol": 1e-6})
    params[ROUTING + "exponent"] = float(f"{res.x[0]:.4g}")
    params[ROUTING + "exponent_spread"] = float(f"{math.exp(res.x[1]):.4g}")
    hit, off, hits, offs = routing_obs(np.array([params[ROUTING + "exponent"],
                                                 math.log(params[ROUTING + "exponent_spread"])]))
    rows += [_row("log_hit_rate_median", t.hit_median, hit, 0.01, "share", True, "fraction"),
             _row("log_offload_share_median", t.offload_median, off, 0.3, "rate", True, "fraction"),
             _row("hit_rate_p5", t.hit_range[0], float(np.percentile(hits, 5)), 0.01, "share", False,
                  "fraction; measured: low end of the range over real traffic"),
             _row("offload_share_p95", t.offload_range[1], float(np.percentile(offs, 95)), 0.5, "rate", False,
                  "fraction; measured: high end of the range over real traffic")]
    say(f"routing: exponent {params[ROUTING + 'exponent']}, spread {params[ROUTING + 'exponent_spread']}")

    # 3. decode step time
    def decode_obs(dense_s: float) -> list[float]:
        eng = engine({ENGINE + "step.dense_s": dense_s})
        out = []
        for k, (_, tokens, acc, _, _, _) in enumerate(t.decode):
            n = max(requests // 10, acc.size)
            a = np.resize(acc, n)
            d = decode_many(eng, np.full(n, tokens), a, np.random.default_rng([seed, k]))
            out.append(float(np.median(d["output_tokens"] / d["decode_s"])))
        return out

    def decode_loss(log_dense: float) -> float:
        sim_rates = decode_obs(math.exp(log_dense))
        return _loss([math.log(s / m) / tol_ for s, (_, _, _, m, tol_, fit) in zip(sim_rates, t.decode, strict=True)
                      if fit])

    res1 = minimize_scalar(decode_loss, bounds=(math.log(1e-3), math.log(0.05)), method="bounded",
                           options={"xatol": 1e-3})
    params[ENGINE + "step.dense_s"] = float(f"{math.exp(res1.x):.4g}")
    sim_rates = decode_obs(params[ENGINE + "step.dense_s"])
    rows += [_row(name, m, s, tol_, "rate", fit, f"decode tok/s at acceptance {acc.min():.2f}-{acc.max():.2f}")
             for s, (name, _, acc, m, tol_, fit) in zip(sim_rates, t.decode, strict=True)]
    say(f"decode: dense_s {params[ENGINE + 'step.dense_s']}")

    # 4. driver paging on the 2-GPU setup (peer-reserve 600 oversubscribes the 5080)
    def two_gpu_decode(reserve: float, gbps: float) -> float:
        eng = engine({ENGINE + "peers.gpu1.paging_gbps": gbps, ENGINE + "peers.gpu1.reserve_mib": reserve}, two_gpu)
        n = max(requests // 5, 10)
        d = decode_many(eng, np.full(n, 200), np.full(n, np.nan), np.random.default_rng([seed, 99]))
        return float(np.median(d["output_tokens"] / d["decode_s"]))

    res1 = minimize_scalar(lambda g: abs(math.log(two_gpu_decode(600, math.exp(g)) / t.paged_decode)),
                           bounds=(math.log(0.05), math.log(50.0)), method="bounded", options={"xatol": 1e-3})
    params[ENGINE + "peers.gpu1.paging_gbps"] = float(f"{math.exp(res1.x):.4g}")
    gbps = params[ENGINE + "peers.gpu1.paging_gbps"]
    rows.append(_row("reserve_600_decode", t.paged_decode, two_gpu_decode(600, gbps), 0.25, "rate", True,
                     "decode tok/s, 2 GPUs, vision encoder on the peer (measured 35-44)"))
    for name, reserve, lowest in t.full_speed:
        rows.append(_row(name, lowest, two_gpu_decode(reserve, gbps), 0.25, "rate", False,
                         "decode tok/s, 2 GPUs: full speed (measured: the lowest of its runs)"))
    say(f"paging: {gbps} GB/s")
    return BasaltFit(params, rows)


def _row(name: str, measured: float, simulated: float, tolerance: float, kind: str, fitted: bool, unit: str) -> dict:
    return {"target": name, "measured": round(float(measured), 4), "simulated": round(float(simulated), 4),
            "tolerance": tolerance, "kind": kind, "fitted": fitted, "unit": unit}


UNITS = {"token_s": "s", "stream_gbps": "GB/s", "kv_spill_token_s": "s", "fixed_s": "s", "exponent": "1",
         "exponent_spread": "1", "dense_s": "s", "paging_gbps": "GB/s"}


def basalt_calibration_yaml(fit: BasaltFit, command: str) -> str:
    header = ["# Basalt multi-GPU calibration written by `sim fit-basalt`; do not edit by hand.",
              "# Reproduce from the project root with:", f"#   {command}",
              "# Targets: calibration/basalt_3gpu.csv, basalt_context_sweep.csv, basalt_serve_requests.csv (the engine",
              "# log), basalt_peer_reserve.csv (provenance in each header: source write-up 003_f5bc10ef0389416c.txt).",
              "# Held values (peer expert_s and latency_s, the architecture, the prefill order) are in the scenario",
              "# files with their reasons."]
    body = {"kind": "moe", "parameters": fit.parameters,
            "units": {k: UNITS.get(k.rsplit(".", 1)[1], "1") for k in fit.parameters},
            "targets": fit.rows}
    return "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)
