"""The base of every scenario model: unknown keys rejected, values frozen, no booleans where numbers belong."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Gen = Literal[1, 2, 3, 4, 5, 6]
Lanes = Literal[1, 2, 4, 8, 16]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, coerce_numbers_to_str=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML reads yes/no/true as booleans; a boolean where a number is expected is a mistake, not 1 or 0."""
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, bool) and annotation is not bool and bool not in get_args(annotation):
            raise ValueError(f"expected a number or text, not the boolean {value}")
        return value


INPUT_FILE = "x-sim-input-file"  # marks a field naming a file a run reads (sim.config.files finds them)


def input_file(description: str) -> Any:
    """A field naming a file a run reads, relative to the scenario file: loading resolves it, a sweep's run key
    hashes its contents."""
    return Field(None, description=description, json_schema_extra={INPUT_FILE: True})


# Physical bounds of numeric fields: far beyond any real hardware or model, and far inside what float arithmetic
# holds (a size in bytes, a time in seconds, their products), so an overflow or a division to infinity is a bad
# value in the scenario, not an internal error. Each is named in the schema's message ("less than or equal to ...").
MAX_GIB = 1e6  # a memory size (GiB): a million GiB, beyond any GPU, host or disk cache
MAX_MIB = MAX_GIB * 1024  # the same (MiB)
MIN_GBPS = 1e-6  # a bandwidth (GB/s): a kilobyte a second
MAX_GBPS = 1e6  # a bandwidth (GB/s): a petabyte a second
MIN_FRACTION = 1e-6  # an efficiency or a share of a resource that must be positive (fraction)
MIN_KIB = 1e-6  # a size per token (KiB): about a thousandth of a byte
MAX_KIB = 1e6  # a size per token (KiB): a GiB of KV per token
MIN_TOK_S = 1e-6  # a rate (tok/s, requests/s): one in eleven days
MAX_TOK_S = 1e9  # a rate (tok/s, requests/s)
MAX_S = 1e7  # a time (s): about four months, as sim.formats.quantities.SECONDS; no step, load or job arrival is later
MAX_JOB_TOKENS = 10**12  # tokens one job generates (the break-even's search stops there, sim.lab.breakeven)
MAX_TENSORS = 10**9  # tensors of one model (a model of 2e12 parameters has about 1e5)
