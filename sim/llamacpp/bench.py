"""A llama-bench run: ``pp N`` processes an N-token prompt, ``tg N`` generates N tokens, each after ``d`` tokens of
context already in the KV cache (``-d``); the rate is tokens over that test's time, as llama-bench reports it
(its pp and tg). As llama-bench does, each test gets a context of ``n_prompt + n_gen + n_depth`` cells, so what
fits is decided per test; an engine whose ``ctx_size`` is set (a server's ``-c``) keeps that many cells if more."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import SimulationError
from sim.llamacpp.params import CostParams
from sim.llamacpp.setup import LlamaSetup, setup_llamacpp

MAX_EXACT_UBATCHES = 256  # a pp test of more ubatches sums its parts as its time is summed (first, last, rest)
BENCH_COLUMNS = ("machine", "test", "n_prompt", "n_gen", "n_depth", "tok_s", "seconds", "gpu_s", "cpu_s", "link_s",
                 "split_s", "fixed_s", "vram_gib", "ram_gib", "error")


@dataclass(frozen=True)
class BenchRow:
    """One test: its name (pp512, tg128, with ``@ d4096`` at a depth), lengths, rate (tok/s) and where its time
    went (s); or why it could not run."""

    machine: str
    test: str
    n_prompt: int
    n_gen: int
    n_depth: int
    tok_s: float
    seconds: float
    gpu_s: float
    cpu_s: float
    link_s: float
    split_s: float
    fixed_s: float
    vram_gib: float
    ram_gib: float
    error: str = ""

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in BENCH_COLUMNS}


def test_name(n_prompt: int, n_gen: int, n_depth: int) -> str:
    base = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
    return base + (f" @ d{n_depth}" if n_depth else "")


def run_test(setup: LlamaSetup, n_prompt: int, n_gen: int, n_depth: int) -> BenchRow:
    """One pp (``n_prompt`` > 0) or tg test on a loaded engine. Where a pp test's time went is the sum of its
    ubatches, each computed, up to :data:`MAX_EXACT_UBATCHES` of them; beyond, the closed form of its time (so a
    10M-token prompt in ubatches of one token costs no more than a short one)."""
    e, s = setup.engine, setup.settings
    ubatch = min(s.ubatch_size, s.batch_size)
    if n_prompt:
        e = setup.prompt
        seconds, tokens = e.prompt_s(n_prompt, n_depth, ubatch), n_prompt
        many = -(-n_prompt // ubatch) > MAX_EXACT_UBATCHES
        parts = [e.prompt_parts(n_prompt, n_depth, ubatch)] if many else \
            [e.ubatch(min(ubatch, n_prompt - done), n_depth + done) for done in range(0, n_prompt, ubatch)]
    else:
        seconds, tokens = e.generate_s(n_gen, n_depth), n_gen
        first, last = e.decode_step(1, n_depth), e.decode_step(1, n_depth + n_gen - 1)
        parts = [first, last] if n_gen > 1 else [first]
    keys = ("gpu_s", "cpu_s", "link_s", "split_s", "fixed_s")
    if n_prompt:
        sums = {k: sum(getattr(p, k) for p in parts) for k in keys}
    else:  # generate_s: tokens x the mean of the first and last step
        sums = {k: n_gen * sum(getattr(p, k) for p in parts) / len(parts) for k in keys}
    return BenchRow(setup.machine, test_name(n_prompt, n_gen, n_depth), n_prompt, n_gen if not n_prompt else 0,
                    n_depth, tokens / seconds if seconds > 0 else float("nan"), seconds, **sums,
                    vram_gib=setup.vram_gib(), ram_gib=setup.ram_gib())


def bench_setup(scn: Scenario, machine: str, settings: LlamaCpp, ctx: int, params: CostParams | None = None
                ) -> LlamaSetup:
    """The engine as llama-bench creates it for one test: a context of ``ctx`` cells, or the ``ctx_size`` the
    settings name when larger (a server's -c: its KV is allocated whatever the request)."""
    from sim.llamacpp.fit import resolve

    given = "ctx_size" in settings.model_fields_set
    settings, fitted = resolve(scn, machine, settings)  # -c 0, -ngl -1 and --fit as llama.cpp resolves them
    if given:
        ctx = max(ctx, settings.ctx_size)
    if fitted is not None:
        st = setup_llamacpp(scn, machine, settings.model_copy(update={"ctx_size": max(ctx, 1)}), params)
        st.notes.insert(0, fitted.summary())
        return st
    return setup_llamacpp(scn, machine, settings.model_copy(update={"ctx_size": max(ctx, 1)}), params)


def run_bench(scn: Scenario, machine: str | None = None, settings: LlamaCpp | None = None,
              params: CostParams | None = None, n_prompt: list[int] | None = None, n_gen: list[int] | None = None,
              n_depth: list[int] | None = None) -> list[BenchRow]:
    """Every test of the scenario's ``bench`` section (or the lists given), pp tests first, as llama-bench orders
    them. A test whose buffers do not fit is a row with its error, its numbers NaN."""
    b = scn.bench
    machine = machine or (b.machine if b is not None else None)
    assert machine is not None
    engine = scn.machines[machine].engine
    assert engine is not None and (settings or engine.llamacpp) is not None
    settings = settings or engine.llamacpp
    prompts = n_prompt if n_prompt is not None else (b.n_prompt if b else [512])
    gens = n_gen if n_gen is not None else (b.n_gen if b else [128])
    depths = n_depth if n_depth is not None else (b.n_depth if b else [0])
    tests = [(p, 0, d) for d in depths for p in prompts if p] + [(0, n, d) for d in depths for n in gens if n]
    rows = []
    for p, n, d in tests:
        try:
            st = bench_setup(scn, machine, settings, p + n + d, params)
        except SimulationError as exc:
            nan = float("nan")  # not run: no rate, time or memory (null in JSON, a blank cell in a table)
            rows.append(BenchRow(machine, test_name(p, n, d), p, n, d, nan, nan, nan, nan, nan, nan, nan, nan, nan,
                                 str(exc)))
            continue
        rows.append(run_test(st, p, n, d))
    return rows


def largest_setup(scn: Scenario) -> LlamaSetup | None:
    """The engine of the bench section's largest test (the most context cells), as ``sim run`` shows its memory;
    None when even that cannot load (its rows say why)."""
    b = scn.bench
    assert b is not None
    engine = scn.machines[b.machine].engine
    assert engine is not None and engine.llamacpp is not None
    ctx = max(b.n_prompt + b.n_gen) + max(b.n_depth)
    try:
        return bench_setup(scn, b.machine, engine.llamacpp, ctx)
    except SimulationError:
        return None
