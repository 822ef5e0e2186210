"""sim against the Vidur peer simulator on Vidur's reference workload (not a test):

    python benchmarks/vidur_compare.py [--requests N] [--json] [--out docs/vidur_compare.md]

Vidur (microsoft/vidur) simulated Llama-2-7B on one A100 80 GB with the Sarathi scheduler (512-token chunks, at most
128 sequences) for 10,000 arXiv-summarisation requests arriving as a Poisson stream at 1, 2 and 3 requests/s
(``benchmarks/data/vidur/README.md``: provenance, column meanings). For each rate this replays Vidur's exact requests
(its arrival times and lengths, ``trace_qps{N}.csv.gz``) through ``scenarios/a100_llama2_7b.yaml`` as a
``serve.workload.kind: trace`` workload, and computes the same statistics for sim's and Vidur's per-request results:

- throughput: output tokens / (last completion - first arrival);
- TTFT p50, p99 and mean (first token - arrival), e2e p50 (completion - arrival);
- TPOT p50, p99 and mean, TPOT = (e2e - TTFT) / (output tokens - 1) for both, over requests of more than one output
  token: sim's own definition (its ``tpot_p50_s``) and that of the summary in Vidur's ground-truth README. Vidur's
  column ``decode_time_execution_plus_preemption_normalized`` divides by all output tokens instead (0.3-0.7% lower
  here) and, for a restarted request, by the tokens left after its last restart; it is not used;
- the completion rate over the steady part of a run: completions between the 20% and the 80% quantiles of the
  completion times (sorted completion times c, i = round(0.2 (n - 1)), j = round(0.8 (n - 1)): (j - i) / (c[j] -
  c[i])); at 3 requests/s, where Vidur is overloaded, this is the saturating rate.

Vidur's figures are those of its attention-refitted runs (``attnfit``, preferred) with its roofline stand-in runs
beside them for information. The targets (within 15% of Vidur attnfit): throughput, TTFT p50 and p99, TPOT p50 and
p99 at each rate; the saturating rate within 10%. sim runs with a fixed seed (its results are deterministic); only
the reported run time varies. With ``--requests N`` both sides keep the first N requests, and Vidur's are those of
its 10,000-request runs (the later arrivals shared their batches): a quick check, not the comparison.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from common import ROOT, reference_loop_s

DATA = os.path.join(ROOT, "benchmarks", "data", "vidur")
SCENARIO = os.path.join(ROOT, "scenarios", "a100_llama2_7b.yaml")
RATES = (1, 2, 3)
REQUESTS = 10_000
SEED = 0
TOLERANCE = 0.15
SATURATING_TOLERANCE = 0.10  # the saturating rate's target
SATURATING_RATE_AT = 3  # requests/s: Vidur's overloaded run
STEADY = (0.2, 0.8)  # quantiles of the completion times bounding the steady part
KEEPS_UP = 0.97  # a steady completion rate at least this share of the arrival rate: not saturated
VIDUR_RUNS = {"attnfit": "Vidur attnfit", "standin": "Vidur stand-in"}
TARGET_RUN = "attnfit"
SERVED = ("stop", "length")

# (key, label, scale to the label's unit) of the statistics, in the order printed
STATS = (
    ("throughput_tok_s", "throughput (tok/s)", 1.0),
    ("ttft_p50_s", "TTFT p50 (s)", 1.0),
    ("ttft_p99_s", "TTFT p99 (s)", 1.0),
    ("ttft_mean_s", "TTFT mean (s)", 1.0),
    ("tpot_p50_s", "TPOT p50 (ms)", 1e3),
    ("tpot_p99_s", "TPOT p99 (ms)", 1e3),
    ("tpot_mean_s", "TPOT mean (ms)", 1e3),
    ("e2e_p50_s", "e2e p50 (s)", 1.0),
    ("arrival_rate_per_s", "arrivals/s (whole trace)", 1.0),
    ("steady_completion_rate_per_s", "completions/s, steady 20-80%", 1.0),
    ("restarts", "restarts (sim: KV preemptions)", 1.0),
)


@dataclass(frozen=True)
class Outcomes:
    """Per-request results of one simulated run, in arrival order (seconds, tokens)."""

    arrival_s: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    restarts: int  # Vidur: restarts summed over the requests; sim: its KV preemptions

    @property
    def completion_s(self) -> np.ndarray:
        """Each request's completion time."""
        return self.arrival_s + self.e2e_s


def read_gz_csv(path: str, limit: int) -> dict[str, np.ndarray]:
    """The first ``limit`` rows of a gzip-compressed numeric CSV, as float arrays by column."""
    with gzip.open(path, "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = [row for _, row in zip(range(limit), reader, strict=False)]
    values = np.array(rows, dtype=float).reshape(len(rows), len(header))
    return {name: values[:, k] for k, name in enumerate(header)}


def trace_path(rate: int) -> str:
    """Vidur's requests at ``rate`` (arrival_s, prompt_tokens, output_tokens), gzip-compressed."""
    return os.path.join(DATA, f"trace_qps{rate}.csv.gz")


def vidur_outcomes(rate: int, run: str, limit: int) -> Outcomes:
    """Vidur's results for its first ``limit`` requests at ``rate`` (``run``: attnfit or standin)."""
    trace = read_gz_csv(trace_path(rate), limit)
    res = read_gz_csv(os.path.join(DATA, f"vidur_qps{rate}_{run}.csv.gz"), limit)
    if not np.array_equal(res["request_id"], np.arange(len(res["request_id"]))):
        raise SystemExit(f"vidur_qps{rate}_{run}.csv.gz: requests not in arrival order")
    return Outcomes(trace["arrival_s"], trace["output_tokens"], res["ttft_s"], res["e2e_s"],
                    int(res["restarts"].sum()))


def sim_outcomes(rate: int, limit: int, workdir: str, overrides: dict | None = None) -> tuple[Outcomes, float]:
    """sim's results for the first ``limit`` of Vidur's requests at ``rate``, and the simulation's wall seconds
    (loading the scenario and reading the trace included)."""
    import sim

    path = os.path.join(workdir, f"trace_qps{rate}.csv")
    with gzip.open(trace_path(rate), "rt", newline="") as src, open(path, "w", newline="") as dst:
        dst.write(src.read())  # sim reads a plain CSV
    start = time.perf_counter()
    scenario = sim.load(SCENARIO, {
        "serve.workload.kind": "trace", "serve.workload.trace": path, "serve.requests": limit,
        # the scenario's open-loop workload, which a trace replaces
        "serve.workload.rate_per_s": None, "serve.workload.lengths": None, "serve.workload.lengths_max_tokens": None,
        # Vidur models no CPU overhead (skip_cpu_overhead_modeling, its default; docs/research/vidur_source.md): the
        # comparison is of the same system, so the scenario's assumed 1 ms per iteration is left out on both sides
        "machines.a100_box.engine.iteration.overhead_s": 0.0,
    } | (overrides or {}))
    run = scenario.run(seed=SEED)
    wall = time.perf_counter() - start
    df = run.requests
    if len(df) != limit or not df["end"].isin(SERVED).all():
        ends = df["end"].value_counts().to_dict()
        raise SystemExit(f"rate {rate}/s: sim served {ends} of {limit} requests; the comparison needs them all")
    df = df.sort_values("request")
    col = {c: df[c].to_numpy(dtype=float) for c in ("arrival_s", "output_tokens", "ttft_s", "e2e_s")}
    trace = read_gz_csv(trace_path(rate), limit)
    if not (np.allclose(col["arrival_s"], trace["arrival_s"], rtol=0, atol=1e-9)
            and np.array_equal(col["output_tokens"], trace["output_tokens"])):
        raise SystemExit(f"rate {rate}/s: sim's requests are not the trace's (arrival times or output lengths)")
    preemptions = int(run.metrics.get("kv_preemptions", 0))
    return Outcomes(col["arrival_s"], col["output_tokens"], col["ttft_s"], col["e2e_s"], preemptions), wall


def steady_completion_rate(completion_s: np.ndarray) -> float:
    """Completions per second between the ``STEADY`` quantiles of the completion times."""
    c = np.sort(completion_s)
    i, j = (round(q * (len(c) - 1)) for q in STEADY)
    return (j - i) / (c[j] - c[i]) if c[j] > c[i] else math.nan


def statistics(o: Outcomes) -> dict[str, float]:
    """The compared statistics of one run, from its per-request values (definitions: the module's docstring)."""
    tokens = o.output_tokens
    span = float(o.completion_s.max() - o.arrival_s.min())
    decoded = tokens > 1
    tpot = (o.e2e_s[decoded] - o.ttft_s[decoded]) / (tokens[decoded] - 1)
    return {
        "requests": float(len(tokens)),
        "output_tokens": float(tokens.sum()),
        "throughput_tok_s": float(tokens.sum()) / span,
        "ttft_p50_s": float(np.percentile(o.ttft_s, 50)),
        "ttft_p99_s": float(np.percentile(o.ttft_s, 99)),
        "ttft_mean_s": float(o.ttft_s.mean()),
        "tpot_p50_s": float(np.percentile(tpot, 50)),
        "tpot_p99_s": float(np.percentile(tpot, 99)),
        "tpot_mean_s": float(tpot.mean()),
        "e2e_p50_s": float(np.percentile(o.e2e_s, 50)),
        "arrival_rate_per_s": (len(tokens) - 1) / float(o.arrival_s.max() - o.arrival_s.min())
        if len(tokens) > 1 else math.nan,
        "steady_completion_rate_per_s": steady_completion_rate(o.completion_s),
        "restarts": float(o.restarts),
    }


def relative(a: float, b: float) -> float:
    """(a - b) / b, NaN when b is 0 or not finite."""
    return (a - b) / b if b and math.isfinite(b) else math.nan


def targets(results: dict[int, dict[str, dict[str, float]]]) -> list[dict]:
    """The targets: sim within ``TOLERANCE`` of Vidur (attnfit) on throughput, TTFT p50 and p99 and TPOT p50 and p99
    at each rate, and within ``SATURATING_TOLERANCE`` on the saturating rate (the steady completion rate at
    ``SATURATING_RATE_AT`` requests/s; ``saturated``: False when a simulator's completions keep up with the arrivals
    there, its figure then a lower bound of its saturating rate)."""
    out = []
    checks = [(rate, key, label) for rate in results for key, label in
              (("throughput_tok_s", "throughput"), ("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99"),
               ("tpot_p50_s", "TPOT p50"), ("tpot_p99_s", "TPOT p99"))]
    if SATURATING_RATE_AT in results:
        checks.append((SATURATING_RATE_AT, "steady_completion_rate_per_s", "saturating rate"))
    for rate, key, label in checks:
        ours, theirs = results[rate]["sim"][key], results[rate][TARGET_RUN][key]
        rel = relative(ours, theirs)
        row = {"rate_per_s": rate, "metric": label, "key": key, "sim": ours, "vidur": theirs, "relative": rel,
               "met": bool(abs(rel) <= (SATURATING_TOLERANCE if key == "steady_completion_rate_per_s" else TOLERANCE))}
        if key == "steady_completion_rate_per_s":
            row["saturated"] = {
                name: bool(results[rate][run][key] < KEEPS_UP * results[rate][run]["arrival_rate_per_s"])
                for name, run in (("sim", "sim"), ("vidur", TARGET_RUN))}
        out.append(row)
    return out


def fmt(value: float, scale: float = 1.0) -> str:
    """A number for the table: three significant figures (a whole number as it is), thousands separated."""
    if not math.isfinite(value):
        return "-"
    v = value * scale
    if v == round(v):  # a count, or a whole number
        return f"{v:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(v))))
    return f"{v:,.{digits}f}"


def pct(rel: float) -> str:
    """A relative difference in percent, signed."""
    return "-" if not math.isfinite(rel) else f"{rel * 100:+.1f}%"


def markdown(results: dict[int, dict[str, dict[str, float]]], checks: list[dict], walls: dict[int, float],
             total_s: float, ref_s: float, requests: int) -> str:
    """The report: one table of statistics per rate, the targets, the definitions and run times."""
    lines = [f"# sim against Vidur on Vidur's reference workload ({requests:,} requests per rate)", "",
             "Llama-2-7B on one A100 80 GB, arXiv-summarisation lengths (at most 4,096 tokens), Poisson arrivals; "
             "sim replays Vidur's exact requests (`benchmarks/data/vidur/`) through `scenarios/a100_llama2_7b.yaml` "
             f"(seed {SEED}). Vidur's figures are a peer simulator's predictions, not measurements. Relative "
             "differences are (sim - Vidur) / Vidur.", ""]
    for rate, res in results.items():
        lines += [f"## {rate} request{'s' if rate > 1 else ''}/s", "",
                  "| statistic | sim | " + " | ".join(f"{VIDUR_RUNS[r]} | sim vs {r}" for r in VIDUR_RUNS) + " |",
                  "|---|---:|" + "---:|---:|" * len(VIDUR_RUNS)]
        for key, label, scale in STATS:
            cells = [fmt(res["sim"][key], scale)]
            for r in VIDUR_RUNS:  # restarts and KV preemptions are not the same count: no ratio
                rel = "" if key == "restarts" else pct(relative(res["sim"][key], res[r][key]))
                cells += [fmt(res[r][key], scale), rel]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"## Targets (within {TOLERANCE:.0%} of Vidur attnfit; the saturating rate within "
              f"{SATURATING_TOLERANCE:.0%})", "",
              "| rate | metric | sim | Vidur attnfit | difference | |", "|---|---|---:|---:|---:|---|"]
    for c in checks:
        scale = 1e3 if c["key"].startswith("tpot") else 1.0
        unit = {"throughput_tok_s": " tok/s", "steady_completion_rate_per_s": " req/s"}.get(
            c["key"], " ms" if c["key"].startswith("tpot") else " s")
        lines.append(f"| {c['rate_per_s']}/s | {c['metric']} | {fmt(c['sim'], scale)}{unit} | "
                     f"{fmt(c['vidur'], scale)}{unit} | {pct(c['relative'])} | {'met' if c['met'] else 'MISSED'} |")
    met = sum(c["met"] for c in checks)
    lines += ["", f"{met} of {len(checks)} targets met."]
    for c in checks:
        unsaturated = [name for name, sat in c.get("saturated", {}).items() if not sat]
        if unsaturated:
            lines += ["", f"Not saturated at {c['rate_per_s']}/s: {' and '.join(unsaturated)} (steady completions at "
                      f"least {KEEPS_UP:.0%} of the arrival rate); there the figure is the arrival rate, a lower bound "
                      "of the saturating rate."]
    if requests < REQUESTS:
        lines += ["", f"Only the first {requests:,} requests: sim simulated those alone, Vidur's figures are theirs "
                  f"in its {REQUESTS:,}-request runs (later arrivals shared their batches), so this is a quick check, "
                  "not the comparison."]
    lines += ["", "Both sides price the linear layers from the same profiled A100 kernels (sim reads Vidur's table, "
              "`iteration.operators`) and model no CPU overhead (Vidur's default; the scenario's assumed 1 ms is "
              "left out here). sim's decode attention is its own kernel: KV read at 88.5% of the bandwidth after a "
              "42 us ramp per layer, both fitted to FlashAttention-2's paged decode kernel timed on an A30 (the A100's "
              "die; `calibration/attention_kernels/`, `benchmarks/fit_attention_kernels.py`), nothing to Vidur. "
              "Before that (KV read at the weight reads' 67%), TPOT p50 was +83% at 2/s, where the queue amplifies "
              "any cost gap (2/s is 85% of the capacity)."]
    lines += ["",
              "Definitions (the same for both simulators, from per-request values): throughput = output tokens / "
              "(last completion - first arrival); TTFT = first token - arrival; TPOT = (e2e - TTFT) / (output tokens "
              "- 1), over requests of more than one output token (Vidur's own column divides by all output tokens); "
              "steady completion rate = completions between the 20% and 80% quantiles of the completion times / "
              f"that time span, the saturating rate at {SATURATING_RATE_AT}/s; restarts: Vidur's request restarts "
              "(preempted and recomputed), sim's KV preemptions.", "",
              "sim's run time (scenario load, trace read and simulation; the first rate pays sim's deferred "
              "imports): "
              + ", ".join(f"{rate}/s {wall:.2f} s" for rate, wall in walls.items())
              + f"; whole script {total_s:.1f} s ({total_s / ref_s:.0f} reference loops of {ref_s * 1e3:.1f} ms, "
              f"python {sys.version.split()[0]})."]
    return "\n".join(lines) + "\n"


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite number as None (strict JSON)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def main() -> None:
    """Run sim at each rate, compare with Vidur, print the tables (or JSON), optionally write the markdown."""
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=REQUESTS, help=f"the first N requests of each rate "
                    f"(1..{REQUESTS}; default {REQUESTS})")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of markdown")
    ap.add_argument("--out", default=None, help="also write the markdown report to this file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change the scenario (a what-if against Vidur; YAML values), repeatable")
    args = ap.parse_args()
    from ruamel.yaml import YAML

    overrides = {k: YAML(typ="safe").load(v) for k, _, v in (item.partition("=") for item in args.set)}
    if not 1 <= args.requests <= REQUESTS:
        ap.error(f"--requests: from 1 to {REQUESTS}")
    ref = min(reference_loop_s() for _ in range(3))
    results: dict[int, dict[str, dict[str, float]]] = {}
    walls: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="sim-vidur-") as workdir:
        for rate in RATES:
            ours, walls[rate] = sim_outcomes(rate, args.requests, workdir, overrides)
            results[rate] = {"sim": statistics(ours)}
            for run in VIDUR_RUNS:
                results[rate][run] = statistics(vidur_outcomes(rate, run, args.requests))
    checks = targets(results)
    total = time.perf_counter() - t0
    report = markdown(results, checks, walls, total, ref, args.requests)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
    if args.json:
        out = {"requests": args.requests, "seed": SEED, "scenario": os.path.relpath(SCENARIO, ROOT),
               "tolerance": TOLERANCE, "results": {str(r): v for r, v in results.items()}, "targets": checks,
               "sim_wall_s": {str(r): w for r, w in walls.items()}, "total_s": total, "reference_loop_s": ref}
        print(json.dumps(finite(out), indent=1))
    else:
        print(report, end="")


if __name__ == "__main__":
    main()
