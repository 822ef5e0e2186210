"""``sim fit-offload``: the llama.cpp engine's cost parameters fitted to public offload sweeps.

The table (calibration/offload_public.csv, a verbatim copy of the public measurements with their sources) gives,
per row, a machine, a model, llama.cpp's placement flags and what llama-bench (or llama-sweep-bench) measured:
prompt (pp) and generation (tg) tok/s at a context depth. calibration/offload_setups.yaml says what each setup is
in sim's terms (catalog GPU and host, model file and quant, the rules its overrides stand for, what it assumes)
and its role, chosen before any fit: ``fit`` rows train, ``check`` rows (whole setups, and a part of the training
setups' own table) are kept out and reported, ``excluded`` ones cannot be expressed (the file says why).

One set of parameters (sim.llamacpp.params), shared by every setup, minimises the robust (soft-L1) sum of squared
log errors ``log(simulated / measured)`` of every training observation, each counting once (so the setup measured
most, BV-3070Ti, weighs most: weighting each setup equally let the least consistent one decide);
nothing is fitted per setup or per row.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError, SimulationError
from sim.llamacpp.params import ASSUMED, DEFAULTS, UNITS, CostParams

# what the fit moves (the rest: DEFAULTS, ASSUMED says why), with bounds
FITTED: dict[str, tuple[float, float]] = {
    "gpu_compute_efficiency": (0.02, 1.0),
    "cpu_memory_efficiency": (0.1, 1.0),
    "cpu_gflops_per_core": (1.0, 2000.0),
    "ik_cpu_gflops_per_core": (1.0, 2000.0),
    "split_s": (0.0, 2e-3),
    "token_s": (0.0, 0.05),
    "gpu_layer_s": (0.0, 1e-3),
    "cpu_layer_s": (0.0, 1e-3),
    "link_share": (0.05, 1.0),
    "spill_link_share": (0.005, 1.0),
    "windows_reserved_gib": (0.0, 3.0),
}
NOT_FITTING_PENALTY = 1.5  # log error of a run the model says cannot load (it ran): about a factor of 4.5


@dataclass
class Observation:
    """One measured rate: its row, setup, source, role, test (pp/tg), lengths and depth, measured tok/s, and the
    scenario and settings it runs with."""

    row_id: str
    setup: str
    source: str
    role: str  # fit | check
    test: str  # pp | tg
    tokens: int
    depth: int
    measured: float
    scenario: Scenario
    settings: LlamaCpp
    grade: str
    label: str = ""

    @property
    def key(self) -> str:
        return f"{self.row_id}.{self.test}"


@dataclass
class Table:
    observations: list[Observation]
    excluded: dict[str, str] = field(default_factory=dict)  # setup or row -> why


def _int(value: Any) -> int | None:
    """The leading integer of a cell (``"10 (placement label moe10)"`` -> 10), None when blank or not a number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    m = re.match(r"\s*(-?\d+)", str(value))
    return int(m.group(1)) if m else None


def _float(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _machine(setup: str, spec: dict, root: str) -> dict:
    """The scenario dict of a setup's machine."""
    m = spec["machine"]
    host: dict[str, Any] = {"type": m["host"]}
    for key in ("mt_s", "channels", "cores", "os"):
        if key in m:
            host[key] = m[key]
    gpus = {f"gpu{i}": {"type": m["gpu"], "slot_gen": m.get("slot_gen", 4), "slot_lanes": m.get("slot_lanes", 16),
                        "reserved_gib": m.get("reserved_gib", 0.0)} for i in range(m.get("gpus", 1))}
    return {"host": host, "gpus": gpus}


def _scenario(setup: str, spec: dict, model: dict, root: str, source: str) -> Scenario:
    from sim.config.defaults import fill_defaults
    from sim.config.load import validate

    path = os.path.join(root, "calibration", model["file"])
    entry: dict[str, Any] = {"file": path}
    if model.get("quant"):
        entry["quant"] = model["quant"]
    if model.get("file_gib"):
        entry["weights_gib"] = model["file_gib"]
    machine = _machine(setup, spec, root) | {"engine": {"model": "m", "gpu": "gpu0", "llamacpp": {}}}
    raw = {"name": f"offload-{setup}", "models": {"m": entry}, "machines": {"m": machine}}
    fill_defaults(raw, source)
    return validate(raw, source)


def _settings(row: dict, base: dict) -> dict:
    """llama.cpp settings of a table row: its columns, under the setup's and source's settings."""
    s: dict[str, Any] = {}
    ngl = _int(row.get("ngl"))
    if ngl is not None:
        s["n_gpu_layers"] = 0 if ngl < 0 else ngl  # -1 as logged: the CPU-only runs (README of the table)
    ncmoe = str(row.get("n_cpu_moe") or "")
    if ncmoe.strip().lower() == "all":
        s["cpu_moe"] = True
    elif _int(row.get("n_cpu_moe")) is not None:
        s["n_cpu_moe"] = _int(row.get("n_cpu_moe"))
    for col, key in (("ubatch", "ubatch_size"), ("batch", "batch_size")):
        v = _int(row.get(col))
        if v:
            s[key] = v
    threads = _int(row.get("cpu_threads_used"))
    if threads:
        s["threads"] = threads
    kv = str(row.get("kv_type") or "")
    if "/" in kv:
        k, v = kv.split("/", 1)
        s["cache_type_k"], s["cache_type_v"] = k.strip(), v.strip()
    elif kv.strip() in ("f16", "q8_0", "q4_0", "bf16", "f32"):
        s["cache_type_k"] = s["cache_type_v"] = kv.strip()
    fa = str(row.get("flash_attn") or "").strip().lower()
    if fa in ("on", "1", "true"):
        s["flash_attn"] = True
    elif fa in ("0", "off", "false"):
        s["flash_attn"] = False
    if str(row.get("engine", "")).startswith("ik_llama"):
        s["build"] = "ik_llama.cpp"
    return s | base


def read_table(root: str) -> Table:
    """The observations of calibration/offload_public.csv as calibration/offload_setups.yaml maps them."""
    import pandas as pd

    from sim.config.yaml_io import read_yaml

    table_path = os.path.join(root, "calibration", "offload_public.csv")
    setups_path = os.path.join(root, "calibration", "offload_setups.yaml")
    setups = read_yaml(setups_path)["setups"]
    df = pd.read_csv(table_path, dtype=str, keep_default_na=False)
    out = Table([])
    scenarios: dict[tuple[str, str], Scenario] = {}
    for row in df.to_dict("records"):
        row = {k: (v if v != "" else None) for k, v in row.items()}
        setup = row["setup_id"]
        spec = setups.get(setup)
        if spec is None:
            raise ScenarioError(setups_path, f"setups.{setup}", "missing: every setup of the table needs an entry")
        if spec["role"] == "excluded":
            out.excluded[setup] = spec["why"]
            continue
        rid = row["row_id"]
        row_settings = dict((spec.get("rows") or {}).get(rid) or {})
        lengths = {k: row_settings.pop(k) for k in ("n_prompt", "n_gen") if k in row_settings}
        if "excluded" in row_settings:
            out.excluded[rid] = row_settings["excluded"]
            continue
        model_key = f"{row['model']}|{row['quant']}"
        model = (spec.get("models") or {}).get(model_key)
        if model is None:
            out.excluded[rid] = f"model {model_key!r} not mapped (mixed or unstated quant)"
            continue
        if not os.path.exists(os.path.join(root, "calibration", model["file"])):
            out.excluded[rid] = f"{model['file']}: no such model file"
            continue
        key = (setup, model_key)
        if key not in scenarios:
            scenarios[key] = _scenario(setup, spec, model, root, setups_path)
        source = (spec.get("sources") or {}).get(row["source_id"]) or {}
        base = dict(source.get("settings") or {}) | row_settings
        role = source.get("role", spec["role"])
        settings = _settings(row, base)
        if "sweep-bench" in str(row.get("test_name")) and _int(row.get("ctx_tokens")):
            settings["ctx_size"] = _int(row.get("ctx_tokens"))
        try:
            lc = LlamaCpp(**settings)
        except Exception as exc:  # noqa: BLE001 - a mapping mistake in the setups file, said in one line
            raise ScenarioError(setups_path, f"setups.{setup}", f"row {rid}: settings {settings}: {exc}") from None
        depth = _int(row.get("n_depth_kv")) or 0
        for test, col, n_col in (("pp", "pp_tok_s", "n_prompt"), ("tg", "tg_tok_s", "n_gen")):
            measured, tokens = _float(row.get(col)), _int(row.get(n_col)) or lengths.get(n_col)
            if measured is None or not tokens:
                continue
            out.observations.append(Observation(rid, setup, row["source_id"], role, test, tokens, depth, measured,
                                                scenarios[key], lc, row.get("grade") or "", row.get("test_name") or ""))
    return out


def predict(o: Observation, params: CostParams) -> float:
    """The simulated tok/s of an observation (nan: the engine cannot load it)."""
    from sim.llamacpp.bench import bench_setup

    settings = o.settings
    ctx = o.tokens + o.depth  # llama-bench's n_prompt + n_gen + n_depth (a sweep-bench's -c when set is larger)
    try:
        st = bench_setup(o.scenario, "m", settings, ctx, params)
    except SimulationError:
        return float("nan")
    e, s = st.engine, st.settings
    if o.test == "pp":
        seconds = e.prompt_s(o.tokens, o.depth, min(s.ubatch_size, s.batch_size))
    else:
        seconds = e.generate_s(o.tokens, o.depth)
    return o.tokens / seconds


def log_errors(obs: list[Observation], params: CostParams) -> np.ndarray:
    out = np.empty(len(obs))
    for i, o in enumerate(obs):
        p = predict(o, params)
        out[i] = math.log(p / o.measured) if p > 0 and math.isfinite(p) else NOT_FITTING_PENALTY
    return out


@dataclass
class FitResult:
    params: CostParams
    fitted: list[str]
    rows: list[dict]  # one per observation: its keys, measured, simulated, error, role
    cost: float
    evaluations: int

    def bands(self) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """90% bands of measured / simulated per test: over the rows kept out of the fit, and within one setup (each
        setup's log ratios less their median: what is left once a user's own run anchors the prediction)."""
        band, within = {}, {}
        for test in ("tg", "pp"):
            rows = [r for r in self.rows if r["test"] == test and math.isfinite(r["error"])]
            check = np.log([r["measured"] / r["simulated"] for r in rows if r["role"] == "check"])
            band[test] = [float(f"{math.exp(q):.4g}") for q in np.percentile(check, [5, 95])] if check.size else \
                [float("nan")] * 2
            centred = []
            for setup in {r["setup"] for r in rows}:
                logs = np.log([r["measured"] / r["simulated"] for r in rows if r["setup"] == setup])
                centred += list(logs - np.median(logs))
            within[test] = [float(f"{math.exp(q):.4g}") for q in np.percentile(centred, [5, 95])]
        return band, within

    def summary(self) -> dict[str, dict[str, float]]:
        """Median absolute relative error and count, per role and test."""
        out: dict[str, dict[str, float]] = {}
        trained = {r["setup"] for r in self.rows if r["role"] == "fit"}
        groups = {"fit": lambda r: r["role"] == "fit",
                  "check_setups": lambda r: r["role"] == "check" and r["setup"] not in trained,
                  "check_rows": lambda r: r["role"] == "check" and r["setup"] in trained}
        for role, chosen in groups.items():
            for test in ("pp", "tg"):
                errs = [abs(r["error"]) for r in self.rows if chosen(r) and r["test"] == test
                        and math.isfinite(r["error"])]
                fails = sum(1 for r in self.rows if chosen(r) and r["test"] == test
                            and not math.isfinite(r["error"]))
                out[f"{role}.{test}"] = {"median_abs_error": float(np.median(errs)) if errs else float("nan"),
                                         "observations": float(len(errs)), "not_loading": float(fails)}
        return out


def evaluate(obs: list[Observation], params: CostParams) -> list[dict]:
    rows = []
    for o in obs:
        sim = predict(o, params)
        rows.append({"row_id": o.row_id, "setup": o.setup, "source": o.source, "role": o.role, "test": o.test,
                     "tokens": o.tokens, "depth": o.depth, "measured": o.measured, "simulated": sim,
                     "error": sim / o.measured - 1 if math.isfinite(sim) else float("nan"), "grade": o.grade,
                     "settings": _flags(o.settings)})
    return rows


def _flags(s: LlamaCpp) -> str:
    parts = [f"ngl {s.n_gpu_layers}"]
    if s.n_cpu_moe:
        parts.append(f"ncmoe {s.n_cpu_moe}")
    if s.cpu_moe:
        parts.append("cmoe")
    if s.override_tensor:
        parts.append(f"ot x{len(s.override_tensor)}")
    parts += [f"ub {s.ubatch_size}", f"t {s.threads}" if s.threads else "", s.build if s.build != "llama.cpp" else ""]
    return " ".join(p for p in parts if p)


def fit(table: Table, start: CostParams | None = None, names: list[str] | None = None,
        max_evaluations: int = 400, starts: int = 3, seed: int = 0) -> FitResult:
    """The parameters ``names`` (default: FITTED) minimising the soft-L1 loss of the training observations' log
    errors. The loss has several valleys (parameters the sweeps barely separate), so the search starts from
    ``start`` (default: DEFAULTS) and from ``starts - 1`` others, each value times ``exp(N(0, 0.4))`` (seeded)
    within its bounds; the lowest training loss wins. ``max_evaluations`` bounds each search."""
    start = start or CostParams.of()
    names = names or list(FITTED)
    rng = np.random.default_rng(seed)
    best: tuple[float, CostParams, int] | None = None
    total = 0
    for i in range(max(starts, 1)):
        point = start
        if i:
            point = start.with_values(**{n: float(np.clip(getattr(start, n) * math.exp(rng.normal(0.0, 0.4)),
                                                          FITTED[n][0] + (FITTED[n][1] - FITTED[n][0]) * 1e-3,
                                                          FITTED[n][1] * 0.99)) for n in names})
        cost, params, calls = _search(table, point, names, max_evaluations)
        total += calls
        if best is None or cost < best[0]:
            best = (cost, params, i)
    assert best is not None
    return FitResult(best[1], names, evaluate(table.observations, best[1]), best[0], total)


def _search(table: Table, start: CostParams, names: list[str], max_evaluations: int) -> tuple[float, CostParams, int]:
    """One robust least-squares search from ``start``: (its loss, the parameters, evaluations)."""
    from scipy.optimize import least_squares

    train = [o for o in table.observations if o.role == "fit"]
    x0 = np.array([getattr(start, n) for n in names])
    lo = np.array([FITTED[n][0] for n in names])
    hi = np.array([FITTED[n][1] for n in names])
    x0 = np.clip(x0, lo + 1e-12, hi - 1e-12)
    scale = np.maximum(np.abs(x0), (hi - lo) * 1e-3)
    calls = [0]
    def residuals(z: np.ndarray) -> np.ndarray:
        calls[0] += 1
        x = z * scale
        return log_errors(train, start.with_values(**dict(zip(names, map(float, x), strict=True))))

    # scipy's max_nfev leaves out the Jacobian's finite differences (len(names) evaluations each)
    res = least_squares(residuals, x0 / scale, bounds=(lo / scale, hi / scale), loss="soft_l1", f_scale=0.15,
                        max_nfev=max(max_evaluations // (len(names) + 1), 2), diff_step=1e-3)
    return float(res.cost), start.with_values(**dict(zip(names, map(float, res.x * scale), strict=True))), calls[0]


def result_yaml(result: FitResult, table: Table, command: str) -> dict:
    """What calibration/llamacpp.yaml holds: every parameter with its unit and whether it was fitted, the summary,
    what was excluded."""
    p = result.params.as_dict()
    return {
        "fitted_by": command,
        "data": "calibration/offload_public.csv (public sweeps, every row with its source_url), mapped by "
                "calibration/offload_setups.yaml",
        "parameters": {k: {"value": float(f"{v:.6g}"), "unit": UNITS[k],
                           "fitted": k in result.fitted, **({"why_not_fitted": ASSUMED[k]} if k in ASSUMED else {})}
                       for k, v in p.items()},
        "summary": {k: {kk: float(f"{vv:.4g}") for kk, vv in v.items()} for k, v in result.summary().items()},
        "band": result.bands()[0],
        "band_within": result.bands()[1],
        "excluded": dict(sorted(table.excluded.items())),
    }


def report_markdown(result: FitResult, table: Table) -> str:
    """Every observation's residual, the summary per role and test, and the excluded rows."""
    lines = ["# llama.cpp offload fit: residuals", "",
             "`sim fit-offload` (sim/calibration/offload_fit.py). error = simulated / measured - 1. Roles: fit rows "
             "trained the parameters; check_setups are whole setups kept out of the fit, check_rows the rows kept "
             "out of a training setup's own table (BV-3070Ti's refine and A/B sources).", "",
             "| role | test | observations | median abs error | not loading |", "|---|---|---|---|---|"]
    for key, v in result.summary().items():
        role, test = key.rsplit(".", 1)
        lines.append(f"| {role} | {test} | {v['observations']:.0f} | {v['median_abs_error']:.1%} | "
                     f"{v['not_loading']:.0f} |")
    lines += ["", "## Parameters", "", "| parameter | value | unit | fitted |", "|---|---|---|---|"]
    for k, v in result.params.as_dict().items():
        fitted = "yes" if k in result.fitted else "no: " + ASSUMED.get(k, "")
        lines.append(f"| {k} | {v:.4g} | {UNITS[k]} | {fitted} |")
    lines += ["", "## Observations", "",
              "| row | setup | source | role | test | tokens | depth | settings | measured | simulated | error |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.rows:
        err = f"{r['error']:+.1%}" if math.isfinite(r["error"]) else "does not load"
        lines.append(f"| {r['row_id']} | {r['setup']} | {r['source']} | {r['role']} | {r['test']} | {r['tokens']} | "
                     f"{r['depth']} | {r['settings']} | {r['measured']:.4g} | {r['simulated']:.4g} | {err} |")
    lines += ["", "## Excluded", ""] + [f"- {k}: {v}" for k, v in sorted(table.excluded.items())]
    return "\n".join(lines) + "\n"


__all__ = ["DEFAULTS", "FITTED", "Observation", "Table", "read_table", "predict", "fit", "evaluate", "result_yaml",
           "report_markdown"]
