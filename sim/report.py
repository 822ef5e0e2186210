"""Human-readable text for ``sim run`` and ``sim breakeven``."""

from __future__ import annotations

import math

from .hardware import link_info
from .runner import RunResult


def _num(x: float, fmt: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def run_text(res: RunResult) -> str:
    scn = res.scenario
    out = [f"scenario {scn.name} (seed {res.seed})", ""]
    if res.probes:
        p0 = res.probes[0]
        out.append(f"Load of {p0.model} ({p0.gb:.2f} GB), {scn.loading.composition} stages, "
                   f"{scn.loading.chunk_mib:g} MiB chunks")
        out.append(f"  {'machine':<14}{'link (GB/s)':<22}{'cold':>7}{'hot':>7}{'link':>7} GB/s"
                   f"{'disk':>8}{'other':>7} s/GB   cold s = disk + loader + link")
        for p in res.probes:
            m = scn.machines[p.machine]
            if m.kind == "unified":
                link = "unified memory"
            else:
                infos = [link_info(scn, m, g) for g in m.gpus]
                li = infos[0]
                link = f"{len(infos)}x Gen{li.gen} x{li.lanes} {li.gbps:.2f}" if len(infos) > 1 else \
                    f"Gen{li.gen} x{li.lanes} {li.gbps:.2f}"
            c = p.cold
            out.append(f"  {p.machine:<14}{link:<22}{p.cold.gbps:>7.2f}{p.hot.gbps:>7.2f}"
                       f"{_num(p.link.gbps if p.link else None):>7}     "
                       f"{p.disk_s_per_gb:>8.3f}{p.other_s_per_gb:>7.3f}"
                       f"      {c.wall_s:>6.2f} = {c.disk_s:.2f} + {c.loader_s:.2f} + {c.link_s:.2f}")
            if not p.fits:
                spilled = p.cold.spilled_bytes / 2**30
                out.append(f"    ! {p.model} does not fit: {spilled:.1f} GiB would stay in host RAM")
            if m.note:
                out.append(f"    note: {m.note}")
        out.append("")
    if res.jobs:
        d = scn.dispatch
        tb = d.tie_break.rule + (f" {list(d.tie_break.order)}" if d.tie_break.rule == "prefer" else "")
        out.append(f"Jobs (isolation {d.isolation}, tie threshold {d.tie_threshold:.0%}, tie-break {tb})")
        for j in res.jobs:
            out.append(f"  {j.id}: {j.tokens} tokens of {j.model}, arrives at {j.arrival_s:g} s")
            for e in j.estimates:
                if e.eligible:
                    out.append(f"    {e.machine:<14}{e.total_s:>9.1f} s = wait {e.wait_s:.1f} + load {e.load_s:.1f}"
                               f" + decode {e.decode_s:.1f} ({e.decode_tok_s:g} tok/s)")
                else:
                    out.append(f"    {e.machine:<14}{'n/a':>9}   {e.why_not}")
            out.append(f"    -> {j.machine or 'nowhere'}: {j.decision.reason}")
            if j.machine:
                out.append(f"       simulated: done at {j.completed_s:.1f} s "
                           f"(predicted {j.predicted_completion_s:.1f} s);"
                           f" waited {j.wait_s:.1f} s, loaded {j.load_s:.1f} s, decoded {j.decode_s:.1f} s"
                           + (f", SPILLED {j.spilled_gib:.1f} GiB to host RAM" if j.spilled_gib > 0 else ""))
    return "\n".join(out) + "\n"


def _tok(x: float) -> str:
    return "never" if not math.isfinite(x) else f"{x:,.0f}"


def breakeven_text(r: dict) -> str:
    cf = r["closed_form"]
    fast, other = r["faster_decoder"], (r["b"] if r["faster_decoder"] == r["a"] else r["a"])
    lines = [
        f"break-even of {r['model']}: {r['a']} vs {r['b']} (seed {r['seed']}, {r['evaluations']} simulated jobs)",
        f"  {fast}: decodes {r['decode_tok_s'][fast]:g} tok/s, loads in {r['load_s'][fast]:.2f} s",
        f"  {other}: decodes {r['decode_tok_s'][other]:g} tok/s, loads in {r['load_s'][other]:.2f} s",
        "",
        f"  {'':<44}{'simulated':>12}{'closed form':>14}",
    ]
    rows = [("break-even (load counted, no tie rule)", "breakeven_tokens"),
            (f"{fast} wins clearly from (tie rule {r['tie_threshold']:.0%})", "clear_win_tokens"),
            (f"{other} wins clearly below", "fast_loader_clear_below_tokens")]
    for label, key in rows:
        lines.append(f"  {label:<44}{_tok(r[key]):>12}{_tok(cf[key]):>14}")
    lines.append("")
    lines.append(f"  Shorter jobs belong to {r['faster_loader']}, longer ones to {fast}; between the two clear-win"
                 " counts the estimates tie and the tie-break decides.")
    return "\n".join(lines) + "\n"
