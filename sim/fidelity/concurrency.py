"""Serving under load as a fidelity domain: throughput and TTFT against concurrency, from
``calibration/public/concurrency.csv`` and ``unified_memory_concurrency.csv``, where an engine of the project can
express the setup.

What the engines express today, row by row:

- the continuous-batching engine (:mod:`sim.batching`: vLLM-style iterations, chunked prefill, a KV pool) serves one
  discrete GPU behind PCIe (``scenarios/a100_llama2_7b.yaml``); the MoE engine (:mod:`sim.moe`) one GPU with an
  expert cache, peer GPUs holding expert copies, or layers divided across cards (``layer_split``); the llama.cpp
  engine llama.cpp's placement. None models tensor parallelism (every layer's matrices split across GPUs with an
  all-reduce per layer), so the 2x RTX 3090 TP=2 and the 5090 + 2x 3080 TP=3 sweeps are not expressible.
- unified-memory machines (GB10 DGX Spark, Strix Halo): every engine hosts one (:mod:`sim.config.unified`).
  The GB10 vLLM sweeps of Qwen3.6-35B-A3B are expressed (calibration/serving_setups.yaml, :mod:`sim.fidelity.serving`:
  the MoE engine's continuous batching, MTP drafts, the KV and Gated DeltaNet state pool). The Qwen3.8-Flash-Next
  sweep has no published config. The Strix Halo vLLM FP16 rows run on the dense batching engine at their mean
  lengths (derived from the source's totals), with the card family's efficiencies (RDNA 3.5 has no kernel profile:
  the nearest fitted family's are carried); its W8A8, GPTQ and llama-server rows are not expressed.
  ``unified_memory_concurrency.csv``'s llama-batched-bench rows belong to the llama.cpp domain.
- LCPP20586-4090 (llama-bench pp512 against batch size on an RTX 4090) belongs to the llama.cpp domain.

Every other row is excluded, each with its reason. :meth:`ConcurrencyDomain.fit` fits the one shared parameter
(the MTP acceptance a source does not report) to the training rows, and :meth:`ConcurrencyDomain.predict` runs each
row's scenario; both accept any list (an observation no setup maps is predicted NaN, with why).
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.fidelity.serving import SETUPS, ServingFit, ServingRows
from sim.formats.public_serving import ServingSweepRow, read_serving_table

TABLES = ("concurrency.csv", "unified_memory_concurrency.csv")
PUBLIC = Path(__file__).resolve().parents[2] / "calibration" / "public"
UNIFIED = ("unified-memory machine ({what}): not set up in calibration/serving_setups.yaml (Qwen3.8-Flash-Next has "
           "no published config)")
BATCHED = "llama.cpp domain: llama-batched-bench's S_PP and S_TG, predicted by the llama.cpp engine's batched steps"
TENSOR_PARALLEL = ("tensor-parallel across {n} GPUs ({tp}): no engine models tensor parallelism (the batching engine "
                   "serves one GPU; the MoE engine's peers hold expert copies and its layer_split divides layers, not "
                   "each layer's matrices)")
LLAMACPP = ("llama.cpp domain: llama-bench pp512 against batch size (a batched-throughput proxy of the llama.cpp "
            "engine, not a serving sweep)")
NOT_EXPRESSED = "no engine of the project is set up for this row"




def read_rows(path: str) -> list[ServingSweepRow]:
    """The rows of one concurrency table (:func:`sim.formats.public_serving.read_serving_table`: a missing file or
    column is a ScenarioError naming it)."""
    return read_serving_table(path)


def why_excluded(r: ServingSweepRow) -> str:
    """Why no engine of the project expresses a row of the concurrency tables."""
    gpu, engine = r.gpu.lower(), r.engine.lower()
    if "batched-bench" in engine:
        return BATCHED
    if r.memory_arch.lower() == "unified" or "unified" in gpu or "gb10" in gpu or "strix halo" in gpu:
        what = "GB10, DGX Spark" if "gb10" in gpu else "Strix Halo" if "strix halo" in gpu else "unified memory"
        return UNIFIED.format(what=what)
    count = r.gpu_count if r.gpu_count is not None else 1
    if "tp=" in gpu or count > 1:
        return TENSOR_PARALLEL.format(n=count, tp=r.tensor_parallel or "tensor parallel")
    if "llama-bench" in engine or r.source_id.startswith("LCPP20586"):
        return LLAMACPP
    return NOT_EXPRESSED


class ConcurrencyDomain:
    """Throughput, TTFT and TPOT under load: the rows calibration/serving_setups.yaml maps run by the MoE or the
    dense batching engine (:mod:`sim.fidelity.serving`), every other row excluded with its reason (see the module
    docstring).

    ``public``: the folder of the public tables (the project folder is the one above ``calibration/``)."""

    name = "serving under load"

    def __init__(self, public: str | os.PathLike = PUBLIC) -> None:
        self.public = str(public)
        self.root = os.path.dirname(os.path.dirname(os.path.abspath(self.public)))

    @cached_property
    def rows(self) -> ServingRows | None:
        """The expressible setups, or None without calibration/serving_setups.yaml."""
        if not os.path.exists(os.path.join(self.root, SETUPS)):
            return None
        return ServingRows(self.root)

    def observations(self) -> tuple[list[Observation], list[Excluded]]:
        observations, excluded = [], []
        for table in TABLES:
            for r in read_rows(os.path.join(self.public, table)):
                obs, why = self.rows.express(table, r) if self.rows is not None else ([], "")
                if obs:
                    observations += obs
                    continue
                excluded.append(Excluded(table, r.row_id, r.source_id, r.setup_id,
                                         why or why_excluded(r)))
        return observations, excluded

    def fit(self, train: list[Observation]) -> ServingFit:
        return self.rows.fit(train) if self.rows is not None and train else ServingFit()

    def predict(self, fitted: ServingFit, observations: list[Observation]) -> list[Prediction]:
        if self.rows is None:
            return [Prediction(float("nan"), f"not expressible: {NOT_EXPRESSED}") for _ in observations]
        return self.rows.predict(fitted, observations)
