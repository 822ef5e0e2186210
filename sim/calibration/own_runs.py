"""A user's own llama-bench runs, as :mod:`sim.formats.llama_bench` read them (any output format): set each one's
flags on the scenario's llama.cpp engine, and fit the few cost parameters they say something about.

The fit is the public one (:mod:`sim.calibration.offload_fit`) moved by the user's runs: it minimises the squared
log errors of the runs plus, per parameter, ``(log(value / default) / PRIOR_LOG_SD)^2``, so two runs move the
parameters they inform a little and leave the others at the public fit; many runs move them as far as they need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError, SimulationError
from sim.formats.llama_bench import BenchRuns
from sim.llamacpp.bench import bench_setup
from sim.llamacpp.params import CostParams

MAX_RUNS = 64  # distinct tests fitted at most (each is simulated once per residual evaluation of the fit)
BOUND_SHARE = 0.01  # a fitted value within 1% of a bound of its parameter is reported as at the bound
MAX_EVALUATIONS = 60  # evaluations of the fit's residuals (each simulates every run once)
PRIOR_LOG_SD = 0.5  # how far (in log) a parameter may move from the public fit before the prior holds it back


@dataclass(frozen=True)
class OwnRun:
    """One measured test with the flags it ran with."""

    line: int
    test: str  # pp | tg
    tokens: int
    depth: int
    measured: float
    settings: LlamaCpp


def own_runs(runs: BenchRuns, base: LlamaCpp) -> tuple[list[OwnRun], list[str]]:
    """Each pp or tg record on ``base`` with the record's own flags; and one note per record left out."""
    out, notes = [], []
    for r in runs.records:
        if r.n_prompt and r.n_gen:
            notes.append(f"line {r.line}: {r.test}: a pp+tg test (left out; pp and tg tests are fitted)")
            continue
        if not math.isfinite(r.avg_ts) or r.avg_ts <= 0:
            notes.append(f"line {r.line}: {r.test}: no rate")
            continue
        update: dict = {}
        for field_name, key in (("n_gpu_layers", "n_gpu_layers"), ("n_cpu_moe", "n_cpu_moe"),
                                ("n_ubatch", "ubatch_size"), ("n_batch", "batch_size"), ("n_threads", "threads"),
                                ("type_k", "cache_type_k"), ("type_v", "cache_type_v")):
            value = getattr(r, field_name)
            if value is not None:
                update[key] = max(value, 0) if isinstance(value, int) else value
        if r.flash_attn is not None:
            update["flash_attn"] = r.flash_attn
        if r.use_mmap is not None:
            update["mmap"] = r.use_mmap
        if r.tensor_buft_overrides and r.tensor_buft_overrides != "none":
            update["override_tensor"] = [x for x in r.tensor_buft_overrides.split(";") if x]
        try:
            settings = LlamaCpp(**(base.model_dump() | update))
        except ValidationError as exc:
            first = exc.errors()[0]
            notes.append(f"line {r.line}: {r.test}: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}")
            continue
        test, tokens = ("pp", r.n_prompt) if r.n_prompt else ("tg", r.n_gen)
        out.append(OwnRun(r.line, test, tokens, r.n_depth, r.avg_ts, settings))
    return out, notes


def _label(run: OwnRun) -> str:
    """A run as llama-bench names its test: ``pp512``, ``tg128 @ d4096``."""
    return f"{run.test}{run.tokens}" + (f" @ d{run.depth}" if run.depth else "")


def merge_repeats(runs: list[OwnRun]) -> tuple[list[OwnRun], list[str]]:
    """The runs with repeated identical tests (same test, tokens, depth and settings) made one, at the first one's
    line with their mean rate (tok/s): a repetition is one observation, else 300 copies of a row outweigh the prior
    and every other run; and a note for each test so merged."""
    groups: dict[tuple, list[OwnRun]] = {}
    for r in runs:
        key = (r.test, r.tokens, r.depth, r.settings.model_dump_json() if r.settings is not None else None)
        groups.setdefault(key, []).append(r)
    out, notes = [], []
    for same in groups.values():
        first = same[0]
        if len(same) > 1:
            mean = sum(r.measured for r in same) / len(same)
            first = OwnRun(first.line, first.test, first.tokens, first.depth, mean, first.settings)
            notes.append(f"line {first.line}: {_label(first)}: {len(same)} identical tests merged into one "
                         f"(their mean rate, {mean:.2f} tok/s)")
        out.append(first)
    return out, notes


def check_run_count(runs: list[OwnRun], source: str) -> None:
    """A one-line ScenarioError when there are more than :data:`MAX_RUNS` distinct runs to fit (the fit's time grows
    with their number)."""
    if len(runs) > MAX_RUNS:
        raise ScenarioError(source, "", f"{len(runs):,} distinct pp and tg tests: expected at most {MAX_RUNS} in "
                            "one fit (split the file into several and fit each)")


def at_bounds(params: CostParams, names: list[str]) -> list[str]:
    """One warning per fitted parameter whose value ended at (or within :data:`BOUND_SHARE` of) a bound of its
    range: the runs pushed it as far as it may go, so it absorbs what the model does not explain."""
    from sim.llamacpp.params import bounds

    got, out = params.lookup(), []
    for n in names:
        lo, hi = bounds(n)
        side = "upper" if got[n] >= hi * (1 - BOUND_SHARE) else "lower" if got[n] <= lo * (1 + BOUND_SHARE) else ""
        if side:
            out.append(f"{n} ended at {got[n]:.4g}, at its {side} bound ({lo:.4g} to {hi:.4g}): the runs push it "
                       "further than it may go; check them (and the scenario's machine)")
    return out


def simulate(scn: Scenario, machine: str, run: OwnRun, params: CostParams) -> float:
    """The simulated tok/s of one run (nan: it does not load)."""
    try:
        st = bench_setup(scn, machine, run.settings, run.tokens + run.depth, params)
    except SimulationError:
        return float("nan")
    e, s = st.engine, run.settings
    seconds = e.prompt_s(run.tokens, run.depth, min(s.ubatch_size, s.batch_size)) if run.test == "pp" else \
        e.generate_s(run.tokens, run.depth)
    return run.tokens / seconds


def _own_names(st, has_pp: bool) -> list[str]:
    """The dotted parameters a user's runs move: the engine's backend's memory share (and its prompt path's
    arithmetic share and the link share when prompts were run), the CPU's memory share, the hand-over cost."""
    e = st.engine
    names = ["cpu_memory_efficiency", "split_s"]
    gpu = e.hw.main_gpu
    if gpu is not None:
        d = e.hw.devices[gpu]
        names.insert(0, f"gpu_memory_efficiency.{d.backend}")
        if has_pp:
            family = "matrix_efficiency" if not d.path.endswith("_vector") else "vector_efficiency"
            names += [f"{family}.{d.path}", f"link_share.{e.hw.os}"]
    elif has_pp:
        names.append(f"cpu_flops_efficiency.{e.hw.devices['CPU'].isa}" if e.hw.devices["CPU"].isa else
                     "cpu_flops_efficiency")
    return names


def loadable(scn: Scenario, machine: str, runs: list[OwnRun], params: CostParams
             ) -> tuple[list[OwnRun], list[str]]:
    """The runs that load on the scenario's machine at ``params``, and a note for each that does not (a test longer
    than the memory holds, a placement over the card): a run the simulator cannot load says nothing about the
    parameters, and fitted it would only pull them by the capped error of a failure."""
    kept, notes = [], []
    for r in runs:
        if math.isfinite(simulate(scn, machine, r, params)):
            kept.append(r)
        else:
            notes.append(f"line {r.line}: {_label(r)}: does not load on this machine in the simulator (left out)")
    return kept, notes


def fit_own(scn: Scenario, machine: str, runs: list[OwnRun], start: CostParams | None = None,
            max_evaluations: int = MAX_EVALUATIONS) -> tuple[CostParams, list[str]]:
    """The parameters the runs move (module docstring, :func:`_own_names`); and the names it fitted. At most
    ``max_evaluations`` evaluations of every run (the fit's cost: evaluations x runs simulated tests)."""
    from scipy.optimize import least_squares

    from sim.llamacpp.params import bounds

    engine = scn.machines[machine].engine
    assert engine is not None and engine.llamacpp is not None
    if start is None:
        st0 = bench_setup(scn, machine, runs[0].settings, runs[0].tokens + runs[0].depth)
        start = st0.engine.hw.params
    else:
        st0 = bench_setup(scn, machine, runs[0].settings, runs[0].tokens + runs[0].depth, start)
    names = _own_names(st0, any(r.test == "pp" for r in runs))
    lookup = start.lookup()
    x0 = np.log([max(lookup[n], 1e-9) for n in names])
    hi = np.log([bounds(n)[1] for n in names])

    def residuals(z: np.ndarray) -> np.ndarray:
        p = start.with_values(**{n: float(math.exp(v)) for n, v in zip(names, np.minimum(z, hi), strict=True)})
        errs = []
        for r in runs:
            sim = simulate(scn, machine, r, p)
            errs.append(math.log(sim / r.measured) if sim > 0 and math.isfinite(sim) else 1.5)
        return np.concatenate([errs, (z - x0) / PRIOR_LOG_SD])

    res = least_squares(residuals, x0, max_nfev=max_evaluations, diff_step=1e-3)
    values = {n: float(f"{math.exp(v):.6g}") for n, v in zip(names, np.minimum(res.x, hi), strict=True)}
    return start.with_values(**values), names
