"""The public llama-bench tables (``calibration/public/{offload_sweeps,backends_llamabench,depth_sweeps_cuda,
moe_full_gpu_consumer,unified_memory_llamabench,unified_memory_concurrency}.csv``: verbatim copies with every row's
source), read into :class:`BenchTableRow` records.

Per row: a setup, a source, a machine's llama.cpp run (engine, backend, flags such as ``ngl`` and ``n_cpu_moe``,
batch sizes, threads, KV cache types, flash attention) and what llama-bench, llama-sweep-bench or
llama-batched-bench measured: prompt (pp) and generation (tg) rates in tok/s at a context depth (tokens), sometimes
the VRAM used (GiB). The tables are read as pandas reads them with every cell a string
(:func:`sim.formats.public_tables.read_cells`); a count is a cell's leading integer (``"10 (placement label
moe10)"`` is 10, ``~`` dropped), a rate or size a cell that is one number (``~`` dropped). A number out of its
column's range (:data:`COLUMNS`) is a one-line ScenarioError at ``row ROW_ID.COLUMN``; what a row means in sim's
terms (its setup, model, backend) is calibration's (``calibration/llamacpp_setups.yaml``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.public_tables import read_cells
from sim.formats.quantities import SIZE_GB, TOKENS, TOKENS_PER_S, Quantity

RATES = ("pp_tok_s", "tg_tok_s", "pp_tok_s_aggregate", "output_tok_s")  # tok/s, read whole (leading_number)
COUNTS = ("n_prompt", "n_gen", "n_depth_kv", "ctx_tokens", "input_tokens", "output_tokens", "max_model_len")  # tokens
COLUMNS: dict[str, Quantity] = {"vram_used_gib": replace(SIZE_GB, unit="GiB")} | dict.fromkeys(RATES, TOKENS_PER_S) \
    | dict.fromkeys(COUNTS, TOKENS)  # the numbers a row holds that a case is made of
SETTINGS = ("ngl", "n_cpu_moe", "ubatch", "batch", "cpu_threads_used", "concurrency")  # flags: leading integers


@dataclass(frozen=True)
class BenchTableRow:
    """One row of a public llama-bench table. Text cells are None when blank (as pandas reads them) unless said;
    numbers are None when blank or not a number."""

    row_id: str | None
    setup_id: str | None
    source_id: str | None
    model: str | None
    quant: str | None
    engine: str  # "" when blank (llama.cpp, ik_llama.cpp, llama-batched-bench, ...)
    backend: str | None  # the backend column's text (CUDA, Vulkan (coopmat2), ...)
    test_name: str  # "" when blank
    grade: str  # the source's reliability grade, "" when blank
    memory_arch: str | None  # discrete or unified
    kv_type: str  # "" when blank: the KV cache types (f16, q8_0, ...)
    flash_attn: str  # "" when blank: 1/0, on/off, ...
    notes: str  # "" when blank
    ngl_text: str  # "" when blank: the ngl cell's text ("all", "99", ...)
    n_cpu_moe_text: str  # "" when blank: the n_cpu_moe cell's text ("all", "10 (placement label moe10)")
    ngl: int | None  # layers on the GPU (-ngl); negative as written
    n_cpu_moe: int | None  # layers whose experts stay on the CPU
    ubatch: int | None  # tokens
    batch: int | None  # tokens
    cpu_threads_used: int | None
    concurrency: int | None  # sequences (llama-batched-bench's B)
    n_prompt: int | None  # tokens
    n_gen: int | None  # tokens
    n_depth_kv: int | None  # tokens of context before the test
    ctx_tokens: int | None  # tokens (llama-sweep-bench's -c)
    input_tokens: int | None  # tokens (llama-batched-bench's PP)
    output_tokens: int | None  # tokens (llama-batched-bench's TG)
    max_model_len: int | None  # tokens (llama-batched-bench's n_kv_max)
    pp_tok_s: float | None  # tok/s
    tg_tok_s: float | None  # tok/s
    pp_tok_s_aggregate: float | None  # tok/s over all sequences
    output_tok_s: float | None  # tok/s over all sequences
    vram_used_gib: float | None  # GiB
    vram_used_gib_text: str | None  # the cell as written (a cell that is not one number is None above)


def leading_int(value: Any) -> int | None:
    """The leading integer of a cell (``"10 (placement label moe10)"`` -> 10), None when blank or not a number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    m = re.match(r"\s*~?(-?\d+)", str(value))
    return int(m.group(1)) if m else None


def whole_float(value: Any) -> float | None:
    """A cell that is one number (a leading ``~`` dropped), None when blank or anything else."""
    if value is None:
        return None
    m = re.match(r"\s*~?(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$", str(value))
    return float(m.group(1)) if m else None


def bench_row(row: dict[str, str | None], path: str) -> BenchTableRow:
    """A table row (cells as :func:`read_cells` gives them) as a record; a number of :data:`COLUMNS` out of its
    column's range is a one-line ScenarioError at ``path``, ``row ROW_ID.COLUMN``."""
    numbers: dict[str, Any] = {}
    for column, quantity in COLUMNS.items():
        value = (leading_int if column in COUNTS else whole_float)(row.get(column))
        why = None if value is None else quantity.problem(value)
        if why:
            raise ScenarioError(path, f"row {row.get('row_id')}.{column}", why)
        numbers[column] = value
    numbers |= {column: leading_int(row.get(column)) for column in SETTINGS}
    text = {c: str(row.get(c) or "") for c in ("engine", "test_name", "grade", "kv_type", "flash_attn", "notes")}
    return BenchTableRow(**{c: row.get(c) for c in ("row_id", "setup_id", "source_id", "model", "quant", "backend",
                                                    "memory_arch")},
                         **text, ngl_text=str(row.get("ngl") or ""), n_cpu_moe_text=str(row.get("n_cpu_moe") or ""),
                         **numbers, vram_used_gib_text=row.get("vram_used_gib"))


def read_bench_table(path: str) -> list[BenchTableRow]:
    """The rows of the public llama-bench table at ``path``, each number in its column's range."""
    return [bench_row(row, path) for row in read_cells(path)]
