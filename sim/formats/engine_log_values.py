"""The physical ranges of what a log line says and the number reader that enforces them
(:mod:`sim.formats.engine_logs`).

Every number a row or start-up fact holds has one :class:`~sim.formats.quantities.Quantity` (:data:`FIELDS`,
:data:`FACTS`): token counts, times in s, rates in tok/s, shares 0-1, sizes, bandwidths, counts, with the input
layer's bounds. A printed rate is also checked against the tokens and time printed beside it (:func:`check_rate`,
within the rounding of both), a part against its whole (cached against prompt tokens, hits against lookups). A value
that fails is :class:`OutOfRange`: its line is counted as not understood, with the reason.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from sim.formats.quantities import BANDWIDTH_GBPS, SECONDS, SHARE, SIZE_GB, TOKENS, TOKENS_PER_S, Quantity

TIME = replace(SECONDS, lo_open=False)  # a log prints 0.0 s for what took less than its precision
RATE = replace(TOKENS_PER_S, lo_open=False)  # 0 when nothing was timed (an idle vLLM interval, a fully cached prompt)
COUNT = Quantity("a count", "", 0.0, 1e9, "requests running or waiting, cache slots: a billion is beyond any server",
                 lo_open=False)
GB = replace(SIZE_GB, lo_open=False)  # a device may hold none of the model
GIB = replace(GB, unit="GiB")
MIB = replace(GB, unit="MiB", hi=GB.hi * 1000)
FIELDS: dict[str, Quantity] = {
    "prompt_tokens": TOKENS, "cached_tokens": TOKENS, "output_tokens": TOKENS,
    "prefill_s": TIME, "decode_s": TIME, "ttft_s": TIME,
    "prefill_tok_s": RATE, "decode_tok_s": RATE, "prompt_throughput_tok_s": RATE, "generation_throughput_tok_s": RATE,
    "running": COUNT, "waiting": COUNT,
    "acceptance": SHARE, "expert_hit_rate": SHARE, "pcie_share": SHARE, "kv_usage": SHARE, "prefix_hit_rate": SHARE,
}  # a row's numbers
FACTS: dict[str, Quantity] = {
    "gib": GIB, "seconds": TIME, "compilation_s": TIME, "resident_gb": GB, "pool": COUNT, "free_gib": GIB,
    "reserve_mib": MIB, "head_mib": MIB, "slots": COUNT, "gbps": BANDWIDTH_GBPS,
}  # a start-up fact's numbers; any other ``*_gib`` (a device's share of a load) is GIB
TIMED = {"prefill_tok_s": "the prompt", "decode_tok_s": "the output"}  # a rate > 0 when tokens were timed
SLACK = 0.02  # relative: a printed rate may differ this much from its tokens over its time beyond their rounding


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


def _n(value: float) -> str:
    """A number in a reason as the input layer prints one: 1,153 or 2,106.1 or 0.12345 or 1e+300."""
    return f"{int(value):,}" if value == int(value) and abs(value) < 1e15 else f"{value:,.6g}"


def _quantity(key: str, table: dict[str, Quantity]) -> Quantity | None:
    return table.get(key) or (GIB if table is FACTS and key.endswith("_gib") else None)


def _check(values: dict) -> dict:
    """``values`` (row fields) when the cached tokens are not more than the prompt's, each value is inside its range
    (:data:`FIELDS`) and no rate is 0 for tokens timed; else OutOfRange naming the first value that is not."""
    prompt, cached = values.get("prompt_tokens"), values.get("cached_tokens")
    if prompt is not None and cached is not None and cached > prompt:
        raise OutOfRange(f"cached_tokens {cached:,} is more than prompt_tokens {prompt:,}")
    for key, v in values.items():
        q = None if v is None or isinstance(v, str) else _quantity(key, FIELDS)
        why = q and q.problem(v)
        if why:
            raise OutOfRange(f"{key} {why}")
    for key in TIMED:
        if values.get(key) == 0:
            timed = ((values.get("prompt_tokens") or 0) - (values.get("cached_tokens") or 0)
                     if key == "prefill_tok_s" else values.get("output_tokens") or 0)
            if timed > 0:
                raise OutOfRange(f"{key} is 0 for {timed} tokens")
    return values


def _check_fact(fact: dict) -> dict:
    """A start-up fact whose numbers are each inside their range (:data:`FACTS`), else OutOfRange."""
    for key, v in fact.items():
        q = _quantity(key, FACTS) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        if q is None and isinstance(v, (int, float)) and not (math.isfinite(v) and v >= 0):
            raise OutOfRange(f"{fact['kind']} {key} {v:g} is outside its range (>= 0)")
        why = q and q.problem(v)
        if why:
            raise OutOfRange(f"{fact['kind']} {key} {why}")
    return fact


def _pct(text: str | None) -> float | None:
    value = _f(text)
    return None if value is None else value / 100


def half_unit(text: str) -> float:
    """Half the last printed digit of a number as printed (``2.2`` -> 0.05, ``5492`` -> 0.5, ``1.5e3`` -> 50): how
    far the value it was rounded from may lie."""
    mantissa, _, exponent = text.strip().replace(",", ".").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    power = int(exponent) if exponent and len(exponent) <= 6 else 0
    return 0.5 * 10.0 ** min(max(power - decimals, -400), 300)


def agrees(printed: float, printed_text: str, low: float, high: float) -> bool:
    """Whether ``printed`` (as ``printed_text``) is a rounding of a value from ``low`` to ``high``, give or take
    :data:`SLACK`."""
    half = half_unit(printed_text)
    return low * (1 - SLACK) - half <= printed <= high * (1 + SLACK) + half


def check_rate(key: str, rate_text: str | None, tokens: int, time_text: str | None, scale: float = 1.0) -> None:
    """OutOfRange when the rate printed as ``rate_text`` (tok/s) is not ``tokens`` over the time printed as
    ``time_text`` (in s times ``scale``: 1e-3 for ms), within the rounding of both; nothing when either is not
    printed or no tokens were timed."""
    rate, seconds = _f(rate_text), _f(time_text)
    if rate is None or seconds is None or tokens <= 0 or rate_text is None or time_text is None:
        return
    half = half_unit(time_text)
    low = tokens / ((seconds + half) * scale)
    high = tokens / ((seconds - half) * scale) if seconds > half else math.inf
    if not agrees(rate, rate_text, low, high):
        raise OutOfRange(f"{key} {_n(rate)} tok/s is not {tokens:,} tokens / {_n(seconds * scale)} s "
                         f"= {_n(round(tokens / (seconds * scale), 2)) if seconds else 'inf'} tok/s")


def check_per_token(per_text: str | None, tokens: int, ms_text: str | None) -> None:
    """OutOfRange when the ``ms per token`` printed as ``per_text`` is not the printed ms over ``tokens``."""
    per, ms = _f(per_text), _f(ms_text)
    if per is None or ms is None or tokens <= 0 or per_text is None or ms_text is None:
        return
    half = half_unit(ms_text)
    if not agrees(per, per_text, max(ms - half, 0.0) / tokens, (ms + half) / tokens):
        raise OutOfRange(f"ms per token {_n(per)} is not {_n(ms)} ms / {tokens:,} tokens = {_n(round(ms / tokens, 2))}")


def check_share(key: str, pct_text: str | None, part: int, whole: int, part_name: str, whole_name: str) -> None:
    """OutOfRange when ``part`` is more than ``whole`` or the percentage printed as ``pct_text`` is not part / whole
    (within its rounding); ``part_name`` and ``whole_name`` name them ("hits", "lookups")."""
    if part > whole:
        raise OutOfRange(f"{part:,} {part_name} are more than {whole:,} {whole_name}")
    pct = _f(pct_text)
    if pct is None or pct_text is None or whole <= 0:
        return
    exact = 100 * part / whole
    if not agrees(pct, pct_text, exact, exact):
        raise OutOfRange(f"{key} {_n(pct)}% is not {part:,} {part_name} / {whole:,} {whole_name} = {exact:.2f}%")


def timing(kind: str, m: re.Match) -> dict:
    """The checked values of one llama.cpp timing entry: a prompt or eval half's tokens, seconds and rate (the
    printed rate and ms per token agreeing with the printed tokens and ms), a draft line's acceptance; {} for a
    total line."""
    if kind == "total":
        return {}
    if kind == "draft":
        return _check({"acceptance": _f(m["rate"])})
    ms, n, rate = _f(m["ms"]), int(m["n"]), _f(m["rate"])
    rate = rate if rate is not None else (n / (ms / 1000) if ms else None)
    seconds = None if ms is None else ms / 1000
    values = _check({"prompt_tokens": n, "prefill_s": seconds, "prefill_tok_s": rate} if kind == "prompt"
                    else {"output_tokens": n, "decode_s": seconds, "decode_tok_s": rate})
    check_rate("prefill_tok_s" if kind == "prompt" else "decode_tok_s", m["rate"], n, m["ms"], 1e-3)
    check_per_token(m["per"], n, m["ms"])
    return values
