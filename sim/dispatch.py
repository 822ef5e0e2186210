"""Dispatcher mechanism (no simpy): estimates, the tie rule and tie-breaks, and the break-even closed forms.

Estimated completion on a machine = queue wait + load time (0 when resident) + tokens / decode rate.
The smallest estimate wins; estimates within ``tie_threshold`` (relative to the best) tie, and a tie-break decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .scenario import TieBreak


@dataclass(frozen=True)
class Estimate:
    machine: str
    eligible: bool
    wait_s: float = 0.0
    load_s: float = 0.0
    decode_s: float = 0.0
    decode_tok_s: float = 0.0
    why_not: str = ""  # reason when not eligible

    @property
    def total_s(self) -> float:
        return self.wait_s + self.load_s + self.decode_s


@dataclass(frozen=True)
class Decision:
    chosen: str | None
    tie: bool
    tied: tuple[str, ...]
    reason: str


def relative_gap(a: float, b: float) -> float:
    """(larger - smaller) / smaller; the measure the 10% tie rule uses."""
    lo, hi = min(a, b), max(a, b)
    if lo <= 0:
        return math.inf if hi > 0 else 0.0
    return (hi - lo) / lo


def _tie_key(e: Estimate, rule: TieBreak):
    if rule.rule == "prefer":
        rank = rule.order.index(e.machine) if e.machine in rule.order else len(rule.order)
        return (rank, e.total_s, e.machine)
    if rule.rule == "fastest_decode":
        return (-e.decode_tok_s, e.total_s, e.machine)
    if rule.rule == "fastest_load":
        return (e.load_s, e.total_s, e.machine)
    if rule.rule == "shortest_queue":
        return (e.wait_s, e.total_s, e.machine)
    return (e.total_s, e.machine)


def decide(estimates: list[Estimate], tie_threshold: float, tie_break: TieBreak) -> Decision:
    ok = sorted((e for e in estimates if e.eligible), key=lambda e: (e.total_s, e.machine))
    if not ok:
        why = "; ".join(f"{e.machine}: {e.why_not}" for e in estimates) or "no machines"
        return Decision(None, False, (), f"no eligible machine ({why})")
    best = ok[0]
    tied = [best] + [e for e in ok[1:] if relative_gap(e.total_s, best.total_s) < tie_threshold]
    if len(ok) == 1:
        return Decision(best.machine, False, (best.machine,), f"only eligible machine ({best.total_s:.1f} s)")
    if len(tied) == 1:
        runner = ok[1]
        gap = relative_gap(best.total_s, runner.total_s)
        return Decision(best.machine, False, (best.machine,),
                        f"clear win: {best.machine} {best.total_s:.1f} s vs {runner.machine} {runner.total_s:.1f} s "
                        f"({gap:.1%} apart, tie threshold {tie_threshold:.0%})")
    pick = min(tied, key=lambda e: _tie_key(e, tie_break))
    others = ", ".join(f"{e.machine} {e.total_s:.1f} s" for e in tied)
    gap = relative_gap(tied[-1].total_s, best.total_s)
    broke = f"tie-break '{tie_break.rule}'"
    if tie_break.rule == "prefer":
        broke += f" (order {list(tie_break.order)})"
    return Decision(pick.machine, True, tuple(e.machine for e in tied),
                    f"tie within {tie_threshold:.0%}: {others} ({gap:.1%} apart); {broke} picked {pick.machine}")


def breakeven_closed_form(load_fast_decoder_s: float, rate_fast: float,
                          load_slow_decoder_s: float, rate_slow: float, tie_threshold: float) -> dict[str, float]:
    """Token counts where a fast decoder (rate_fast > rate_slow) catches up with a fast loader.

    - ``breakeven_tokens``: L_f + N/r_f = L_s + N/r_s.
    - ``clear_win_tokens``: the fast decoder wins clearly, L_s + N/r_s = (1 + theta)(L_f + N/r_f).
    - ``fast_loader_clear_below_tokens``: the fast loader wins clearly below this,
      L_f + N/r_f = (1 + theta)(L_s + N/r_s).
    Infinite where the line never crosses.
    """
    th = tie_threshold
    inv_f, inv_s = 1.0 / rate_fast, 1.0 / rate_slow

    def cross(num: float, den: float) -> float:
        if den <= 0:
            return math.inf if num > 0 else 0.0
        return max(0.0, num / den)

    return {
        "breakeven_tokens": cross(load_fast_decoder_s - load_slow_decoder_s, inv_s - inv_f),
        "clear_win_tokens": cross((1 + th) * load_fast_decoder_s - load_slow_decoder_s, inv_s - (1 + th) * inv_f),
        "fast_loader_clear_below_tokens": cross(load_fast_decoder_s - (1 + th) * load_slow_decoder_s,
                                                (1 + th) * inv_s - inv_f),
    }
