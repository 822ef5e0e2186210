"""Human-readable text for ``sim run`` and ``sim breakeven``."""

from __future__ import annotations

import math

from sim.config.links import link_info
from sim.runner import RunResult


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
                groups: dict[str, int] = {}
                for g in m.gpus:
                    li = link_info(scn, m, g)
                    key = f"Gen{li.gen} x{li.lanes} {li.gbps:.2f}"
                    groups[key] = groups.get(key, 0) + 1
                link = " + ".join(f"{n}x {k}" if n > 1 else k for k, n in groups.items())
            c = p.cold
            out.append(f"  {p.machine:<14}{link:<22}{p.cold.gbps:>7.2f}{p.hot.gbps:>7.2f}"
                       f"{_num(p.link.link_gbps if p.link else None):>7}     "
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
    if res.kind is not None and res.serving is not None:
        lines = res.kind.report_lines(scn, res.serving, res.serve_metrics)
        out += lines[0 if out[-1] else 1:]
    return "\n".join(out) + "\n"


def _tok(x: float | None) -> str:
    return "never" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def _region(r: list[float] | None) -> str:
    if r is None:
        return "never"
    lo, hi = r
    if math.isinf(hi):
        return "always" if lo == 0 else f"from {lo:,.0f}"
    return f"below {hi:,.0f}" if lo == 0 else f"{lo:,.0f} to {hi:,.0f}"


def breakeven_text(r: dict) -> str:
    a, b, cf = r["a"], r["b"], r["closed_form"]
    lines = [f"break-even of {r['model']}: {a} vs {b} (seed {r['seed']}, {r['evaluations']} simulated jobs)"]
    for m in (a, b):
        spill = r["spilled_gib"][m]
        note = f" ({spill:.1f} GiB spilled to host RAM, streamed every token)" if spill > 0 else ""
        lines.append(f"  {m}: decodes {r['decode_tok_s'][m]:.4g} tok/s{note}, loads in {r['load_s'][m]:.2f} s")
    lines += ["", f"  {'tokens':<46}{'simulated':>16}{'closed form':>18}",
              f"  {'break-even (load counted, no tie rule)':<46}{_tok(r['breakeven_tokens']):>16}"
              f"{_tok(cf['breakeven_tokens']):>18}"]
    for m in (a, b):
        lines.append(f"  {m + ' wins clearly (tie rule ' + format(r['tie_threshold'], '.0%') + ')':<46}"
                     f"{_region(r['clear_win'][m]):>16}{_region(cf['clear_win'][m]):>18}")
    lines.append("")
    short, long = r["wins_short_jobs"], r["wins_long_jobs"]
    if math.isfinite(r["breakeven_tokens"]) and r["breakeven_tokens"] > 1:
        lines.append(f"  Jobs shorter than {_tok(r['breakeven_tokens'])} tokens finish sooner on {short}, longer ones "
                     f"on {long}; where neither wins clearly the estimates tie and the tie-break decides.")
    else:
        lines.append(f"  {long} finishes sooner at every job length: the two never break even.")
    if not r["closed_form_agrees"]:
        lines.append("  ! simulation and closed form disagree by more than one token: the simulation includes what the "
                     "closed form leaves out (decode jitter, page-cache state)")
    u = r.get("uncertainty")
    if u:
        lines += ["", f"  over {u['draws']} draws of {', '.join(u['parameters'])}:"]
        for key, label in (("breakeven_tokens", "break-even"),
                           ("clear_win_tokens", f"{u['clear_win_machine']} wins clearly from")):
            q = u[key]
            never = f"; never in {q['never_share']:.0%} of draws" if q["never_share"] > 0 else ""
            lines.append(f"    {label}: {_tok(q['median'])} tokens (90% interval {_tok(q['p5'])} to "
                         f"{_tok(q['p95'])}){never}")
        lines.append("    faster decoder: " + ", ".join(f"{m} in {share:.0%} of draws"
                                                       for m, share in u["faster_decoder_share"].items()))
    return "\n".join(lines) + "\n"
