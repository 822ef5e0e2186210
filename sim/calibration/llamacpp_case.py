"""One measured number of a public llama-bench table and the run that produced it (:class:`Case`), and a table's
cases with the rows left out and why (:class:`CaseTable`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario


@dataclass
class Case:
    """One measured number of a llama-bench table and the run that produced it."""

    table: str
    row_id: str
    source: str
    setup: str
    grade: str
    quantity: str  # tg_tok_s | pp_tok_s | vram_gib; llama-batched-bench: btg_tok_s (S_TG) | bpp_tok_s (S_PP)
    measured: float
    scenario: Scenario
    settings: LlamaCpp
    tokens: int = 0  # pp: prompt tokens; tg: generated tokens
    depth: int = 0  # tokens already in the cache (llama-bench -d, sweep-bench N_KV)
    vram: str = "total"  # vram_gib rows: total (every buffer and the backend's context) | model (weights only)
    backend: str = "cuda"
    engine: str = "llama.cpp"
    label: str = ""
    memory_arch: str = "discrete"
    batch: int = 0  # llama-batched-bench: B sequences (tokens is B x TG or B x PP, depth is PP); 0: llama-bench

    @property
    def test(self) -> str:
        return self.quantity.split("_", 1)[0]

    @property
    def id(self) -> str:
        return f"{self.row_id}.{self.quantity}"


@dataclass
class CaseTable:
    cases: list[Case]
    excluded: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # table, row, source, setup, why
