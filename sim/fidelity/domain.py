"""What a kind of measurement offers the fidelity benchmark: observations, a fit of shared parameters, predictions.

A :class:`Domain` is the adapter between one family of public tables and the mechanism that predicts them. The
benchmark never looks inside a fit: it hands :meth:`Domain.fit` the training observations (every group but one)
and asks :meth:`Domain.predict` for the held-out group's rows. A domain fits only parameters shared across setups
(bandwidth shares, fixed costs, latencies), never one per setup or row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Observation:
    """One measured number of a public table, as the benchmark sees it.

    ``source`` is the table's ``source_id``; ``machine`` names the machine it was measured on (the table's
    ``setup_id``, or what the domain knows to be the same machine). The benchmark holds out groups: a source with
    every other source that shares a machine with it (:func:`sim.fidelity.loso.groups`).
    """

    table: str  # file name under calibration/public/, e.g. "offload_sweeps.csv"
    row_id: str  # the table's row_id
    source: str  # the table's source_id
    machine: str  # the table's setup_id (one machine of one author)
    quantity: str  # what was measured: "tg_tok_s", "pp_tok_s", "vram_gib", "load_s", "hit_rate", ...
    unit: str  # its unit: "tok/s", "GiB", "s", "fraction", ...
    measured: float
    engine: str = ""  # llama.cpp, ik_llama.cpp, vLLM, ... ("" when it does not apply)
    backend: str = ""  # llama.cpp's backend: cuda, hip, vulkan, metal, sycl, opencl, cpu ("" when not llama.cpp)
    grade: str = ""  # the source's reliability grade (A, B, C)
    label: str = ""  # a short description of the row for the report (model, flags, test)
    key: Any = field(default=None, compare=False, hash=False)  # the domain's own handle (its setup, scenario, ...)

    @property
    def id(self) -> str:
        """Unique within a domain: the row and what was measured of it."""
        return f"{self.row_id}.{self.quantity}"


@dataclass(frozen=True)
class Prediction:
    """What the mechanism predicts for one observation, and which of its parts dominates (for explaining misses):
    ``value`` is NaN when the mechanism says the run cannot happen (it does not load), with the reason in
    ``mechanism``."""

    value: float
    mechanism: str = ""  # e.g. "GPU weight reads 71%, fixed costs 18%" or "does not load: CUDA0 needs 9.1 GiB"


@dataclass(frozen=True)
class Excluded:
    """A row the domain cannot express, and why (a machine not stated, a model without a published config, ...)."""

    table: str
    row_id: str
    source: str
    machine: str
    why: str


class Domain(Protocol):
    """One family of public tables and the mechanism that predicts them."""

    name: str  # shown in the report: "llama.cpp speed", "llama.cpp memory", "load times", ...

    def observations(self) -> tuple[list[Observation], list[Excluded]]:
        """Every observation the domain can express, and every row of its tables it cannot (with why)."""
        ...

    def fit(self, train: list[Observation]) -> Any:
        """Shared parameters fitted to ``train`` (deterministic: the same observations give the same fit)."""
        ...

    def predict(self, fitted: Any, observations: list[Observation]) -> list[Prediction]:
        """The mechanism's value for each of ``observations`` under ``fitted``, in their order."""
        ...
