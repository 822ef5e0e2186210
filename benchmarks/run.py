"""The speed and memory suite (not a test): python benchmarks/run.py [--quick] [--cases NAME,...]

Each case runs in a fresh process, so its peak RSS is its own (read from the kernel when the process ends). Each
prints wall time (the simulation, from loading the scenario to the last metric; interpreter start and imports are
reported apart), simulated requests and generated tokens per wall-second, the ratio to the reference figures of the
Vidur simulator on this machine kind (``shared/traces/README.md``: 54-76 s and 1.9-2.5 GiB for 10,000 arXiv
requests), and the wall time in units of a fixed pure-Python reference loop timed in the same run, so figures from
different machines compare.

Cases:
- ``dense_7b_arxiv_{1k,10k,100k}``: the reference workload itself (lengths drawn from arxiv_summarization_lengths.csv,
  at most 4,096 tokens, Poisson arrivals at 1 request/s) on ``scenarios/a100_llama2_7b.yaml``: a dense 7B model on
  one A100 with continuous batching; ``dense_7b_arxiv_1m`` (a million requests, minutes) runs only when named;
- ``moe_arxiv_{1k,10k,100k}``: the same workload on the gen3_5090 MoE engine with the expert cache on;
- ``azure_conv``: the whole Azure 2023 conversation trace (19,366 requests) on azure_conv_5090 (gen3_5090 round 2);
- ``sweep_one_point``: ``sim sweep`` of one home-lab point (a simulation of milliseconds), the whole command: what a
  sweep pays per process (interpreter start, imports, scenario load, tables);
- ``dense_7b_arxiv_10k_2rps``: the reference workload at 2 requests/s (Vidur: 27 s for 10,000 on this machine kind);
- ``sweep_dense_1000``: a 1,000-point dense sweep (40 rates x 25 batch caps, 20 requests a point) on two workers, the
  whole command, once.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import tempfile
import time

from common import ROOT, reference_loop_s

ARXIV = [
    "serve.workload.kind=open", "serve.workload.rate_per_s=1", "serve.workload.arrival_law=poisson",
    "serve.workload.lengths=scenarios/traces/arxiv_summarization_lengths.csv", "serve.workload.lengths_max_tokens=4096",
]
CASES: dict[str, dict] = {  # targets: what this 2-core machine measured (docs/speed.md), with about 20% to spare
    "dense_7b_arxiv_10k": {"scenario": "scenarios/a100_llama2_7b.yaml", "sets": ["serve.requests=10000"],
                           "target_s": 1.0, "target_mb": 100, "reference": True},
    "dense_7b_arxiv_1k": {"scenario": "scenarios/a100_llama2_7b.yaml", "sets": ["serve.requests=1000"],
                          "target_s": 0.28, "vidur_s": 14.0},  # 50 x faster than Vidur's 14 s for 1,000
    "dense_7b_arxiv_10k_2rps": {"scenario": "scenarios/a100_llama2_7b.yaml",
                                "sets": ["serve.requests=10000", "serve.workload.rate_per_s=2",
                                         # no CPU overhead per iteration, as Vidur models none (vidur_compare.py)
                                         "machines.a100_box.engine.iteration.overhead_s=0"],
                                "target_s": 0.54, "vidur_s": 27.0},  # 50 x Vidur's 27 s at 2 requests/s
    "dense_7b_arxiv_100k": {"scenario": "scenarios/a100_llama2_7b.yaml", "sets": ["serve.requests=100000"],
                            "target_s": None},
    "dense_7b_arxiv_1m": {"scenario": "scenarios/a100_llama2_7b.yaml", "sets": ["serve.requests=1000000"],
                          "target_s": None, "slow": True},
    "moe_arxiv_1k": {"scenario": "scenarios/gen3_5090.yaml", "sets": [*ARXIV, "serve.requests=1000"],
                     "target_s": None},
    "moe_arxiv_10k": {"scenario": "scenarios/gen3_5090.yaml", "sets": [*ARXIV, "serve.requests=10000"],
                      "target_s": 2.0, "reference": True},
    "moe_arxiv_100k": {"scenario": "scenarios/gen3_5090.yaml", "sets": [*ARXIV, "serve.requests=100000"],
                       "target_s": None},
    "azure_conv": {"scenario": "scenarios/azure_conv_5090.yaml", "sets": ["serve.requests=19366"], "target_s": 2.5},
    # a point whose simulation costs milliseconds (one dispatch job): the command's wall is its overhead
    "sweep_one_point": {"command": ["-m", "sim", "sweep", "scenarios/home_lab.yaml", "--axis",
                                    "jobs.long_with_load.tokens=1000", "--workers", "1", "--quiet"], "target_s": 0.6},
    # 1,000 dense points (40 rates x 25 batch caps, 20 requests each) on two workers: what a what-if grid costs
    "sweep_dense_1000": {"command": ["-m", "sim", "sweep", "scenarios/a100_llama2_7b.yaml", "--set",
                                     "serve.requests=20", "--axis", "serve.workload.rate_per_s=0.25..10:0.25",
                                     "--axis", "machines.a100_box.engine.parallel=8..200:8", "--workers", "2",
                                     "--quiet"], "target_s": 40.0, "runs": 1},
}
QUICK = ["dense_7b_arxiv_1k", "moe_arxiv_1k", "azure_conv", "sweep_one_point"]
VIDUR_S = (54.0, 76.0)  # 10,000 arXiv requests, one simulated A100 (shared/traces/README.md)
VIDUR_GIB = (1.9, 2.5)


def child(name: str) -> None:
    """Run one case in this process and print its figures as JSON."""
    t0 = time.perf_counter()
    import sim
    import sim.api  # noqa: F401 - the imports, timed apart from the run

    imported = time.perf_counter() - t0
    case = CASES[name]
    start = time.perf_counter()
    res = sim.load(case["scenario"], case["sets"]).run(seed=0)
    wall = time.perf_counter() - start
    recs = res.served
    print(json.dumps({"wall_s": wall, "import_s": imported, "requests": len(recs),
                      "tokens": int(recs.output_tokens.sum()), "prompt_tokens": int(recs.prompt_tokens.sum()),
                      "makespan_s": res.metrics["makespan_s"]}))


def run_case(name: str) -> dict:
    """One case in a fresh process; a whole command (a fraction of a second, at the mercy of the machine's other
    load) is run ``COMMAND_RUNS`` times, each into a fresh folder, and its median reported."""
    case = CASES[name]
    runs = []
    for _ in range(case.get("runs", COMMAND_RUNS) if "command" in case else 1):
        if "command" in case:
            argv = [sys.executable, *case["command"], "--out", tempfile.mkdtemp(prefix="sim-bench-")]
        else:
            argv = [sys.executable, os.path.abspath(__file__), "--child", name]
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        total = time.perf_counter() - start
        stdout, stderr = proc.stdout.read(), proc.stderr.read()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{name} failed: {stderr.strip().splitlines()[-1] if stderr.strip() else status}")
        figures = json.loads(stdout) if "command" not in case else {"wall_s": total}
        runs.append({"case": name, "process_s": total, "peak_rss_mb": usage.ru_maxrss / 1024, **figures})
    runs.sort(key=lambda r: r["wall_s"])
    return runs[len(runs) // 2]


COMMAND_RUNS = 5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--cases", default=None, help=f"comma-separated, of {', '.join(CASES)}")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    # bytecode for sim's modules, as an installed package has it (an environment with PYTHONDONTWRITEBYTECODE would
    # otherwise recompile them in every case's process: 40-90 ms of a short command)
    compileall.compile_dir(os.path.join(ROOT, "sim"), quiet=1)
    names = args.cases.split(",") if args.cases else (QUICK if args.quick else
                                                      [n for n, c in CASES.items() if not c.get("slow")])
    ref = min(reference_loop_s() for _ in range(3))
    print(f"reference loop (1e6 additions): {ref * 1e3:.1f} ms; python {sys.version.split()[0]}")
    print(f"{'case':<20}{'wall s':>8}{'process s':>10}{'RSS MB':>8}{'requests':>10}{'tokens':>13}{'req/s':>9}"
          f"{'tok/s':>10}{'ref loops':>10}  target, reference")
    for name in names:
        r = run_case(name)
        case = CASES[name]
        per = (f"{r['requests'] / r['wall_s']:>9,.0f}{r['tokens'] / r['wall_s']:>10,.0f}" if "requests" in r
               else f"{'':>9}{'':>10}")
        counts = f"{r['requests']:>10,}{r['tokens']:>13,}" if "requests" in r else f"{'':>10}{'':>13}"
        notes = []
        if case.get("target_s"):
            notes.append(f"target {case['target_s']:g} s: {'met' if r['wall_s'] <= case['target_s'] else 'MISSED'}")
        if case.get("target_mb"):
            notes.append(f"target {case['target_mb']:g} MB: "
                         f"{'met' if r['peak_rss_mb'] <= case['target_mb'] else 'MISSED'}")
        if case.get("vidur_s"):
            notes.append(f"{case['vidur_s'] / r['wall_s']:.0f}x faster than Vidur's {case['vidur_s']:g} s")
        if case.get("reference"):
            notes.append(f"{VIDUR_S[0] / r['wall_s']:.0f}-{VIDUR_S[1] / r['wall_s']:.0f}x faster and "
                         f"{VIDUR_GIB[0] * 1024 / r['peak_rss_mb']:.1f}-{VIDUR_GIB[1] * 1024 / r['peak_rss_mb']:.1f}x "
                         "less memory than Vidur")
        print(f"{name:<20}{r['wall_s']:>8.2f}{r['process_s']:>10.2f}{r['peak_rss_mb']:>8.0f}{counts}{per}"
              f"{r['wall_s'] / ref:>10.0f}  {'; '.join(notes)}")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
