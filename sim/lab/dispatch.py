"""Dispatcher mechanism (no simpy): estimates, the tie rule and tie-breaks, and the break-even closed forms.

Estimated completion on a machine = queue wait + load time (0 when resident) + tokens / decode rate.
The smallest estimate wins; estimates within ``tie_threshold`` (relative to the best) tie, and a tie-break decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.config.scenario import TieBreak


@dataclass(frozen=True)
class Estimate:
    machine: str
    eligible: bool
    wait_s: float = 0.0
    load_s: float = 0.0
    decode_s: float = 0.0
    decode_tok_s: float = 0.0
    why_not: str = ""  # reason when not eligible
    spilled_gib: float = 0.0  # weights that will not fit and stay in host RAM

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
        what = "clear win" if tie_threshold > 0 else "smallest estimate (no tie rule)"
        return Decision(best.machine, False, (best.machine,),
                        f"{what}: {best.machine} {best.total_s:.1f} s vs {runner.machine} {runner.total_s:.1f} s "
                        f"({gap:.1%} apart, tie threshold {tie_threshold:.0%})")
    pick = min(tied, key=lambda e: _tie_key(e, tie_break))
    others = ", ".join(f"{e.machine} {e.total_s:.1f} s" for e in tied)
    gap = relative_gap(tied[-1].total_s, best.total_s)
    broke = f"tie-break '{tie_break.rule}'"
    if tie_break.rule == "prefer":
        broke += f" (order {list(tie_break.order)}"
        broke += ")" if pick.machine in tie_break.order else "; none of the tied machines is listed: smallest estimate)"
    return Decision(pick.machine, True, tuple(e.machine for e in tied),
                    f"tie within {tie_threshold:.0%}: {others} ({gap:.1%} apart); {broke} picked {pick.machine}")


Region = tuple[float, float]  # [lo, hi) in tokens; hi may be inf


def linear_region(c0: float, c1: float) -> Region | None:
    """Tokens n >= 0 where c0 + c1 * n >= 0: an interval [lo, hi), or None when there are none."""
    if c1 == 0:
        return (0.0, math.inf) if c0 >= 0 else None
    root = -c0 / c1
    if c1 > 0:
        return (max(0.0, root), math.inf)
    return (0.0, root) if root > 0 else None


def breakeven_closed_form(load_a_s: float, rate_a: float, load_b_s: float, rate_b: float,
                          tie_threshold: float) -> dict:
    """Closed forms for completion T_x(n) = L_x + n / r_x of one job of n tokens on machines a and b.

    - ``breakeven_tokens``: T_a(n) = T_b(n), or None when the lines do not cross for n >= 0;
    - ``clear_win``: per machine, the token interval where it wins clearly under the tie rule,
      T_other >= (1 + theta) T_self, or None.
    """
    th = tie_threshold
    slope = 1.0 / rate_a - 1.0 / rate_b
    root = (load_b_s - load_a_s) / slope if slope != 0 else math.nan
    return {
        "breakeven_tokens": root if slope != 0 and root >= 0 else None,
        "clear_win": {
            "a": linear_region(load_b_s - (1 + th) * load_a_s, 1.0 / rate_b - (1 + th) / rate_a),
            "b": linear_region(load_a_s - (1 + th) * load_b_s, 1.0 / rate_a - (1 + th) / rate_b),
        },
    }
