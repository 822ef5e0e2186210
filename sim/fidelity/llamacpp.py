"""The llama.cpp domain of the fidelity benchmark: every llama-bench table's pp and tg rates and reported VRAM,
predicted by the llama.cpp engine (:mod:`sim.llamacpp`) under parameters fitted to the other sources' rows
(:mod:`sim.calibration.llamacpp_fit`)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.calibration.llamacpp_case import Case
from sim.calibration.llamacpp_cases import TABLES, read_cases
from sim.calibration.llamacpp_fit import fit, predict
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.llamacpp.params import CostParams

UNITS = {"tg_tok_s": "tok/s", "pp_tok_s": "tok/s", "vram_gib": "GiB", "btg_tok_s": "tok/s", "bpp_tok_s": "tok/s"}


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


BANDS = "calibration/llamacpp_bands.yaml"


def bands(results) -> dict[str, dict[str, list[float]]]:
    """90% bands of measured / simulated over the held-out rows, per test (``band``), and within one source once a
    measured run anchors the prediction (``band_within``: each source's log ratios less their median). ``sim
    advise`` prints its predictions with these (sim.llamacpp.params.BAND and BAND_WITHIN repeat them)."""
    import math

    import numpy as np

    out: dict[str, dict[str, list[float]]] = {"band": {}, "band_within": {}}
    for test in ("tg", "pp"):
        rows = [r for r in results if r.observation.quantity == f"{test}_tok_s" and math.isfinite(r.held_out.value)
                and r.held_out.value > 0]
        logs = np.log([r.observation.measured / r.held_out.value for r in rows])
        if not logs.size:
            continue
        out["band"][test] = [float(f"{math.exp(q):.4g}") for q in np.percentile(logs, [5, 95])]
        centred: list[float] = []
        for source in sorted({r.observation.source for r in rows}):
            own = np.log([r.observation.measured / r.held_out.value for r in rows if r.observation.source == source])
            centred += list(own - np.median(own))
        out["band_within"][test] = [float(f"{math.exp(q):.4g}") for q in np.percentile(centred, [5, 95])]
    return out
