"""``sim logs`` of llama-bench and llama-sweep-bench outputs: their tests as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

import click

from sim.core.text import table

FIELDS = ("file", "line", "format", "test", "n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "n_gpu_layers",
          "n_cpu_moe", "n_ubatch", "n_batch", "n_threads", "type_k", "type_v", "flash_attn", "use_mmap",
          "tensor_buft_overrides", "model_type", "model_size_bytes", "backend")


def bench_outputs(files) -> dict:
    """The files (of ``files``) that are llama-bench outputs, with what was read of each; {} when none is."""
    from sim.calibration.own_runs import is_bench_output, read_bench_file

    out = {}
    for path in files:
        runs = read_bench_file(path)
        if is_bench_output(runs):
            out[path] = runs
    return out


def _rows(benches: dict) -> list[dict]:
    rows = []
    for path, runs in benches.items():
        for r in runs.records:
            d = asdict(r)
            rows.append({"file": path} | {k: d.get(k) for k in FIELDS if k != "file"})
    return rows


def print_bench(benches: dict, as_csv: bool, as_json: bool) -> None:
    rows = _rows(benches)
    if as_json:
        doc = {"rows": rows, "files": {p: {"format": r.format, "records": len(r.records), "skipped": len(r.skipped),
                                          "bad": [{"line": b.line, "reason": b.reason} for b in r.bad]}
                                      for p, r in benches.items()}}
        click.echo(json.dumps(doc, indent=2, allow_nan=False, default=str))
        return
    if as_csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        click.echo(buf.getvalue(), nl=False)
        return
    for path, runs in benches.items():
        click.echo(f"{path}: llama-bench output ({runs.format}): {len(runs.records)} tests, {len(runs.skipped)} "
                   f"other lines, {len(runs.bad)} unreadable rows")
        for b in runs.bad[:5]:
            click.echo(f"  line {b.line}: {b.reason}")
    body = [[r["test"], _cell(r["n_gpu_layers"]), _cell(r["n_cpu_moe"]), _cell(r["n_ubatch"]), _cell(r["n_threads"]),
             f"{r['avg_ts']:.2f}" + (f" ± {r['stddev_ts']:.2f}" if r["stddev_ts"] is not None else "")]
            for r in rows]
    click.echo("\n".join(table(body, ["test", "ngl", "n_cpu_moe", "n_ubatch", "threads", "t/s"], "lrrrrr")))
    click.echo("fit your engine to them: sim fit-offload --scenario SCENARIO --bench FILE")


def _cell(v) -> str:
    return "-" if v is None else str(v)
