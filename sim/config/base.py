"""The base of every scenario model: unknown keys rejected, values frozen, no booleans where numbers belong."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Gen = Literal[1, 2, 3, 4, 5, 6]
Lanes = Literal[1, 2, 4, 8, 16]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, coerce_numbers_to_str=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML reads yes/no/true as booleans; a boolean where a number is expected is a mistake, not 1 or 0."""
        if isinstance(value, bool) and cls.model_fields[info.field_name].annotation is not bool:
            raise ValueError(f"expected a number or text, not the boolean {value}")
        return value


INPUT_FILE = "x-sim-input-file"  # marks a field naming a file a run reads (sim.config.files finds them)


def input_file(description: str) -> Any:
    """A field naming a file a run reads, relative to the scenario file: loading resolves it, a sweep's run key
    hashes its contents."""
    return Field(None, description=description, json_schema_extra={INPUT_FILE: True})
