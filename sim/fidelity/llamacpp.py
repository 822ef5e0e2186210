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


NEAR_EDGES = (0.0, 0.02, 0.1, 0.25, 1.0)  # distance bins: the share of the weights' bytes on the CPU that differs
NEAR_MIN_PAIRS = 20  # pairs a distance bin needs for its spread to be given


def cpu_weight_share(case) -> float:
    """The share of a case's weight bytes held by the CPU (0: every weight on the cards), its placement's position."""
    from sim.llamacpp.allocations import allocations

    machine = next(iter(case.scenario.machines))
    memory = allocations(case.scenario, machine, case.settings).memory
    total = sum(m.weights for m in memory)
    return memory[0].weights / total if total else 0.0


def near_bands(rows, share) -> list[list[float]]:
    """How far a prediction scaled to a measured run stays from the truth, by how far its placement is from the
    measured one: for every pair of held-out rows of one source, setup and test (the same tokens and depth), the
    difference of their log ratios (measured / simulated) against the difference of their CPU weight shares;
    per distance bin of :data:`NEAR_EDGES` with at least :data:`NEAR_MIN_PAIRS` pairs, ``[upper edge, lo, hi]``:
    the 5th and 95th percentiles of the ratio of two rows' ratios (symmetric: both signs of every pair)."""
    import math
    from collections import defaultdict

    import numpy as np

    groups: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    for r in rows:
        c = r.observation.key
        groups[(r.observation.source, c.setup, c.quantity, c.tokens, c.depth)].append(
            (share(c), math.log(r.observation.measured / r.held_out.value), c.settings.model_dump_json()))
    by_bin: dict[int, list[float]] = defaultdict(list)
    for members in groups.values():
        for i, (si, li, fi) in enumerate(members):
            for sj, lj, fj in members[i + 1:]:
                d = abs(si - sj)
                k = 0 if fi == fj else next(b for b in range(1, len(NEAR_EDGES)) if d <= NEAR_EDGES[b] + 1e-12)
                by_bin[k] += [li - lj, lj - li]
    out = []
    for k in sorted(by_bin):
        diffs = by_bin[k]
        if len(diffs) >= 2 * NEAR_MIN_PAIRS:
            lo, hi = np.percentile(diffs, [5, 95])
            out.append([NEAR_EDGES[k] if k else -1.0, float(f"{math.exp(lo):.4g}"), float(f"{math.exp(hi):.4g}")])
    return out


def bands(results) -> dict[str, dict[str, list]]:
    """90% bands of measured / simulated over the held-out rows, per test (``band``), within one source once a
    measured run anchors the prediction (``band_within``: each source's log ratios less their median), and near the
    measured placement (``band_near``: :func:`near_bands`). ``sim advise`` prints its predictions with these
    (sim.llamacpp.params.BAND, BAND_WITHIN and BAND_NEAR repeat them)."""
    import math

    import numpy as np

    out: dict[str, dict[str, list]] = {"band": {}, "band_within": {}, "band_near": {}}
    shares: dict[int, float] = {}

    def share(case) -> float:
        if id(case) not in shares:
            shares[id(case)] = cpu_weight_share(case)
        return shares[id(case)]

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
        near = near_bands(rows, share)
        if near:
            out["band_near"][test] = near
    return out
