"""The serving sweeps an engine of the project expresses: one scenario per row of a concurrency table, run with the
row's clients, requests and lengths, against its throughput, TTFT and TPOT.

``calibration/serving_setups.yaml`` says what each expressible setup is in sim's terms (catalog machine, model file,
the engine's settings as the source states them). A row is a closed loop of ``concurrency`` clients with no think
time sending ``num_requests`` requests of ``input_tokens`` prompt and ``output_tokens`` generated tokens, which is
how ``vllm bench serve --max-concurrency`` runs. It is predicted with the MoE engine's continuous batching
(:mod:`sim.moe`) at its package step costs, or a dense model with the dense batching engine (:mod:`sim.dense`) at its
card family's fitted efficiencies and vLLM's overhead (:mod:`sim.batching.families`).

The one parameter fitted is shared: the acceptance of multi-token-prediction drafts where a source runs MTP without
reporting it. It is the median acceptance that makes the training rows' throughput right. A fit with no such row
takes :data:`MTP_ACCEPTANCE_PRIOR`, the acceptance the Strata engine's own log measured for its MTP head
(calibration/strata_gen3_5090.csv, 63.5-64.0%).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from sim.batching.families import RUNTIME_GIB
from sim.core.errors import ScenarioError, SimulationError
from sim.fidelity.domain import Observation, Prediction
from sim.formats.public_serving import ServingSweepRow

SETUPS = os.path.join("calibration", "serving_setups.yaml")
MODELS = os.path.join("calibration", "models", "index.yaml")
MTP_ACCEPTANCE_PRIOR = 0.6375  # the Strata engine's MTP acceptance, 63.5-64.0% (strata_gen3_5090.csv), midpoint
QUANTITIES = (("output_tok_s", "throughput_tok_s", "tok/s", 1.0), ("ttft_mean_ms", "ttft_mean_s", "ms", 1000.0),
              ("tpot_mean_ms", "tpot_mean_s", "ms", 1000.0))
DENSE_MAX_NUM_SEQS = 256  # vLLM's max_num_seqs default before its V1 engine, when a source does not state it
SEED = 0


@dataclass(frozen=True)
class Row:
    """One row of a serving sweep as a run: its setup, clients, requests and lengths."""

    setup: str
    clients: int
    requests: int
    prompt: int
    output: int


@dataclass(frozen=True)
class ServingFit:
    """The shared parameters a serving fit gives: the MTP drafts' acceptance (fraction)."""

    mtp_acceptance: float = MTP_ACCEPTANCE_PRIOR


def read_setups(root: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The serving setups and the model index (calibration/serving_setups.yaml, models/index.yaml)."""
    from sim.config.yaml_io import read_yaml

    path = os.path.join(root, SETUPS)
    setups = read_yaml(path).get("setups") or {}
    index = read_yaml(os.path.join(root, MODELS))["models"]
    return setups, index


def row_of(r: ServingSweepRow, setup: dict[str, Any] | None = None) -> Row | str:
    """The run of one table row, or why its lengths or load are not stated. A setup's ``lengths`` derive the mean
    lengths of a row that states none: its source's total input tokens over its requests, and its output rate times
    its duration over its requests (tokens)."""
    clients, requests, prompt, output = r.concurrency, r.num_requests, r.input_tokens, r.output_tokens
    derive = (setup or {}).get("lengths")
    if derive and requests and not (prompt and output):
        total = float(derive["prompt_tokens_total"])
        prompt = int(round(total / requests))
        output = None
        if r.output_tok_s is not None and r.t_total_s is not None:
            output = int(round(r.output_tok_s * r.t_total_s / requests))
    if not (clients and requests and prompt and output):
        return "concurrency, num_requests, input_tokens or output_tokens not stated"
    return Row(r.setup_id, clients, requests, prompt, output)


def scenario_dict(root: str, setup: dict[str, Any], index: dict[str, str], row: Row,
                  acceptance: float) -> dict[str, Any]:
    """The scenario of one row (a dict, validated by the caller)."""
    from sim.config.defaults import model_file_fields

    file = index.get(setup["model"])
    if file is None:
        raise ScenarioError(os.path.join(root, SETUPS), f"setups.{row.setup}.model",
                            f"no published config of {setup['model']} ({MODELS})")
    path = os.path.join(root, "calibration", "models", file)
    fields = model_file_fields(path, setup.get("quant"))
    if setup.get("engine") == "dense":
        return _dense_scenario(path, setup, fields, row)
    moe = dict(fields["moe"])
    if setup.get("kv_bytes"):
        moe["kv_kib_per_token"] = moe["kv_kib_per_token"] * float(setup["kv_bytes"]) / 2.0
    tokens = int(setup.get("mtp_tokens") or 0)
    if tokens:
        moe["draft"] = {"tokens": tokens, "acceptance": acceptance, "head_mib": _mtp_mib(path, setup.get("quant"))}
    m = setup["machine"]
    scheduler = dict(setup.get("scheduler") or {})
    seqs = int(scheduler.get("max_num_seqs") or 1)
    return {
        "name": f"serving-{row.setup}",
        "models": {"m": {"file": path, "quant": setup.get("quant"), "moe": moe}},
        "machines": {"box": {
            "host": {"type": m["host"], "ram_gib": m.get("ram_gib")},
            "gpus": {"gpu0": {"type": m["gpu"]}},
            "engine": {"model": "m", "gpu": "gpu0", "expert_cache": "auto", "batching": True, "parallel": seqs,
                       "runtime_gib": RUNTIME_GIB, "power": {"busy_w": 100.0, "idle_w": 10.0},
                       "scheduler": scheduler}}},
        "serve": _closed_loop(row),
    }


def _closed_loop(row: Row) -> dict[str, Any]:
    """A row's load: ``clients`` clients with no think time sending its requests of fixed lengths."""
    return {"machine": "box", "requests": row.requests, "prompt_tokens": row.prompt, "output_tokens_min": row.output,
            "output_tokens_max": row.output, "workload": {"kind": "closed", "clients": row.clients, "think_s": 0}}


def _dense_scenario(path: str, setup: dict[str, Any], fields: dict[str, Any], row: Row) -> dict[str, Any]:
    """A row of a dense model on the dense batching engine, its iteration costs left to the card's family."""
    dense = dict(fields["dense"])
    if setup.get("kv_bytes"):
        dense["kv_kib_per_token"] = dense["kv_kib_per_token"] * float(setup["kv_bytes"]) / 2.0
    m = setup["machine"]
    scheduler = dict(setup.get("scheduler") or {})
    seqs = int(scheduler.get("max_num_seqs") or DENSE_MAX_NUM_SEQS)
    return {
        "name": f"serving-{row.setup}",
        "models": {"m": {"file": path, "quant": setup.get("quant"), "dense": dense}},
        "machines": {"box": {
            "host": {"type": m["host"], "ram_gib": m.get("ram_gib")},
            "gpus": {"gpu0": {"type": m["gpu"]}},
            "engine": {"model": "m", "gpu": "gpu0", "parallel": seqs, "runtime_gib": RUNTIME_GIB,
                       "iteration": {"server": "vllm"}, "scheduler": scheduler}}},
        "serve": _closed_loop(row),
    }


@cache
def _mtp_mib(path: str, quant: str | None) -> float:
    from sim.modelfiles import read_model_file

    return read_model_file(path, quant).mtp_bytes / 2**20


def simulate(root: str, setup: dict[str, Any], index: dict[str, str], row: Row, acceptance: float
             ) -> dict[str, float]:
    """The run's metrics (throughput, TTFT and TPOT means), or a SimulationError/ScenarioError."""
    from sim.config.defaults import fill_defaults
    from sim.config.load import validate
    from sim.engines import kind_for

    raw = scenario_dict(root, setup, index, row, acceptance)
    fill_defaults(raw, SETUPS)
    scn = validate(raw, SETUPS)
    kind = kind_for(scn)
    assert kind is not None
    return kind.metrics(kind.serve(scn, np.random.default_rng(SEED)))


class ServingRows:
    """The expressible rows of the concurrency tables and their runs (``root``: the project folder)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.setups, self.index = read_setups(root)

    def express(self, table: str, r: ServingSweepRow) -> tuple[list[Observation], str]:
        """The observations of one row, or why it is not expressed ("" with observations)."""
        setup = self.setups.get(r.setup_id)
        if setup is None:
            return [], ""
        if setup["model"] not in self.index:
            return [], f"no published config of {setup['model']} ({MODELS})"
        wanted = setup.get("rows") or {}
        if any(r.cells.get(k, "") != v for k, v in wanted.items()):
            return [], f"not this setup's rows ({SETUPS}): {setup.get('rows_reason', 'another engine or model')}"
        row = row_of(r, setup)
        if isinstance(row, str):
            return [], row
        out = []
        for quantity, _, unit, _ in QUANTITIES:
            measured = getattr(r, quantity)
            if measured is None or not math.isfinite(measured) or measured <= 0:
                continue
            label = (f"{setup['model']} {setup.get('quant', '')} on {setup['machine']['gpu']}, {row.clients} clients, "
                     f"{row.prompt} in / {row.output} out")
            out.append(Observation(table=table, row_id=r.row_id, source=r.source_id, machine=r.setup_id,
                                   quantity=quantity, unit=unit, measured=measured, engine=r.engine,
                                   grade=r.grade, label=label, key=row))
        return out, "" if out else "no throughput, TTFT or TPOT reported"

    def fit(self, train: list[Observation]) -> ServingFit:
        """The MTP acceptance that makes the training rows' throughput right (median over their rows' best
        values, each found by bisection), or the prior when no training row runs MTP."""
        rows = [o for o in train if o.quantity == "output_tok_s" and isinstance(o.key, Row)
                and self.setups[o.key.setup].get("mtp_tokens")]
        if not rows:
            return ServingFit()
        best = [self._acceptance_for(o) for o in rows]
        best = [b for b in best if math.isfinite(b)]
        return ServingFit(float(sorted(best)[len(best) // 2]) if best else MTP_ACCEPTANCE_PRIOR)

    def _acceptance_for(self, o: Observation, lo: float = 0.05, hi: float = 0.95, steps: int = 7) -> float:
        """The acceptance at which the row's simulated throughput equals the measured one (more acceptance, more
        throughput: bisection), clamped to [lo, hi]."""
        def rate(a: float) -> float:
            return self._metrics(o.key, a).get("throughput_tok_s", float("nan"))

        if not rate(hi) >= o.measured:
            return hi
        if rate(lo) >= o.measured:
            return lo
        for _ in range(steps):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if rate(mid) < o.measured else (lo, mid)
        return (lo + hi) / 2

    def _metrics(self, row: Row, acceptance: float) -> dict[str, float]:
        return simulate(self.root, self.setups[row.setup], self.index, row, acceptance)

    def predict(self, fitted: ServingFit, observations: list[Observation]) -> list[Prediction]:
        out = []
        runs: dict[Row, dict[str, float] | str] = {}
        for o in observations:
            if not isinstance(o.key, Row):
                out.append(Prediction(float("nan"), "not expressible: no serving setup maps this row "
                                      f"({SETUPS})"))
                continue
            if o.key not in runs:
                try:
                    runs[o.key] = self._metrics(o.key, fitted.mtp_acceptance)
                except (SimulationError, ScenarioError) as exc:
                    runs[o.key] = str(exc)
            got = runs[o.key]
            if isinstance(got, str):
                out.append(Prediction(float("nan"), f"does not run: {got}"))
                continue
            metric, scale = next((m, s) for q, m, _, s in QUANTITIES if q == o.quantity)
            value = got.get(metric, float("nan")) * scale
            engine = self.setups[o.key.setup].get("engine", "moe")
            mtp = f"MTP acceptance {fitted.mtp_acceptance:.1%}; " if self.setups[o.key.setup].get("mtp_tokens") else ""
            out.append(Prediction(value, f"{mtp}{engine} engine, {o.key.clients} clients, {o.key.prompt} in / "
                                  f"{o.key.output} out"))
        return out
