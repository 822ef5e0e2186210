"""The llama.cpp domain of the fidelity benchmark: every llama-bench table's pp and tg rates and reported VRAM,
predicted by the llama.cpp engine (:mod:`sim.llamacpp`) under parameters fitted to the other sources' rows
(:mod:`sim.calibration.llamacpp_fit`)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.calibration.llamacpp_cases import TABLES, Case, read_cases
from sim.calibration.llamacpp_fit import fit, predict
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.llamacpp.params import CostParams

UNITS = {"tg_tok_s": "tok/s", "pp_tok_s": "tok/s", "vram_gib": "GiB"}


@dataclass
class LlamaCppDomain:
    """llama.cpp speeds and memory over the public llama-bench tables (``root``: the project folder)."""

    root: str
    tables: tuple[str, ...] = TABLES
    max_evaluations: int = 60
    weights: str = "row"
    name: str = "llama.cpp"

    def observations(self) -> tuple[list[Observation], list[Excluded]]:
        table = read_cases(self.root, self.tables)
        obs = [Observation(table=c.table, row_id=c.row_id, source=c.source, machine=c.setup, quantity=c.quantity,
                           unit=UNITS[c.quantity], measured=c.measured, engine=c.engine, backend=c.backend,
                           grade=c.grade, label=c.label, key=c) for c in table.cases]
        excluded = [Excluded(t, r, s, m, why) for t, r, s, m, why in table.excluded]
        return obs, excluded

    def fit(self, train: list[Observation]) -> CostParams:
        cases: list[Case] = [o.key for o in train]
        return fit(cases, max_evaluations=self.max_evaluations, weights=self.weights).params

    def predict(self, fitted: CostParams, observations: list[Observation]) -> list[Prediction]:
        return [Prediction(v, why) for v, why in predict([o.key for o in observations], fitted)]
