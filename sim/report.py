"""Human-readable text for ``sim run`` (with ``--uncertainty`` too), ``sim breakeven`` and ``sim validate``: every line
within 120 columns, one unit per quantity."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Protocol

from sim.config.links import link_info
from sim.core.text import WIDTH, number, plural, table, unit_of, wrap, wrap_all
from sim.lab.loaders import composition, stage_costs
from sim.lab.startup import VLLM_KINDS, VLLM_PHASES, startup, vllm_phases
from sim.runner import RunResult


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _link(scn, m) -> str:
    """A machine's GPU links, grouped: ``Gen4 x16 26.49``, ``3x Gen2 x4 1.68`` (GB/s), or ``unified memory``."""
    if m.kind == "unified":
        return "unified memory"
    groups: dict[str, int] = {}
    for g in m.gpus:
        li = link_info(scn, m, g)
        key = f"Gen{li.gen} x{li.lanes} {li.gbps:.2f}"
        groups[key] = groups.get(key, 0) + 1
    return " + ".join(f"{n}x {k}" if n > 1 else k for k, n in groups.items())


def load_lines(res: RunResult) -> list[str]:
    """Each machine's simulated load of the report model: a table with its unit under each column, then notes."""
    scn = res.scenario
    p0 = res.probes[0]
    rows, notes = [], []
    for p in res.probes:
        c = p.cold
        rows.append([p.machine, _link(scn, scn.machines[p.machine]), f"{p.cold.gbps:.2f}", f"{p.hot.gbps:.2f}",
                     _num(p.link.link_gbps if p.link else None), f"{p.disk_s_per_gb:.3f}", f"{p.other_s_per_gb:.3f}",
                     f"{c.wall_s:.2f}", "=", f"{c.disk_s:.2f}", "+", f"{c.loader_s:.2f}", "+", f"{c.link_s:.2f}"])
        if not p.fits:
            notes.append(f"  ! {p.machine}: {p.model} does not fit, {p.cold.spilled_bytes / 2**30:.1f} GiB would stay "
                         "in host RAM")
        if scn.machines[p.machine].note:
            notes.append(f"  note ({p.machine}): {scn.machines[p.machine].note}")
    head = [["machine", "link", "cold", "hot", "link-only", "disk", "other", "cold load", "", "disk", "", "loader", "",
             "link"], ["", "GB/s", "GB/s", "GB/s", "GB/s", "s/GB", "s/GB", "s", "", "s", "", "s", "", "s"]]
    generic = all(scn.machines[p.machine].loader.kind == "generic" for p in res.probes)
    stages = f"{scn.loading.composition} stages" if generic else "each loader's stages (start-up table)"
    return [f"Load of {p0.model} ({p0.gb:.2f} GB), {stages}, {scn.loading.chunk_mib:g} MiB chunks",
            *table(rows, head, "llrrrrrrcrcrcr"), *notes, ""]


def startup_lines(res: RunResult) -> list[str]:
    """Each machine's server start with the report model: its phases ("-": not given), cold (page cache dropped)
    and hot."""
    scn = res.scenario

    def sec(v: float) -> str:
        return f"{v:.2f}" if v > 0 else "-"

    rows = []
    for p in res.probes:
        m = scn.machines[p.machine]
        cold, hot = startup(m, p.cold.wall_s), startup(m, p.hot.wall_s)
        rows.append([p.machine, f"{m.loader.kind} ({composition(scn, stage_costs(scn, m))})", sec(cold.process_s),
                     sec(cold.gpu_context_s), sec(cold.kv_alloc_s), sec(cold.warmup_s), f"{cold.weights_s:.2f}",
                     f"{hot.weights_s:.2f}", f"{cold.total_s:.2f}", f"{hot.total_s:.2f}"])
    head = [["machine", "loader", "process", "GPU ctx", "KV", "warm-up", "weights", "weights", "start", "start"],
            ["", "", "s", "s", "s", "s", "cold s", "hot s", "cold s", "hot s"]]
    vllm = [f"  {p.machine} (cold), as vLLM logs it: " + "; ".join(
                f"{VLLM_PHASES[k].split('%')[0].strip()} {v:.2f} s"
                for k, v in vllm_phases(startup(scn.machines[p.machine], p.cold.wall_s)).items())
            for p in res.probes if scn.machines[p.machine].loader.kind in VLLM_KINDS]
    return [f"Start-up of a server with {res.probes[0].model} (the phases of its log)",
            *table(rows, head, "llrrrrrrrr"), *vllm, ""]


def job_lines(res: RunResult) -> list[str]:
    """Every job: its estimate on every machine (aligned across jobs), where it went and why, and its simulated
    run."""
    d = res.scenario.dispatch
    tb = d.tie_break.rule + (f" {', then '.join(d.tie_break.order)}" if d.tie_break.rule == "prefer" else "")
    rows = [[e.machine, f"{e.total_s:.1f} s", f"= wait {e.wait_s:.1f} + load {e.load_s:.1f} + decode "
             f"{e.decode_s:.1f} ({e.decode_tok_s:g} tok/s)"] if e.eligible else [e.machine, "n/a", e.why_not]
            for j in res.jobs for e in j.estimates]
    estimates = iter(table(rows, [], "lrl", indent=4))
    out = [f"Jobs (isolation {d.isolation}, tie threshold {d.tie_threshold:.0%}, tie-break {tb})"]
    for j in res.jobs:
        out.append(f"  {j.id}: {plural(j.tokens, 'token')} of {j.model}, arrives at {j.arrival_s:g} s")
        out += [next(estimates) for _ in j.estimates]
        out += wrap(f"    -> {j.machine or 'nowhere'}: {j.decision.reason}", hang=3)
        if j.machine:
            out += wrap(f"       simulated: done at {j.completed_s:.1f} s (predicted {j.predicted_completion_s:.1f} "
                        f"s); waited {j.wait_s:.1f} s, loaded {j.load_s:.1f} s, decoded {j.decode_s:.1f} s"
                        + (f", SPILLED {j.spilled_gib:.1f} GiB to host RAM" if j.spilled_gib > 0 else ""), hang=2)
    return out


def run_text(res: RunResult) -> str:
    """What ``sim run`` prints: the loads, the jobs and the served workload, every line within 120 columns."""
    scn = res.scenario
    out = [f"scenario {scn.name} (seed {res.seed})", ""]
    if res.probes:
        out += load_lines(res)
        out += startup_lines(res)
    if res.jobs:
        out += job_lines(res)
    if res.kind is not None and res.serving is not None:
        lines = res.kind.report_lines(scn, res.serving, res.serve_metrics)
        out += lines[0 if out[-1] else 1:]
    if res.bench:
        from sim.llamacpp.report import bench_table, model_size_gib, placement_lines

        st = res.bench_setup
        b = scn.bench
        model = scn.machines[b.machine].engine.model
        out += ([""] if out[-1] else []) + [f"llama-bench on {b.machine} ({model}):"]
        if st is not None:
            out += placement_lines(st)
        size = model_size_gib(st) if st is not None else scn.models[model].weights_gib
        out += ["", *bench_table(res.bench, model, size)]
    return "\n".join(wrap_all(out)) + "\n"


def _tok(x: float | None) -> str:
    return "never" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def _region(r: list[float] | None) -> str:
    if r is None:
        return "never"
    lo, hi = r
    if math.isinf(hi):
        return "always" if lo == 0 else f"from {lo:,.0f}"
    return f"below {hi:,.0f}" if lo == 0 else f"{lo:,.0f} to {hi:,.0f}"


def _rate(x: float) -> str:
    """A decode rate: four significant digits, thousands separated, never an exponent."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def breakeven_text(r: dict) -> str:
    """What ``sim breakeven`` prints: both machines, the break-even and the clear-win ranges (simulated and closed
    form, in generated tokens), what they mean, and with ``--uncertainty`` their medians and 90% intervals."""
    a, b, cf = r["a"], r["b"], r["closed_form"]
    lines = [f"break-even of {r['model']}: {a} vs {b} (seed {r['seed']}, "
             f"{plural(r['evaluations'], 'simulated job')})"]
    for m in (a, b):
        spill = r["spilled_gib"][m]
        note = f" ({spill:.1f} GiB spilled to host RAM, streamed every token)" if spill > 0 else ""
        lines.append(f"  {m}: decodes {_rate(r['decode_tok_s'][m])} tok/s{note}, loads in {r['load_s'][m]:.2f} s")
    rows = [["break-even (load counted, no tie rule)", _tok(r["breakeven_tokens"]), _tok(cf["breakeven_tokens"])]]
    rows += [[f"{m} wins clearly (tie rule {r['tie_threshold']:.0%})", _region(r["clear_win"][m]),
              _region(cf["clear_win"][m])] for m in (a, b)]
    lines += ["", *table(rows, ["generated tokens", "simulated", "closed form"], "lrr"), ""]
    short, long = r["wins_short_jobs"], r["wins_long_jobs"]
    if math.isfinite(r["breakeven_tokens"]) and r["breakeven_tokens"] > 1:
        lines += [f"  Jobs shorter than {_tok(r['breakeven_tokens'])} tokens finish sooner on {short}, longer ones "
                  f"on {long}.", "  Where neither wins clearly the estimates tie and the tie-break decides."]
    else:
        lines.append(f"  {long} finishes sooner at every job length: the two never break even.")
    if not r["closed_form_agrees"]:
        lines.append("  ! simulation and closed form disagree by more than one token: the simulation includes what the "
                     "closed form leaves out (decode jitter, page-cache state)")
    u = r.get("uncertainty")
    if u:
        lines += ["", f"  over {plural(u['draws'], 'draw')} of {', '.join(u['parameters'])}:"]
        for key, label in (("breakeven_tokens", "break-even"),
                           ("clear_win_tokens", f"{u['clear_win_machine']} wins clearly from")):
            q = u[key]
            never = f"; never in {q['never_share']:.0%} of draws" if q["never_share"] > 0 else ""
            lines.append(f"    {label}: {_tok(q['median'])} tokens (90% interval {_tok(q['p5'])} to "
                         f"{_tok(q['p95'])}){never}")
        lines.append("    faster decoder: " + ", ".join(f"{m} in {share:.0%} of draws"
                                                       for m, share in u["faster_decoder_share"].items()))
    return "\n".join(wrap_all(lines)) + "\n"


class ValidatedCell(Protocol):
    """What :func:`validate_text` reads of a cell (``sim.calibration.validate.Cell``)."""

    table: str
    cell: str
    measured: float
    simulated: float
    tolerance: float
    kind: str
    info: str
    lo: float | None
    hi: float | None

    @property
    def error(self) -> float: ...

    @property
    def status(self) -> str: ...


def _value(x: float) -> str:
    """A measured or simulated value in its own unit: four significant digits, thousands separated, no exponent."""
    if not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def validate_text(cells: Sequence[ValidatedCell], not_checked: Mapping[str, str]) -> str:
    """What ``sim validate`` prints: the cells grouped by measured table, one row each with status, cell, measured
    and simulated value (the cell's own unit), and its error and tolerance, relative in % for rates and ranges or in
    percentage points for shares (fractions 0-1), each in its own pair of columns; a reported-only cell's reason on
    the line below it; then the tables not checked and the counts. Every line within 120 columns."""
    head = [["status", "cell", "measured", "simulated", "error", "tol.", "error", "tol."],
            ["", "", "", "", "%", "%", "pts", "pts"]]
    rows: list[list[str]] = []
    for c in cells:
        measured = _value(c.measured) if c.lo is None else f"{_value(c.lo)}-{_value(c.hi)}"
        err, tol = f"{c.error * 100:+.1f}", f"{c.tolerance * 100:g}"
        pair = ["", "", err, tol] if c.kind == "share" else [err, tol, "", ""]
        rows.append([c.status, c.cell or "-", measured, _value(c.simulated), *pair])
    widths = [max(len(r[i]) for r in head + rows) for i in range(len(head[0]))]
    room = max(WIDTH - 2 - 2 * 7 - sum(widths) + widths[1], 24)  # what the cell column may take
    for r in rows:
        r[1] = "\n".join(textwrap.wrap(r[1], room))
    body = table(rows, head, "llrrrrrr")
    out = body[:2]
    lines = iter(body[2:])
    group = None
    for c, row in zip(cells, rows, strict=True):
        if c.table != group:
            group = c.table
            out.append(f"{group}:")
        out += [next(lines) for _ in range(row[1].count("\n") + 1)]
        if c.info:
            out += wrap(f"{' ' * (4 + widths[0])}note: {c.info}", hang=6)
    if not_checked:
        out.append("not checked:")
        out += [part for name, why in not_checked.items() for part in wrap(f"  {name}: {why}")]
    out += ["error: simulated against measured, relative in % (from a range's nearer end, 0 inside it) or in "
            "percentage points", "  for shares (fractions 0-1); tol.: the tolerance claimed, in the same unit"]
    n_ok = sum(c.status == "ok" for c in cells)
    n_out = sum(c.status == "OUTSIDE" for c in cells)
    n_info = sum(c.status == "info" for c in cells)
    out.append(f"{plural(len(cells), 'cell')}: {n_ok:,} ok, {n_out:,} outside, {n_info:,} reported only")
    return "\n".join(out) + "\n"


def uncertainty_text(result: Mapping, draws: int) -> str:
    """``sim run --uncertainty``: what was drawn, and every metric that varies as a median with its 90% interval, in
    the metric's unit (shares in percent)."""
    done = result.get("draws_done", draws)
    head = (f"{plural(done, 'run')}" + (f" of {draws} (interrupted)" if result.get("interrupted") else "")
            + ", parameters drawn from the calibrations' fitted distribution and the scenario's input scatter: "
            + ", ".join(result["parameters"])
            + (f"; held (no standard error, or --set): {', '.join(result['held'])}" if result["held"] else ""))
    rows = []
    for key, v in result["metrics"].items():
        if v["p5"] == v["p95"]:
            continue
        unit, factor = unit_of(key)
        rows.append([key, unit, number(v["median"] * factor),
                     f"{number(v['p5'] * factor)} to {number(v['p95'] * factor)}"])
    lines = wrap(head) + table(rows, ["metric", "unit", "median", "90% interval"], "llrl")
    return "\n".join(lines) + "\n"
