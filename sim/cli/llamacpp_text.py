"""What ``sim advise`` prints: the machine and model, the search, the best placements per goal with their bands,
memory and the command to paste; and the same as JSON."""

from __future__ import annotations

import os
from typing import Any

from sim.core.text import wrap_all

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
    return f"sim advise: {model}, {spec.weights_gib:.2f} GiB, on {gpu} + {host} ({mem}, {os_name})"


def _rate(adv, c, test: str) -> str:
    lo, hi = adv.interval(c, test)
    return f"{adv.scaled(c, test):7.1f} tok/s (90%: {lo:.1f}-{hi:.1f})"


def command(c, model: str) -> str:
    """The llama-server command line of a placement."""
    return f"llama-server -m {model} {c.flags()}"


def advice_text(adv, what: dict, top: int) -> list[str]:
    n_prompt, n_gen, depth = what["n_prompt"], what["n_gen"], what["depth"]
    spec = what["scenario"].models[what["scenario"].machines[what["machine"]].engine.model]
    model = os.path.splitext(os.path.basename(spec.file or "MODEL"))[0] + ".gguf"
    lines = [_machine_line(what),
             f"searched {len(adv.candidates) + len(adv.rejected)} placements in {what['seconds']:.1f} s: "
             f"{len(adv.candidates)} load, {len(adv.rejected)} do not fit (-c {what['ctx']})"]
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
            mem = f"     VRAM {c.vram_gib:.2f} GiB, RAM {c.ram_gib:.2f} GiB, experts of {c.cpu_expert_layers} layers " \
                  "on the CPU" + (f", {c.spill_gib:.2f} GiB in shared memory" if c.spill_gib > 0 else "")
            lines += [head, mem, f"     {command(c, model)}"]
    lines += ["", "bands: 5th-95th percentile of measured / simulated on the public sweeps kept out of the fit "
              "(calibration/llamacpp_report.md); tg is llama-bench's tg, pp its pp"]
    return wrap_all(lines)


def _candidate_json(adv, c) -> dict[str, Any]:
    return {"flags": c.flags(), "settings": c.settings.model_dump(mode="json", exclude={"costs"}),
            "tg_tok_s": adv.scaled(c, "tg"), "tg_band": list(adv.interval(c, "tg")),
            "pp_tok_s": adv.scaled(c, "pp"), "pp_band": list(adv.interval(c, "pp")), "request_s": c.request_s,
            "vram_gib": c.vram_gib, "ram_gib": c.ram_gib, "spill_gib": c.spill_gib,
            "cpu_expert_layers": c.cpu_expert_layers}


def advice_json(adv, what: dict, top: int) -> dict[str, Any]:
    return {"machine": _machine_line(what).removeprefix("sim advise: "), "n_prompt": what["n_prompt"],
            "n_gen": what["n_gen"], "depth": what["depth"], "ctx": what["ctx"],
            "searched": len(adv.candidates) + len(adv.rejected), "loading": len(adv.candidates),
            "anchor": adv.anchor, "band": {k: list(v) for k, v in adv.band.items()},
            "best": {goal: [_candidate_json(adv, c) for c in adv.best(goal, top)] for goal, _ in GOALS}}
