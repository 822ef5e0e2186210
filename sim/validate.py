"""``sim validate``: every measured table the project ships, against its scenario, cell by cell.

Each row: table, cell, measured, simulated, error (relative for rates, a difference for shares), tolerance, and
status: ``ok``, ``OUTSIDE`` (fails the run) or ``info`` (a figure the project reports but does not claim, with the
reason in ``note``). Seeds are fixed (11, which no fit used), so a run is reproducible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .tables import read_measured
from .units import GB, GIB

SEED = 11


@dataclass
class Cell:
    table: str
    cell: str
    measured: float
    simulated: float
    tolerance: float
    kind: str = "rate"  # rate: relative error; share: difference; range: inside [lo, hi] widened by tolerance
    info: str = ""  # non-empty: reported, not claimed
    lo: float | None = None
    hi: float | None = None

    @property
    def error(self) -> float:
        if self.kind == "rate":
            return self.simulated / self.measured - 1
        if self.kind == "share":
            return self.simulated - self.measured
        lo, hi = self.lo, self.hi
        assert lo is not None and hi is not None
        if self.simulated < lo:
            return self.simulated / lo - 1
        return self.simulated / hi - 1 if self.simulated > hi else 0.0

    @property
    def status(self) -> str:
        if self.info:
            return "info"
        ok = np.isfinite(self.simulated) and abs(self.error) <= self.tolerance + 1e-12
        return "ok" if ok else "OUTSIDE"

    def as_dict(self) -> dict:
        return {"table": self.table, "cell": self.cell, "measured": self.measured, "simulated": self.simulated,
                "error": self.error, "tolerance": self.tolerance, "kind": self.kind, "status": self.status,
                "note": self.info or None}


def _values(text: str) -> list[float]:
    """``35-44`` or ``417;421;455``: the measured values of a cell."""
    return [float(x) for x in (text.split("-") if "-" in text else text.split(";"))]


def loading_cells(root: str) -> list[Cell]:
    from .probes import probe_machine
    from .scenario import load_scenario

    scn, _ = load_scenario(os.path.join(root, "scenarios", "home_lab.yaml"))
    cells = []
    for name in ("loading_stages.csv", "loading_mac_sample.csv"):
        for row in read_measured(os.path.join(root, "calibration", name))[1]:
            gib = float(row["file_gb"]) * GB / GIB if row.get("file_gb") else None
            rep = probe_machine(scn, row["machine"], "9B", gib)
            for key, got in (("cold_gbps", rep.cold.gbps), ("hot_gbps", rep.hot.gbps),
                             ("link_gbps", rep.link.gbps if rep.link else None)):
                if row.get(key) and got is not None:
                    cells.append(Cell(name, f"{row['machine']}.{key}", float(row[key]), got, 0.02))
    gen1, _ = load_scenario(os.path.join(root, "scenarios", "home_lab.yaml"),
                            [f"machines.mining_box.gpus.card{i}.negotiated_gen=1" for i in range(3)])
    cells.append(Cell("pcie_links.csv", "mining card Gen1 x4 measured_load_link (unseen by the fit)", 0.85,
                      probe_machine(gen1, "mining_box", "9B").link.gbps, 0.02))
    return cells


def strata_cells(root: str, requests: int = 1000) -> list[Cell]:
    from .fit_moe import observe, strata_targets

    tables = os.path.join(root, "calibration")
    obs = observe(os.path.join(root, "scenarios", "gen3_5090.yaml"), [], requests, SEED)
    cells = []
    why = {"r2_decode_tok_s": "not claimed: the source gives 204 here and 256 by its own power ratio (README)",
           "r1_spill_share_median": "not claimed: one request, whose counters do not map one to one onto the "
                                    "model's (README)"}
    for t in strata_targets(tables):
        info = "" if t.fitted else why.get(t.name, "not claimed (README)")
        cells.append(Cell(t.source, t.name, t.measured, float(obs.get(t.name, float("nan"))), t.tolerance,
                          "rate" if t.kind == "rate" else "share", info))
    return cells


def concurrency_cells(root: str) -> list[Cell]:
    from .moe_serve import serve, serve_metrics
    from .scenario import load_scenario

    cells = []
    for row in read_measured(os.path.join(root, "calibration", "strata_concurrency.csv"))[1]:
        c = int(row["clients"])
        scn, _ = load_scenario(os.path.join(root, "scenarios", "gen3_5090_concurrency.yaml"),
                               [f"serve.workload.clients={c}"])
        m = serve_metrics(*serve(scn, np.random.default_rng(SEED)))
        cells += [Cell("strata_concurrency.csv", f"clients {c} throughput_tok_s", float(row["throughput_tok_s"]),
                       m["throughput_tok_s"], 0.10),
                  Cell("strata_concurrency.csv", f"clients {c} ttft_s (mean)", float(row["ttft_s"]), m["ttft_mean_s"],
                       0.20)]
    return cells


def basalt_run(path: str, *sets: str, requests: int = 40, prompt: int = 26, output: int = 512,
               acceptance: float | None = None) -> dict:
    """Metrics of ``requests`` sequential requests of fixed lengths on a Basalt scenario (seed ``SEED``)."""
    from .moe_serve import serve, serve_metrics
    from .scenario import load_scenario

    over = ["serve.workload.kind=sequential", f"serve.requests={requests}", f"serve.prompt_tokens={prompt}",
            f"serve.output_tokens_min={output}", f"serve.output_tokens_max={output}", *sets]
    if acceptance is not None:
        over.append(f"models.basalt_pack.moe.draft.acceptance={acceptance}")
    scn, _ = load_scenario(path, over)
    return serve_metrics(*serve(scn, np.random.default_rng(SEED)))


def basalt_cells(root: str) -> list[Cell]:
    three = os.path.join(root, "scenarios", "basalt_3gpu.yaml")
    two = os.path.join(root, "scenarios", "basalt_2gpu_vision.yaml")
    cal = os.path.join(root, "calibration")
    main = {r["quantity"]: r["value"] for r in read_measured(os.path.join(cal, "basalt_3gpu.csv"))[1]}
    cells = []
    m = basalt_run(three, acceptance=0.885)  # the bench's acceptance is not reported; see README
    cells.append(Cell("basalt_3gpu.csv", "bench_decode (acceptance 88.5% assumed)", float(main["bench_decode"]),
                      m["decode_tok_s"], 0.15))
    for gpu, key in (("gpu0", "vram_used_5090"), ("gpu1", "vram_used_5080"), ("gpu2", "vram_used_5060ti")):
        cells.append(Cell("basalt_3gpu.csv", f"{key} MiB", float(main[key]), m[f"vram.{gpu}.used_mib"], 0.001))
    m = basalt_run(three, requests=3, prompt=16384, output=1)
    cells.append(Cell("basalt_3gpu.csv", "bench_prefill_16k_cold", float(main["bench_prefill_16k_cold"]),
                      m["prefill_tok_s"], 0.15))
    for row in read_measured(os.path.join(cal, "basalt_context_sweep.csv"))[1]:
        acc = (float(row["acceptance_min_pct"]) + float(row["acceptance_max_pct"])) / 200
        m = basalt_run(three, requests=12, prompt=int(row["prompt_tokens"]), acceptance=acc)
        tier = row["tier"]
        cells.append(Cell("basalt_context_sweep.csv", f"{tier} prefill_tok_s_median",
                          float(row["prefill_tok_s_median"]), m["prefill_tok_s"], 0.10))
        for kind in ("cold", "cached"):
            cells.append(Cell("basalt_context_sweep.csv", f"{tier} decode_{kind}_median",
                              float(row[f"decode_{kind}_median"]), m["decode_tok_s_median"], 0.15))
    for row in read_measured(os.path.join(cal, "basalt_peer_reserve.csv"))[1]:
        reserve = int(row["peer_reserve_mib"])
        m = basalt_run(two, f"machines.basalt_box.engine.peers.gpu1.reserve_mib={reserve}", requests=20,
                        prompt=6867, output=200)
        values = _values(row["decode_tok_s_values"])
        cells.append(Cell("basalt_peer_reserve.csv", f"reserve {reserve} decode_tok_s", float(np.mean(values)),
                          m["decode_tok_s_median"], 0.25, "range", lo=min(values), hi=max(values)))
        cells.append(Cell("basalt_peer_reserve.csv", f"reserve {reserve} peer_vram_used_mib",
                          float(row["peer_vram_used_mib"]), m["vram.gpu1.used_mib"], 0.02,
                          info="not claimed at reserve 600: the driver had demoted part of the card to host"
                          if reserve == 600 else ""))
    placements = {"on_5090_primary": ["machines.basalt_box.gpus.gpu1.reserved_gib=0",
                                      "machines.basalt_box.engine.peers.gpu1.runtime_mib=0",
                                      "machines.basalt_box.gpus.gpu0.reserved_gib=1.78"],
                  "cpu_16_threads": ["machines.basalt_box.gpus.gpu1.reserved_gib=0",
                                     "machines.basalt_box.engine.peers.gpu1.runtime_mib=0"],
                  "on_5080_expert_tier": []}
    for row in read_measured(os.path.join(cal, "basalt_vision_placement.csv"))[1]:
        sets = placements.get(row["vision_placement"])
        if sets is None:
            continue
        m = basalt_run(two, *sets, requests=20, prompt=6867, output=200)
        values = _values(row["decode_tok_s_values"])
        cells.append(Cell("basalt_vision_placement.csv", f"{row['vision_placement']} decode_tok_s",
                          float(np.mean(values)), m["decode_tok_s_median"], 0.25, "range", lo=min(values),
                          hi=max(values)))
    return cells


GROUPS = {"loading": loading_cells, "strata": strata_cells, "concurrency": concurrency_cells,
          "basalt": basalt_cells}
NOT_CHECKED = {
    "dispatch_machines.csv": "decode rates given to the dispatcher as inputs (scenarios/home_lab.yaml), not outputs",
    "strata_parallel_slots.csv": "its one row (parallel=1) is the round-2 decode figure, reported under strata",
    "strata_overload.md": "text: checked by tests/test_serving_load.py (32 clients, nothing rejected)",
    "basalt_serve_requests.csv": "single log lines: fitted at 30% (calibration/basalt_moe.yaml targets)",
}


def validate(root: str, groups: list[str] | None = None) -> list[Cell]:
    out: list[Cell] = []
    for name in groups or list(GROUPS):
        out += GROUPS[name](root)
    return out
