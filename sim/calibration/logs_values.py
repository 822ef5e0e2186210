"""The physical ranges of what a log line says (shares 0-1, times and counts >= 0, finite numbers, rates > 0 where
something was timed) and the number reader that enforces them (:mod:`sim.calibration.logs`)."""

from __future__ import annotations

import math

SHARES = frozenset(("acceptance", "expert_hit_rate", "pcie_share", "kv_usage", "prefix_hit_rate"))
NON_NEGATIVE = frozenset(("prompt_tokens", "cached_tokens", "output_tokens", "running", "waiting", "prefill_s",
                          "decode_s", "ttft_s", "prompt_throughput_tok_s", "generation_throughput_tok_s"))
RATES = frozenset(("prefill_tok_s", "decode_tok_s"))  # > 0 when tokens were timed, else >= 0


class OutOfRange(ValueError):
    """A value read outside its physical range: its line is counted as not understood, with this reason."""


def _f(text: str | None) -> float | None:
    """A number as printed; None when absent or printed as nan / inf (not measured). A number too large to be
    finite raises OutOfRange."""
    if text is None or text.strip().lstrip("+-").lower() in ("nan", "inf"):
        return None
    try:
        value = float(text.replace(",", "."))
    except ValueError:
        return None
    if not math.isfinite(value):
        raise OutOfRange(f"{text.strip()} is not a finite number")
    return value


def _check(values: dict) -> dict:
    """``values`` (row fields) when each is inside its physical range, else OutOfRange naming the first outside."""
    for key, v in values.items():
        if v is None or isinstance(v, str):
            continue
        if not math.isfinite(v):
            raise OutOfRange(f"{key} {v} is not finite")
        if key in SHARES and not 0 <= v <= 1:
            raise OutOfRange(f"{key} {v:g} is outside 0-1")
        if (key in NON_NEGATIVE or key in RATES) and v < 0:
            raise OutOfRange(f"{key} {v:g} is negative")
        if key in RATES and v == 0:
            timed = ((values.get("prompt_tokens") or 0) - (values.get("cached_tokens") or 0)
                     if key == "prefill_tok_s" else values.get("output_tokens") or 0)
            if timed > 0:
                raise OutOfRange(f"{key} is 0 for {timed} tokens")
    return values


def _check_fact(fact: dict) -> dict:
    """A start-up fact whose numbers are all finite and >= 0, else OutOfRange."""
    for key, v in fact.items():
        if isinstance(v, (int, float)) and not (math.isfinite(v) and v >= 0):
            raise OutOfRange(f"{fact['kind']} {key} {v:g} is outside its range (>= 0)")
    return fact


def _pct(text: str | None) -> float | None:
    value = _f(text)
    return None if value is None else value / 100
