"""The requests ``sim calibrate`` replays: completed requests of engine logs (:mod:`sim.formats.engine_logs`) or of
request tables (CSV columns named like the log rows: ``prompt_tokens``, ``cached_tokens``, ``output_tokens``,
``acceptance`` and any of the measured ``prefill_tok_s``, ``decode_tok_s``, ``ttft_s``, ``expert_hit_rate``,
``pcie_share``), each replayed through the scenario's engine one after another with its own prompt, cache hit,
length and acceptance, and each measured figure a target."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import numpy as np

from sim.calibration.targets import Experiment, Target, TargetBuilder
from sim.config.calibrate import Calibrate
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError
from sim.formats.request_tables import finite, read_request_table

RATES = ("prefill_tok_s", "decode_tok_s", "ttft_s")
SHARES = ("expert_hit_rate", "pcie_share")
REPLAY = "requests"
ALIASES = {"hit_rate": "expert_hit_rate"}  # the column name of requests.csv (sim run --out) and of request tables


# What an engine's logged PCIe share counts, over routed experts. Strata: "more read by the GPU over PCIe or from
# another GPU" (its hit-rate line), so not the misses the host CPU computes; Basalt and request tables: every routed
# expert not served from the engine GPU's VRAM (peers, host CPU, PCIe reads).
READS_ONLY_SHARE = {"strata"}


@dataclass
class Observation:
    source: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    acceptance: float  # NaN: the model's
    measured: dict[str, float]
    engine: str = ""  # the log format it came from ("" for a request table)


def table_rows(path: str) -> list[dict[str, float | str | None]]:
    """The requests of a request table (:func:`sim.formats.request_tables.read_request_table`) as rows keyed like an
    engine log's."""
    return [{f.name: getattr(r, f.name) for f in fields(r) if f.name != "line"} for r in read_request_table(path)]


def observations(logs: list[str], tables: list[str]) -> list[Observation]:
    """The completed requests of engine logs and request tables, with what each measured."""
    from sim.formats.engine_logs import log_sources, read_logs

    rows: list[tuple[str, dict]] = []
    if logs:
        for r in read_logs(log_sources(logs)).rows:
            file, _, line = str(r["line"]).rpartition(":")
            rows.append((f"{os.path.basename(file)}:{line}", r))
    for path in tables:
        rows += [(f"{os.path.basename(path)} row {i}", r) for i, r in enumerate(table_rows(path), start=1)]
    out = []
    for where, r in rows:
        prompt, output = finite(r.get("prompt_tokens")), finite(r.get("output_tokens"))
        if prompt is None or output is None or output < 1:
            continue  # statistics lines and partial rows carry no request to replay
        r = {ALIASES.get(k, k): v for k, v in r.items()}
        measured = {k: v for k in (*RATES, *SHARES) if (v := finite(r.get(k))) is not None}
        cached = finite(r.get("cached_tokens")) or 0
        acc = finite(r.get("acceptance"))
        if prompt < 0 or cached < 0 or cached > prompt or (acc is not None and not 0 <= acc <= 1):
            raise ScenarioError(where, "prompt_tokens" if prompt < 0 else "cached_tokens" if cached < 0 or
                                cached > prompt else "acceptance",
                                "prompt >= cached >= 0 tokens and an acceptance fraction in [0, 1]")
        if cached >= prompt:
            measured.pop("prefill_tok_s", None)
        out.append(Observation(where, int(prompt), cached_tokens=int(finite(r.get("cached_tokens")) or 0),
                               output_tokens=int(output), acceptance=float("nan") if acc is None else acc,
                               measured=measured, engine=str(r.get("engine") or "")))
    return out


def replay(scn: Scenario, obs: list[Observation], seed: int, replicas: int = 1) -> list[dict[str, float]]:
    """Replay the observed requests one after another on the scenario's engine, each ``replicas`` times; per
    request, the medians of its observables over its replicas."""
    from sim.engines import kind_for
    from sim.serving.workload import RequestTable

    kind = kind_for(scn)
    assert kind is not None
    n = len(obs) * replicas

    def col(values: list) -> np.ndarray:
        return np.tile(np.array(values), replicas)

    table = RequestTable(arrival_s=np.full(n, np.nan), prompt_tokens=col([o.prompt_tokens for o in obs]),
                         cached_tokens=col([o.cached_tokens for o in obs]),
                         output_tokens=col([o.output_tokens for o in obs]), acceptance=col([o.acceptance for o in obs]),
                         client=np.zeros(n, dtype=np.int64), run=np.zeros(n, dtype=np.int64))
    c = kind.replay(scn, table, np.random.default_rng(seed)).requests.columns
    new = c["prompt_tokens"] - c["cached_tokens"]
    decoded = c["output_tokens"] - (1 if kind.first_token_in_prefill else 0)  # the tokens decode_s produced
    reads_only = col([o.engine in READS_ONLY_SHARE for o in obs])
    with np.errstate(divide="ignore", invalid="ignore"):
        per = {"prefill_tok_s": np.where(c["prefill_s"] > 0, new / c["prefill_s"], np.nan),
               "decode_tok_s": np.where((c["decode_s"] > 0) & (decoded > 0), decoded / c["decode_s"], np.nan),
               "ttft_s": c["ttft_s"],
               "expert_hit_rate": np.where(c["lookups"] > 0, c["vram_hits"] / c["lookups"], np.nan),
               # what the engine's log calls its PCIe share (READS_ONLY_SHARE): routed experts not served from the
               # engine GPU's VRAM, or of those only what crossed PCIe or came from another GPU
               "pcie_share": np.where(c["routed"] > 0, (c["peer_experts"] + c["cpu_experts"] * ~reads_only
                                                        + c["pcie_reads"]) / c["routed"], np.nan)}
    medians = {k: np.median(v.reshape(replicas, len(obs)), axis=0) for k, v in per.items()}
    return [{k: float(v[i]) for k, v in medians.items()} for i in range(len(obs))]


def request_targets(obs: list[Observation], builder: TargetBuilder, cal: Calibrate, scenario: str) -> list[Target]:
    """One target per measured figure of a replayed request, with the kind and tolerance the scenario gives it."""
    replay = Experiment(scenario, (REPLAY,))
    out = []
    for i, o in enumerate(obs):
        for key, value in o.measured.items():
            spec = cal.requests.get(key)
            if spec is None:
                continue
            name = f"{o.source} {key}"
            role, note = builder.role(name)
            out.append(Target(name, o.source.split(" row ")[0].rsplit(":", 1)[0], measured=value, kind=spec.kind,
                              tolerance=spec.tolerance, metric=key, experiments=(replay,), how="request", role=role,
                              note=note, where=(i,)))
    return out
