"""The scenario file's top level: hardware, models, machines, jobs and their dispatch, a served workload, what to
calibrate; and which kind of engine serves it.

Collections are maps keyed by name so every knob has a dotted path (``machines.rtx4090_box.loader.s_per_gb``).
Units are in key names. Unknown keys are errors with a did-you-mean.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr

from sim.config.base import MAX_JOB_TOKENS, MAX_S, Strict
from sim.config.calibrate import Calibrate, InputSpread
from sim.config.engine import Engine
from sim.config.llamacpp import Bench
from sim.config.machines import Disk, GpuType, LoadingConfig, Machine, Pcie
from sim.config.models import ModelSpec
from sim.config.serve import Serve


class TieBreak(Strict):
    rule: Literal["prefer", "fastest_decode", "fastest_load", "shortest_queue", "smallest_estimate"] = Field(
        "prefer", description="What decides between machines whose estimates tie.")
    order: list[str] = Field(default_factory=list, description="Machine preference order for rule 'prefer'.")


class Dispatch(Strict):
    tie_threshold: float = Field(
        0.10, ge=0, description="Estimates within this relative difference of the best are a tie (fraction).")
    tie_break: TieBreak = TieBreak()
    isolation: Literal["shared", "per_job"] = Field(
        "shared",
        description="shared: all jobs flow through one simulation with queues; "
        "per_job: each job is a separate case starting from the initial machine state.",
    )


class Job(Strict):
    model: str
    tokens: int = Field(ge=0, le=MAX_JOB_TOKENS, description="Tokens to generate (0: only make the model resident).")
    arrival_s: float = Field(0.0, ge=0, le=MAX_S, description="When the job is submitted (s).")
    resident_on: list[str] | None = Field(
        None, description="per_job isolation only: machines where the model is resident when this job starts.")


class Report(Strict):
    load_model: str | None = Field(None, description="Model whose cold/hot/link load each machine reports.")


class Scenario(Strict):
    name: str
    description: str = ""
    calibrations: list[str] = Field(
        default_factory=list, description="Calibration files (relative to this file) filling parameters.")
    seed: int = Field(0, ge=0, description="Default seed; --seed overrides.")
    pcie: Pcie = Pcie()
    loading: LoadingConfig = LoadingConfig()
    disks: dict[str, Disk] = Field(default_factory=dict)
    gpus: dict[str, GpuType] = Field(default_factory=dict)
    models: dict[str, ModelSpec]
    machines: dict[str, Machine]
    dispatch: Dispatch = Dispatch()
    jobs: dict[str, Job] = Field(default_factory=dict)
    serve: Serve | None = None
    bench: Bench | None = Field(None, description="A llama-bench run on a machine's llama.cpp engine.")
    calibrate: Calibrate = Calibrate()
    uncertainty: dict[str, InputSpread] = Field(
        default_factory=dict, description="dotted.path -> the scatter of a measured input value (a single-sample "
        "decode rate, say), drawn by --uncertainty besides the calibrations' fitted covariance.")
    report: Report = Report()
    acknowledged_warnings: dict[str, str] = Field(
        default_factory=dict, description="dotted.path -> why: plausibility warnings at these paths are known and "
        "not printed (a measurement the catalog's specs contradict, say), each with its reason.")
    _defaults: tuple[str, ...] = PrivateAttr(default=())  # dotted paths the catalog and model files filled


EngineName = Literal["moe", "dense", "llamacpp"]  # the engine kinds sim.engines registers


def engine_kind(s: Scenario, e: Engine) -> EngineName | None:
    """Which engine serves ``e``'s model: ``moe`` (an expert cache, sim.moe) for a model with an ``moe`` section,
    ``dense`` (continuous batching, sim.dense) for one with a ``dense`` section; None when the model names neither
    or both (a scenario check reports it); ``llamacpp`` (sim.llamacpp) for an engine with a ``llamacpp`` section,
    whatever its model."""
    if e.llamacpp is not None:
        return "llamacpp"
    spec = s.models.get(e.model)
    if spec is None or (spec.moe is None) == (spec.dense is None):
        return None
    return "moe" if spec.moe is not None else "dense"
