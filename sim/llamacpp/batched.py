"""A ``llama-batched-bench`` run: ``B`` sequences, each a prompt of ``PP`` tokens then ``TG`` generated tokens, on
one engine (llama.cpp's tools/batched-bench).

For every ``(PP, TG, B)`` the tool needs ``N_KV = B x (PP + TG)`` cells (``PP + B x TG`` with ``-pps``, the prompt
shared) and skips a test that needs more than ``-c``. It then

- processes the prompts: the ``B x PP`` tokens, sequence after sequence, go to ``llama_decode`` in batches of
  ``-b`` tokens, and each batch is split into ubatches of at most ``-ub`` tokens taking an equal share of every
  sequence in it (llama.cpp's equal split). A ubatch reads the weights once for all its tokens, each sequence
  attends to its own cache (:meth:`~sim.llamacpp.costs.Engine.ubatch_ledger`). With ``-pps`` one prompt is
  processed and copied to the other sequences;
- generates: ``TG`` steps, each one token of every sequence: a batched decode step reads the weights once, the
  union of the experts the ``B`` tokens chose and each sequence's cache
  (:meth:`~sim.llamacpp.costs.Engine.decode_ledger`).

It prints ``T_PP``, ``S_PP = B x PP / T_PP`` (``PP / T_PP`` shared), ``T_TG``, ``S_TG = B x TG / T_TG``, ``T`` and
``S = N_KV / T``. So S_TG grows with B while the weights' reads dominate a step and flattens once the caches' reads
and the arithmetic take over; each sequence's share of it falls as PP (its cache) grows.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import SimulationError
from sim.llamacpp.ledger import Ledger
from sim.llamacpp.params import CostParams
from sim.llamacpp.setup import LlamaSetup, setup_llamacpp

BATCHED_COLUMNS = ("machine", "pp", "tg", "b", "n_kv", "t_pp_s", "s_pp_tok_s", "t_tg_s", "s_tg_tok_s", "t_s",
                   "s_tok_s", "vram_gib", "error")
NAN = float("nan")


@dataclass(frozen=True)
class BatchedRow:
    """One line of llama-batched-bench's table (seconds and tok/s); ``error`` when the engine cannot load (the
    numbers then nan)."""

    machine: str
    pp: int
    tg: int
    b: int
    n_kv: int
    t_pp_s: float
    s_pp_tok_s: float
    t_tg_s: float
    s_tg_tok_s: float
    t_s: float
    s_tok_s: float
    vram_gib: float
    error: str = ""

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in BATCHED_COLUMNS}


def n_kv_required(pp: int, tg: int, b: int, pp_shared: bool) -> int:
    """Cells a test needs: ``B x (PP + TG)``, or ``PP + B x TG`` with the prompt shared."""
    return pp + b * tg if pp_shared else b * (pp + tg)


def prompts_ledger(setup: LlamaSetup, pp: int, b: int) -> Ledger:
    """The prompts of ``b`` sequences of ``pp`` tokens each, in llama-batched-bench's batches and ubatches."""
    e, s = setup.engine, setup.settings
    n_batch = max(s.batch_size, 1)
    ubatch = max(min(s.ubatch_size, s.batch_size), 1)
    lg = Ledger()
    if pp >= n_batch or b == 1:  # every batch within one sequence: that sequence's prompt, b times over
        lg.extend(e.prompt_ledger(pp, 0.0, ubatch), float(b))
        return lg
    per_batch = n_batch // pp  # whole sequences per llama_decode call (the tool fills batches in order)
    full, rest = divmod(b, per_batch)
    for seqs, times in ((per_batch, full), (rest, 1)):
        if seqs > 0 and times > 0:  # each ubatch an equal share of every sequence in the call
            lg.extend(e.prompt_ledger(pp, 0.0, max(min(pp, ubatch // seqs), 1), seqs), float(times))
    return lg


def generation_ledger(setup: LlamaSetup, pp: int, tg: int, b: int) -> Ledger:
    """``tg`` decode steps of ``b`` sequences, each after its ``pp`` prompt tokens."""
    return setup.engine.generate_ledger(tg, float(pp), b)


def batched_setup(scn: Scenario, machine: str, settings: LlamaCpp, pl: list[int],
                  params: CostParams | None = None) -> LlamaSetup:
    """The engine llama-batched-bench creates: ``-c`` cells for up to ``max(pl)`` sequences."""
    return setup_llamacpp(scn, machine, settings.model_copy(update={"parallel": max(max(pl), 1)}), params)


def run_batched(scn: Scenario, machine: str, settings: LlamaCpp, pp: list[int], tg: list[int], pl: list[int],
                pp_shared: bool = False, params: CostParams | None = None) -> list[BatchedRow]:
    """Rows in llama-batched-bench's order (for pp, for tg, for pl); ``settings.ctx_size`` is ``-c`` (n_kv_max),
    ``batch_size`` ``-b``, ``ubatch_size`` ``-ub``; a test needing more than ``-c`` cells is skipped, as the tool
    does. When the engine cannot load, every test is a row with the reason."""
    n_kv_max = settings.ctx_size
    tests = [(p, t, b) for p in pp for t in tg for b in pl if n_kv_required(p, t, b, pp_shared) <= n_kv_max]
    try:
        st = batched_setup(scn, machine, settings, pl or [1], params)
    except SimulationError as exc:
        return [BatchedRow(machine, p, t, b, n_kv_required(p, t, b, pp_shared), NAN, NAN, NAN, NAN, NAN, NAN, NAN,
                           str(exc)) for p, t, b in tests]
    values = st.engine.values()
    vram = st.vram_gib()
    rows = []
    for p, t, b in tests:
        t_pp = prompts_ledger(st, p, 1 if pp_shared else b).seconds(values) if p else 0.0
        t_tg = generation_ledger(st, p, t, b).seconds(values) if t else 0.0
        n_kv = n_kv_required(p, t, b, pp_shared)
        total = t_pp + t_tg
        prompt_tokens = p if pp_shared else b * p
        rows.append(BatchedRow(machine, p, t, b, n_kv, t_pp, prompt_tokens / t_pp if t_pp > 0 else NAN, t_tg,
                               b * t / t_tg if t_tg > 0 else NAN, total, n_kv / total if total > 0 else NAN, vram))
    return rows
