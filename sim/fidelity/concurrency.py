"""Serving under load as a fidelity domain: throughput and TTFT against concurrency, from
``calibration/public/concurrency.csv`` and ``unified_memory_concurrency.csv``, where an engine of the project can
express the setup.

What the engines express today, row by row:

- the continuous-batching engine (:mod:`sim.batching`: vLLM-style iterations, chunked prefill, a KV pool) serves one
  discrete GPU behind PCIe (``scenarios/a100_llama2_7b.yaml``); the MoE engine (:mod:`sim.moe`) one GPU with an
  expert cache, peer GPUs holding expert copies, or layers divided across cards (``layer_split``); the llama.cpp
  engine llama.cpp's placement. None models tensor parallelism (every layer's matrices split across GPUs with an
  all-reduce per layer), so the 2x RTX 3090 TP=2 and the 5090 + 2x 3080 TP=3 sweeps are not expressible.
- unified-memory machines (GB10 DGX Spark, Strix Halo): every engine hosts one (:mod:`sim.config.unified`), and
  ``unified_memory_concurrency.csv``'s llama-batched-bench rows belong to the llama.cpp domain; the GB10 vLLM sweeps
  and the Strix Halo vLLM / llama-server rows are not set up (their engines' costs and settings are not mapped).
- LCPP20586-4090 (llama-bench pp512 against batch size on an RTX 4090) belongs to the llama.cpp domain.

Every row is therefore excluded, each with its reason; :meth:`ConcurrencyDomain.fit` and
:meth:`ConcurrencyDomain.predict` accept any list (no shared parameters are fitted: there is nothing to fit them to)
and predict NaN, with why, for an observation they are handed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sim.core.errors import ScenarioError
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.fidelity.tables import read_csv

TABLES = ("concurrency.csv", "unified_memory_concurrency.csv")
PUBLIC = Path(__file__).resolve().parents[2] / "calibration" / "public"
UNIFIED = ("unified-memory machine ({what}): the serving engines host unified machines now, but no vLLM or "
           "llama-server run on one is set up (its engine's costs, the model's per-sequence state and the server's "
           "settings are not mapped yet)")
BATCHED = "llama.cpp domain: llama-batched-bench's S_PP and S_TG, predicted by the llama.cpp engine's batched steps"
TENSOR_PARALLEL = ("tensor-parallel across {n} GPUs ({tp}): no engine models tensor parallelism (the batching engine "
                   "serves one GPU; the MoE engine's peers hold expert copies and its layer_split divides layers, not "
                   "each layer's matrices)")
LLAMACPP = ("llama.cpp domain: llama-bench pp512 against batch size (a batched-throughput proxy of the llama.cpp "
            "engine, not a serving sweep)")
NOT_EXPRESSED = "no engine of the project is set up for this row"


@dataclass(frozen=True)
class ConcurrencyFit:
    """Shared serving parameters fitted to training observations: none (no row is expressible)."""

    rows: int = 0


def read_rows(path: str) -> list[dict[str, str]]:
    """The rows of one concurrency table (a missing file or column is a ScenarioError naming it)."""
    rows, fields = read_csv(path)
    missing = [c for c in ("row_id", "source_id", "setup_id", "gpu", "gpu_count", "engine") if c not in fields]
    if missing:
        raise ScenarioError(path, missing[0], "a column of the concurrency tables (calibration/public/README.md)")
    return rows


def why_excluded(r: dict[str, str]) -> str:
    """Why no engine of the project expresses a row of the concurrency tables."""
    gpu, engine = r["gpu"].lower(), r["engine"].lower()
    if "batched-bench" in engine:
        return BATCHED
    if r.get("memory_arch", "").lower() == "unified" or "unified" in gpu or "gb10" in gpu or "strix halo" in gpu:
        what = "GB10, DGX Spark" if "gb10" in gpu else "Strix Halo" if "strix halo" in gpu else "unified memory"
        return UNIFIED.format(what=what)
    count = int(r["gpu_count"]) if r["gpu_count"].isdigit() else 1
    if "tp=" in gpu or count > 1:
        m = re.search(r"TP=\d+", r["gpu"], re.IGNORECASE)
        tp = m.group(0).upper() if m else "tensor parallel"
        return TENSOR_PARALLEL.format(n=count, tp=tp)
    if "llama-bench" in engine or r["source_id"].startswith("LCPP20586"):
        return LLAMACPP
    return NOT_EXPRESSED


class ConcurrencyDomain:
    """Throughput and TTFT under load; today every row is excluded with its reason (see the module docstring).

    ``public``: the folder of the public tables."""

    name = "serving under load"

    def __init__(self, public: str | os.PathLike = PUBLIC) -> None:
        self.public = str(public)

    def observations(self) -> tuple[list[Observation], list[Excluded]]:
        excluded = []
        for table in TABLES:
            for r in read_rows(os.path.join(self.public, table)):
                excluded.append(Excluded(table, r["row_id"], r["source_id"], r["setup_id"], why_excluded(r)))
        return [], excluded

    def fit(self, train: list[Observation]) -> ConcurrencyFit:
        return ConcurrencyFit(rows=len(train))

    def predict(self, fitted: ConcurrencyFit, observations: list[Observation]) -> list[Prediction]:
        return [Prediction(float("nan"), f"not expressible: {NOT_EXPRESSED}") for _ in observations]
