"""The ranges of the numbers llama.cpp's benchmark tools print, one :class:`~sim.formats.quantities.Quantity` per record
field: llama-bench's and llama-sweep-bench's (:data:`RANGES`, read by :mod:`sim.formats.llama_bench`) and
llama-batched-bench's (:data:`BATCHED_RANGES`, :mod:`sim.formats.batched_bench`), in every output format. A record
with a number outside its range (nan, inf, 1e300 t/s, a -1 byte model, 1e12 prompt tokens) is never made: its line is
an unreadable row, with the reason :func:`out_of_range` gives.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from sim.formats.quantities import PARAMETERS, SECONDS, SIZE_BYTES, TOKENS, TOKENS_PER_S, Quantity

Record = TypeVar("Record")  # a reader's record (a dataclass)

RATE_SPREAD = replace(TOKENS_PER_S, name="a spread of token rates", lo_open=False)  # 0.00: one repetition
TIME = replace(SECONDS, lo_open=False)  # batched-bench's T_TG s is 0.000 without generated tokens
SPEED = replace(TOKENS_PER_S, lo_open=False)  # and its speed of no tokens 0.00 (or nan)

RANGES: dict[str, Quantity] = {
    "n_prompt": TOKENS, "n_gen": TOKENS, "n_depth": TOKENS, "n_batch": TOKENS, "n_ubatch": TOKENS,
    "seconds": SECONDS, "avg_ts": TOKENS_PER_S, "stddev_ts": RATE_SPREAD, "model_size_bytes": SIZE_BYTES,
    "model_n_params": PARAMETERS,
}  # a llama-bench or sweep-bench record's numbers (sim.formats.llama_bench.BenchRecord), checked in this order
MD_NAMES = {"avg_ts": "t/s", "stddev_ts": "t/s stddev", "model_size_bytes": "size", "model_n_params": "params"}
FIELD_NAMES = {"model_size_bytes": "model_size", "seconds": "avg_ns / 1e9"}  # csv, json, jsonl, sql
SWEEP_NAMES = {"n_prompt": "PP", "n_gen": "TG", "n_depth": "N_KV"}  # and S_PP t/s or S_TG t/s, T_PP s or T_TG s

BATCHED_RANGES: dict[str, Quantity] = {
    "pp": TOKENS, "tg": TOKENS, "n_kv": TOKENS, "t_pp_s": TIME, "t_tg_s": TIME, "t_s": TIME,
    "s_pp_tok_s": SPEED, "s_tg_tok_s": SPEED, "s_tok_s": SPEED, "n_kv_max": TOKENS, "n_batch": TOKENS,
    "n_ubatch": TOKENS,
}  # a llama-batched-bench row's numbers and its run's settings (sim.formats.batched_bench.BatchedRecord)
BATCHED_NAMES = {"pp": "PP", "tg": "TG", "n_kv": "N_KV", "t_pp_s": "T_PP s", "t_tg_s": "T_TG s", "t_s": "T s",
                 "s_pp_tok_s": "S_PP t/s", "s_tg_tok_s": "S_TG t/s", "s_tok_s": "S t/s"}


def out_of_range(values: dict[str, Any], table: dict[str, Quantity], names: dict[str, str]) -> str | None:
    """The reason the first of ``values`` (field -> number; ``None``: not given) that ``table`` ranges is outside
    its range, named as ``names`` says the format prints it ("t/s 1e+300 tok/s: expected a token rate above 0 and at
    most 10,000,000 tok/s"); None when every one is inside."""
    for key, value in values.items():
        quantity = table.get(key)
        why = None if quantity is None or value is None else quantity.problem(value)
        if why:
            return f"{names.get(key, key)} {why}"
    return None


class Bad(Exception):
    """A value that cannot be read, or is outside its range; its message is the bad line's reason."""


def checked(record: Record, names: dict[str, str], table: dict[str, Quantity] = RANGES) -> Record:
    """``record`` (a dataclass) when each of its fields that ``table`` ranges is inside its range, else :class:`Bad`
    with the reason :func:`out_of_range` gives."""
    why = out_of_range({key: getattr(record, key) for key in table if hasattr(record, key)}, table, names)
    if why:
        raise Bad(why)
    return record
