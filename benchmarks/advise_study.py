"""``sim advise`` studied: its advice for the public setups against their best measured placement, and the command on
six machines (8, 12, 16 and 24 GB cards and a CPU alone) with a 30B-A3B and a 120B-class MoE, every placement it
prints re-run through ``sim llama``.

    python benchmarks/advise_study.py --out docs/advise_study.md

For each public sweep of one machine and model over ``--n-cpu-moe`` or ``-ngl`` (calibration/public/offload_sweeps.csv,
as calibration/llamacpp_setups.yaml maps it),
advise searches exactly the placements the sweep measured (the other flags as the sweep ran them) and its pick is
compared with the sweep's best: the measured rate of the placement advise picks, against the best measured rate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sim.core.numerics import reproducible_numerics  # noqa: E402

reproducible_numerics()  # the sim command's numerics, asked before numpy is imported (a no-op if it already is)

from sim.calibration.llamacpp_cases import read_cases  # noqa: E402
from sim.calibration.llamacpp_fit import predict  # noqa: E402

SWEEPS = {  # source_id -> the flag it varies
    "BV-q3-grid": "n_cpu_moe", "BV-q3-grid-refine": "n_cpu_moe", "BV-gptoss-grid": "n_cpu_moe",
    "BV-q3-ngl-sweep": "n_gpu_layers",
}
MACHINES = (("8 GB", "rtx3070ti", "ryzen5_5600x", 64), ("16 GB", "rtx4060ti_16gb", "ryzen7_9700x", 64),
            ("24 GB", "rtx4090", "ryzen9_7950x", 96), ("16 GB", "rtx4070tisuper", "ryzen7_7700x", 64),
            ("12 GB", "rx6700xt", "ryzen5_5600", 32), ("CPU", None, "ryzen7_7700x", 64))
MODELS = (("Qwen3-30B-A3B Q4_K_M", "calibration/models/qwen3-30b-a3b.json", "Q4_K_M"),
          ("gpt-oss-120b MXFP4", "calibration/models/gpt-oss-120b.json", "MXFP4_MOE"))


def public_sweeps() -> list[str]:
    cases = read_cases(ROOT, ("offload_sweeps.csv",)).cases
    params = table_params()
    lines = ["## Advice for the public sweeps", "",
             "Per sweep (one machine, one model, llama.cpp mainline; the rows of "
             "`calibration/public/offload_sweeps.csv`): the placement `sim advise` ranks first among the ones the "
             "sweep measured (as advise does, one that spills into shared memory only if all do), its measured tg, "
             "and the sweep's best measured placement. Repeated placements: the median of their rows. Predicted: "
             "the shipped fit, which saw these rows (held out, see docs/fidelity.md).", "",
             "| sweep | flag | advised | predicted tg | measured tg there | best measured | best tg | "
             "advised / best |", "|---|---|---|---|---|---|---|---|"]
    for source, flag in SWEEPS.items():
        obs = [c for c in cases if c.source == source and c.test == "tg" and c.settings.build == "llama.cpp"]
        by: dict[int, list] = {}
        for o in obs:
            by.setdefault(getattr(o.settings, flag), []).append(o)
        measured = {k: sorted(x.measured for x in v)[len(v) // 2] for k, v in by.items()}
        predicted = {k: predict([v[0]], params)[0][0] for k, v in by.items()}
        fits = {k for k, v in by.items() if not spills(v[0])}  # advise's rule: shared memory only when nothing fits
        pick = max(fits or predicted, key=lambda k: predicted[k])
        best = max(measured, key=lambda k: measured[k])
        lines.append(f"| {source} | {flag} | {pick} | {predicted[pick]:.1f} | {measured[pick]:.1f} | "
                     f"{best} | {measured[best]:.1f} | {measured[pick] / measured[best]:.0%} |")
    return lines


def spills(o) -> bool:
    """Whether the observation's placement puts weights in shared system memory."""
    from sim.llamacpp.bench import bench_setup

    st = bench_setup(o.scenario, "m", o.settings, o.tokens + o.depth)
    return any(m.excess > 0 for m in st.memory)


def table_params():
    from sim.llamacpp.params import CostParams

    return CostParams.of()


def catalog_machines() -> list[str]:
    """Each machine and model through the commands a user runs: ``sim advise`` (its margin, its re-run check), then
    every placement it prints pasted into ``sim llama`` as a llama-server line of the current build."""
    import json

    from click.testing import CliRunner

    from sim.cli import main as cli

    lines = ["", "## Catalog machines, two models", "",
             "`sim advise --model M --quant Q --gpu G --host H --ram-gib R --json` (Linux, the card's own PCIe "
             "generation, -c 8192, pp512 / tg128; the first of each goal; no --gpu: the CPU alone), then every "
             "placement it prints (top 3 of each goal) pasted into `sim llama` as a llama-server line read with the "
             "current build's defaults. Seconds: the whole advise command.", "",
             "| machine | model | placements | load | seconds | best tg | its flags | best pp | re-run in sim llama |"
             " --fit's tg |", "|---|---|---|---|---|---|---|---|---|---|"]
    runner = CliRunner()
    for label, gpu, host, ram in MACHINES:
        for name, path, quant in MODELS:
            machine = (["--gpu", gpu] if gpu else []) + ["--host", host, "--ram-gib", str(ram)]
            start = time.perf_counter()
            r = runner.invoke(cli, ["advise", "--model", os.path.join(ROOT, path), "--quant", quant, *machine,
                                    "--json"])
            seconds = time.perf_counter() - start
            where = f"{label} {gpu or 'no GPU'} + {host} ({ram} GB)"
            if r.exit_code != 0:
                lines.append(f"| {where} | {name} | - | 0 | {seconds:.1f} | - | none loads | - | - | - |")
                continue
            doc = json.loads(r.stdout)
            shown = sorted({c["flags"] for goal in ("tg", "pp", "mix") for c in doc["best"][goal]})
            loads = 0
            for flags in shown:
                run = runner.invoke(cli, ["llama", f"llama-server -m model.gguf {flags}", "--model",
                                          os.path.join(ROOT, path), "--quant", quant, *machine, "--json"])
                rows = json.loads(run.stdout)["bench"] if run.exit_code == 0 else []
                loads += bool(rows) and all(not row["error"] for row in rows)
            tg, pp = doc["best"]["tg"][0], doc["best"]["pp"][0]
            fit = doc.get("fit") or {}
            flags = tg["flags"].replace("|", "\\|")  # a regex's alternatives inside a table cell
            lines.append(f"| {where} | {name} | {doc['searched']} | {doc['loading']} | {seconds:.1f} | "
                         f"{tg['tg_tok_s']:.1f} | `{flags}` | {pp['pp_tok_s']:.0f} | {loads}/{len(shown)} | "
                         + (f"{fit['tg_tok_s']:.1f} |" if fit.get("loads") else "does not load |"))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="Write the markdown here (default: print it).")
    args = ap.parse_args()
    text = "\n".join(["# `sim advise` study", "", "Written by `python benchmarks/advise_study.py`.", "",
                      *public_sweeps(), *catalog_machines()]) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
