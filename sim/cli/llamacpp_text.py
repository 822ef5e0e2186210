"""What ``sim advise`` prints: the machine and model, the search, the best placements per goal with their bands,
memory and the command to paste; and the same as JSON. What ``sim llama`` prints of a llama-batched-bench line: the
table as the tool prints it, and the rows as JSON."""

from __future__ import annotations

import os
from typing import Any

from sim.core.text import plural, wrap_all

GOALS = (("tg", "decode"), ("pp", "prefill"), ("mix", "the request mix"))


def _machine_line(what: dict) -> str:
    scn, name = what["scenario"], what["machine"]
    m = scn.machines[name]
    cards = {}
    for g in m.gpus.values():
        cards[g.type] = cards.get(g.type, 0) + 1
    gpu = ", ".join(f"{n} x {t}" if n > 1 else t for t, n in cards.items()) or "no GPU"
    h = m.host
    host = (h.type or h.name or "host") if h is not None else "host"
    mem = f"{h.channels} x {h.dram or 'DRAM'}-{h.mt_s:.0f}" if h is not None and h.channels and h.mt_s else ""
    os_name = h.os if h is not None else "linux"
    spec = scn.models[m.engine.model]
    model = os.path.basename(spec.file or "model") + (f" ({spec.quant})" if spec.quant else "")
    sizes = what.get("sizes") or {}
    if sizes:
        model = os.path.basename(spec.file or "model") + " (" + ", ".join(f"{q} {g:.2f} GiB" for q, g in sizes.items())
        return f"sim advise: {model}), on {gpu} + {host} ({mem}, {os_name})"
    return f"sim advise: {model}, {spec.weights_gib:.2f} GiB, on {gpu} + {host} ({mem}, {os_name})"


def _rate(adv, c, test: str) -> str:
    lo, hi = adv.interval(c, test)
    return f"{adv.scaled(c, test):7.1f} tok/s (90%: {lo:.1f}-{hi:.1f})"


def command(c, model: str) -> str:
    """The llama-server command line of a placement (a quant searched among several names the file)."""
    if c.quant:
        stem, ext = os.path.splitext(model)
        model = f"{stem}-{c.quant}{ext}"
    return f"llama-server -m {model} {c.flags()}"


def advice_text(adv, what: dict, top: int) -> list[str]:
    n_prompt, n_gen, depth = what["n_prompt"], what["n_gen"], what["depth"]
    spec = what["scenario"].models[what["scenario"].machines[what["machine"]].engine.model]
    model = os.path.splitext(os.path.basename(spec.file or "MODEL"))[0] + ".gguf"
    lines = [_machine_line(what)] + ([f"model size from {what['size_from']}"] if what.get("size_from") else []) + [
             f"searched {len(adv.candidates) + len(adv.rejected)} placements in {what['seconds']:.1f} s: "
             f"{len(adv.candidates)} load, {len(adv.rejected)} do not fit (-c {what['ctx']})"]
    u = what.get("unified")
    if u is not None:
        lines.append(f"unified memory: {u['pool_gib']:g} GiB shared by CPU and GPU; the GPU may allocate "
                     f"{u['default_gib']:.1f} GiB ({u['rule']})" + (", placements searched up to all the OS leaves"
                                                                    if u["raised"] else ""))
    if adv.anchor:
        lines.append("anchored to your run: " + ", ".join(f"{t} x {r:.3f}" for t, r in adv.anchor.items()) +
                     " (predictions scaled by measured / simulated at your placement)")
    tests = {"tg": f"tg{n_gen}" + (f" @ d{depth}" if depth else ""),
             "pp": f"pp{n_prompt}" + (f" @ d{depth}" if depth else ""),
             "mix": f"{n_prompt} prompt + {n_gen} generated tokens per request"}
    for goal, title in GOALS:
        lines += ["", f"best for {title} ({tests[goal]}):"]
        for i, c in enumerate(adv.best(goal, top), 1):
            head = f"  {i}. tg {_rate(adv, c, 'tg')}   pp {_rate(adv, c, 'pp')}"
            if goal == "mix":
                head += f"   {c.request_s:.2f} s per request"
            mem = f"     {c.quant}: " if c.quant else "     "
            mem += f"VRAM {c.vram_gib:.2f} GiB, RAM {c.ram_gib:.2f} GiB, experts of {c.cpu_expert_layers} layers " \
                  "on the CPU" + (f", {c.spill_gib:.2f} GiB in shared memory" if c.spill_gib > 0 else "")
            lines += [head, mem, f"     {command(c, model)}"]
            need = _gpu_limit(what, c)
            if need:
                lines.append(f"     {need}")
    lines += _fit_lines(adv, what)
    if what.get("sizes"):
        lines += ["", "quantizations ranked by speed alone: what each loses in quality is not modelled"]
    lines += ["", "bands: 5th-95th percentile of measured / simulated on the public sweeps kept out of the fit "
              "(calibration/llamacpp_report.md); tg is llama-bench's tg, pp its pp"]
    return wrap_all(lines)


def fit_comparison(adv, what: dict) -> dict[str, Any] | None:
    """The best decode placement against what llama.cpp's --fit picks with only -c given: both rates, the gain and
    what differs (None when no fit was run)."""
    if what.get("fit") is None:
        return None
    chosen, fit = what["fit"]
    best = adv.best("tg", 1)
    if chosen is None:
        return {"loads": False, "reason": fit}
    out = {"loads": True, "flags": chosen.flags(), "tg_tok_s": adv.scaled(chosen, "tg"),
           "pp_tok_s": adv.scaled(chosen, "pp"), "vram_gib": chosen.vram_gib}
    if best:
        b = best[0]
        why = []
        if b.settings.cache_type_k != chosen.settings.cache_type_k:
            why.append(f"a {b.settings.cache_type_k} KV cache (the fit keeps {chosen.settings.cache_type_k})")
        if b.settings.ubatch_size != chosen.settings.ubatch_size:
            why.append(f"-ub {b.settings.ubatch_size}")
        if b.cpu_expert_layers != chosen.cpu_expert_layers:
            why.append(f"experts of {b.cpu_expert_layers} layers on the CPU (the fit: {chosen.cpu_expert_layers})")
        out |= {"tg_gain": adv.scaled(b, "tg") / adv.scaled(chosen, "tg") - 1.0, "why": why}
    return out


def _fit_lines(adv, what: dict) -> list[str]:
    cmp = fit_comparison(adv, what)
    if cmp is None:
        return []
    if not cmp["loads"]:
        return ["", f"llama.cpp's --fit with only -c {what['ctx']}: does not load ({cmp['reason']})"]
    lines = ["", f"llama.cpp's --fit with only -c {what['ctx']} (its defaults): tg {cmp['tg_tok_s']:.1f} tok/s, "
             f"pp {cmp['pp_tok_s']:.1f} tok/s, VRAM {cmp['vram_gib']:.2f} GiB"]
    if "tg_gain" in cmp:
        lines.append(f"  the best for decode above: {cmp['tg_gain']:+.0%} tg" + (
            f", from {', '.join(cmp['why'])}" if cmp["why"] else ""))
    return lines


def _gpu_limit(what: dict, c) -> str:
    """On a unified machine, what a placement needs of the GPU's share when the platform's default is too small."""
    u = what.get("unified")
    if u is None or not u["raised"]:
        return ""
    need = c.vram_gib + what.get("margin_gib", 0.0)
    if need <= u["default_gib"]:
        return ""
    from sim.config.unified import raise_limit

    return f"needs the GPU's share raised to {need:.1f} GiB: {raise_limit(u['vendor'], u['os'], need)}"


def _candidate_json(adv, c) -> dict[str, Any]:
    return {"flags": c.flags(), "settings": c.settings.model_dump(mode="json", exclude={"costs"}),
            "tg_tok_s": adv.scaled(c, "tg"), "tg_band": list(adv.interval(c, "tg")),
            "pp_tok_s": adv.scaled(c, "pp"), "pp_band": list(adv.interval(c, "pp")), "request_s": c.request_s,
            "vram_gib": c.vram_gib, "ram_gib": c.ram_gib, "spill_gib": c.spill_gib,
            "cpu_expert_layers": c.cpu_expert_layers} | ({"quant": c.quant} if c.quant else {})


def _unified_json(what: dict, c) -> dict[str, Any]:
    return {"gpu_limit": _gpu_limit(what, c)} if what.get("unified") is not None else {}


def advice_json(adv, what: dict, top: int) -> dict[str, Any]:
    return {"machine": _machine_line(what).removeprefix("sim advise: "), "n_prompt": what["n_prompt"],
            "n_gen": what["n_gen"], "depth": what["depth"], "ctx": what["ctx"],
            "searched": len(adv.candidates) + len(adv.rejected), "loading": len(adv.candidates),
            "anchor": adv.anchor, "band": {k: list(v) for k, v in adv.band.items()},
            "unified": {k: v for k, v in (what.get("unified") or {}).items()} or None,
            "best": {goal: [_candidate_json(adv, c) | _unified_json(what, c) for c in adv.best(goal, top)]
                     for goal, _ in GOALS},
            "size_from": what.get("size_from"), "fit": fit_comparison(adv, what)}


# llama-batched-bench (sim llama) ------------------------------------------------------------------------------------

BATCHED_HEAD = ("PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s")
_WIDTHS = (6, 6, 4, 6, 8, 8, 8, 8, 8, 8)  # the tool's %6d | %6d | %4d | %6d | %8.3f | %8.2f | ...
_FA_PRINTED = {True: 1, False: 0, "auto": -1}  # what the tool prints for -fa on, off, auto


def batched_notes(cmd, settings: dict) -> list[str]:
    """What a llama-batched-bench line leaves out or takes by default (one note each); drops ``-np`` from
    ``settings`` (the tool runs as many sequences as the largest -npl)."""
    notes = []
    if settings.pop("parallel", None) is not None:
        notes.append("-np: llama-batched-bench runs as many sequences as the largest -npl, whatever -np says")
    if "ctx_size" not in settings:
        notes.append("no -c: n_kv_max 4096 (older builds' default; newer ones take the model's training context)")
    b = cmd.bench
    if not (b["n_pp"] and b["n_tg"] and b["n_pl"]):
        missing = [flag for key, flag in (("n_pp", "-npp"), ("n_tg", "-ntg"), ("n_pl", "-npl")) if not b[key]]
        notes.append(f"no {' / '.join(missing)}: llama-batched-bench runs no test (the lists are empty by default)")
    if b["is_tg_separate"]:
        notes.append("-tgs: simulated as without it, the sequences generating together (not one after another)")
    return notes


def _cells(values, formats) -> str:
    return "|" + " | ".join(f"{v:{f}}" for v, f in zip(values, formats, strict=True)) + " |"


def batched_table(rows) -> list[str]:
    """The rows as llama-batched-bench prints them (seconds and tok/s); a row that cannot load shows n/a."""
    out = [_cells(BATCHED_HEAD, [f">{w}" for w in _WIDTHS]), "|" + "-|-".join("-" * w for w in _WIDTHS) + "-|"]
    numbers = ("6d", "6d", "4d", "6d", "8.3f", "8.2f", "8.3f", "8.2f", "8.3f", "8.2f")
    for r in rows:
        head = (r.pp, r.tg, r.b, r.n_kv)
        if r.error:
            out.append(_cells(head + ("n/a",) * 6, numbers[:4] + (">8",) * 6))
        else:
            out.append(_cells(head + (r.t_pp_s, r.s_pp_tok_s, r.t_tg_s, r.s_tg_tok_s, r.t_s, r.s_tok_s), numbers))
    return out


def _main_line(what: dict) -> str:
    """The ``main:`` line the tool prints before its table, for these settings."""
    s, b, st = what["settings"], what["bench"], what["setup"]
    threads = st.threads if st is not None else s.threads
    line = (f"main: n_kv_max = {s.ctx_size}, n_batch = {s.batch_size}, n_ubatch = {s.ubatch_size}, flash_attn = "
            f"{_FA_PRINTED[s.flash_attn]}, is_pp_shared = {int(b['is_pp_shared'])}, is_tg_separate = "
            f"{int(b['is_tg_separate'])}, n_gpu_layers = {s.n_gpu_layers}")
    return line + (f", n_threads = {threads}, n_threads_batch = {threads}" if threads else "")


def batched_text(rows, what: dict) -> list[str]:
    """The run as ``sim llama`` prints it: the placement and memory, the main: line and the table, then the tests
    skipped for -c and why rows could not load."""
    from sim.llamacpp.report import placement_lines

    scn, st, skipped = what["scenario"], what["setup"], what["skipped"]
    model = scn.machines[what["machine"]].engine.model
    head = [f"llama-batched-bench on {what['machine']} ({model}), simulated:", *(placement_lines(st) if st else [])]
    tail = []
    if skipped:
        shown = ", ".join(f"PP {pp} TG {tg} B {b}" for pp, tg, b in skipped[:6])
        more = f" and {len(skipped) - 6} more" if len(skipped) > 6 else ""
        tail += ["", f"skipped, as llama-batched-bench skips them: {plural(len(skipped), 'test')} needing more than "
                 f"-c {what['settings'].ctx_size} KV cells ({shown}{more})"]
    errors = list(dict.fromkeys(r.error for r in rows if r.error))
    tail += [""] * bool(errors) + [f"cannot load: {e}" for e in errors]
    # the main: line and the table as the tool prints them, unwrapped: `sim logs` reads them back
    return [*wrap_all(head), "", _main_line(what), "", *batched_table(rows), *wrap_all(tail)]


def batched_json(rows, what: dict) -> dict[str, Any]:
    """The run as ``sim llama --json`` prints it: the settings of the main: line and the engine's (after ``-ngl
    auto``'s fit), the memory (GiB), the rows (BATCHED_COLUMNS, nan as null) and the tests skipped for -c."""
    s, b, st = what["settings"], what["bench"], what["setup"]
    return {"program": "llama-batched-bench", "machine": what["machine"],
            "model": what["scenario"].machines[what["machine"]].engine.model, "n_kv_max": s.ctx_size,
            "n_batch": s.batch_size, "n_ubatch": s.ubatch_size, "flash_attn": s.flash_attn,
            "is_pp_shared": b["is_pp_shared"], "is_tg_separate": b["is_tg_separate"], "n_gpu_layers": s.n_gpu_layers,
            "n_threads": st.threads if st is not None else s.threads,
            "vram_gib": st.vram_gib() if st is not None else None, "ram_gib": st.ram_gib() if st is not None else None,
            "settings": s.model_dump(mode="json", exclude={"costs"}), "rows": [r.as_dict() for r in rows],
            "skipped": [{"pp": pp, "tg": tg, "b": pl} for pp, tg, pl in what["skipped"]]}
