"""Scenario schema of what `sim calibrate` fits and `sim validate` checks, and of measured inputs' scatter."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat

from sim.config.base import Strict


class FreeParameter(Strict):
    """A parameter `sim calibrate` may move, searched in log space between its bounds."""

    lo: PositiveFloat = Field(description="Lowest value (the parameter's unit).")
    hi: PositiveFloat = Field(description="Highest value.")
    start: PositiveFloat | None = Field(None, description="Starting value (default: the scenario's own value).")
    unit: str = Field("1", description="Unit of the value, written into the calibration file.")


class HeldParameter(Strict):
    """A value `sim calibrate` writes into the calibration file without fitting it, with the reason."""

    value: float = Field(description="The value (its unit).")
    unit: str = Field("1", description="Unit of the value.")
    why: str = Field(min_length=1, description="Why it is held: its source, or why the tables cannot separate it.")


class Variant(Strict):
    """A named variant of the scenario that a measured table was taken on: another scenario file (relative to this
    one) and/or changed values. The free and held parameters apply to it too."""

    scenario: str | None = Field(None, description="Another scenario file, relative to this one.")
    set: dict[str, Any] = Field(default_factory=dict, description="dotted.path: value changes, as --set.")


class RowValue(Strict):
    """A scenario value taken from a row: the mean of some columns, times a scale."""

    mean_of: list[str] = Field(min_length=1, description="Columns whose mean is taken.")
    scale: PositiveFloat = Field(1.0, description="Factor from the columns' unit to the path's (percent: 0.01).")


class CellSpec(Strict):
    """How one measured cell (a quantity, a column of a row) is simulated."""

    metric: str = Field(description="A metric of `sim run --json` (decode_tok_s, expert_hit_rate, "
                        "vram.gpu0.used_mib, ...) of the cell's experiment.")
    variant: str | None = Field(None, description="The variant it was measured on (default: the table's).")
    set: dict[str, Any] = Field(default_factory=dict, description="Further dotted.path: value changes (workload).")
    scale: PositiveFloat = Field(1.0, description="Factor from the table's unit to the metric's (percent: 0.01).")
    kind: Literal["rate", "share"] = Field("rate", description="rate: error as a ratio; share: as a difference.")
    tolerance: PositiveFloat = Field(description="Relative (rate) or absolute (share) error the project claims.")
    ratio_to: str | None = Field(None, description="A variant whose same metric divides this one (a measured "
                                 "ratio of two runs); 'base' is the scenario as written.")


class TableMap(Strict):
    """How a measured table maps onto this scenario (`calibrate.tables.<file name>`)."""

    kind: Literal["quantities", "rows", "buckets"] = Field(
        description="quantities: quantity,value rows; rows: one row per setting, columns measured; buckets: requests "
        "pooled and bucketed by spill share or hit rate (bucket_by,low_pct,high_pct,decode_tok_s).")
    variant: str | None = Field(None, description="The variant its cells were measured on (default: base).")
    set: dict[str, Any] = Field(default_factory=dict, description="dotted.path: value changes for every cell.")
    cells: dict[str, CellSpec] = Field(default_factory=dict, description="quantities: quantity -> how it is "
                                       "simulated; rows: column -> how it is simulated.")
    row_key: str | None = Field(None, description="rows: the column naming each row.")
    row_set: dict[str, str | RowValue] = Field(default_factory=dict, description="rows: dotted.path -> the column "
                                               "(or columns) whose value it takes in each row.")
    row_variant: dict[str, str] = Field(default_factory=dict, description="rows: row name -> variant; with this "
                                        "map, rows it does not name are not simulated.")
    pool: list[str] = Field(default_factory=lambda: ["base"], min_length=1,
                            description="buckets: variants whose requests pool.")
    tolerance: PositiveFloat = Field(0.15, description="buckets: relative error claimed per bucket.")


class RequestObservable(Strict):
    kind: Literal["rate", "share"] = Field(description="rate: error as a ratio; share: as a difference.")
    tolerance: PositiveFloat = Field(description="Relative (rate) or absolute (share) error for one request.")


def _request_observables() -> dict[str, RequestObservable]:
    return {"prefill_tok_s": RequestObservable(kind="rate", tolerance=0.3),
            "decode_tok_s": RequestObservable(kind="rate", tolerance=0.3),
            "ttft_s": RequestObservable(kind="rate", tolerance=0.3),
            "expert_hit_rate": RequestObservable(kind="share", tolerance=0.01),
            "pcie_share": RequestObservable(kind="share", tolerance=0.01)}


class Calibrate(Strict):
    """What `sim calibrate` fits (dotted paths of this scenario and their bounds), what it holds, and how measured
    tables map onto the scenario; `sim validate` checks the same cells."""

    free: dict[str, FreeParameter] = Field(default_factory=dict)
    held: dict[str, HeldParameter] = Field(default_factory=dict)
    stages: list[Annotated[list[str], Field(min_length=1)]] = Field(
        default_factory=list, description="Fit the free parameters in these groups, "
                                    "one after another (default: all at once).")
    variants: dict[str, Variant] = Field(default_factory=dict)
    tables: dict[str, TableMap] = Field(default_factory=dict, description="Keyed by the table's file name.")
    requests: dict[str, RequestObservable] = Field(
        default_factory=_request_observables, description="Per observable of a replayed request (logs, request "
        "tables): its kind and tolerance.")
    replicas: int = Field(1, ge=1, le=1000, description="Times each replayed request is simulated (each with its own "
                          "random numbers); its simulated figures are their medians, so one request's luck of the "
                          "draw does not decide the fit.")
    checks: dict[str, str] = Field(default_factory=dict, description="Target name pattern -> why it is held out of "
                                   "the fit (still claimed by sim validate).")
    unclaimed: dict[str, str] = Field(default_factory=dict, description="Target name pattern -> why it is neither "
                                      "fitted nor claimed (reported by sim validate as info).")


class InputSpread(Strict):
    """How unsure a measured input value of the scenario is (`--uncertainty` draws it log-normally)."""

    log_sd: PositiveFloat = Field(le=2.0, description="Standard deviation of log(value): relative run-to-run scatter.")
    why: str = Field(min_length=1, description="Where the figure comes from.")
