"""``sim logs`` of llama-bench, llama-sweep-bench and llama-batched-bench outputs: their tests (and batched-bench's
rows) as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import click

from sim.core.text import table

if TYPE_CHECKING:
    from sim.formats.batched_bench import BatchedRuns
    from sim.formats.llama_bench import BadLine, BenchRuns

FIELDS = ("file", "line", "format", "test", "n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "n_gpu_layers",
          "n_cpu_moe", "n_ubatch", "n_batch", "n_threads", "type_k", "type_v", "flash_attn", "use_mmap",
          "tensor_buft_overrides", "model_type", "model_size_bytes", "backend")
BATCHED_FIELDS = ("file", "line", "format", "pp", "tg", "b", "n_kv", "t_pp_s", "s_pp_tok_s", "t_tg_s", "s_tg_tok_s",
                  "t_s", "s_tok_s", "n_kv_max", "n_batch", "n_ubatch", "flash_attn", "is_pp_shared", "is_tg_separate",
                  "n_gpu_layers", "n_threads", "n_threads_batch")


@dataclass
class BenchFile:
    """What was read of one file: its llama-bench / sweep-bench tests and its llama-batched-bench rows."""

    bench: BenchRuns
    batched: BatchedRuns

    @property
    def other(self) -> int:
        """Lines neither reader took (log lines, other tables)."""
        return len(set(self.bench.skipped) & set(self.batched.skipped))

    @property
    def bad(self) -> list[BadLine]:
        """Both readers' unreadable rows, by line."""
        return sorted(self.bench.bad + self.batched.bad, key=lambda b: b.line)


def bench_outputs(files) -> dict[str, BenchFile]:
    """The files (of ``files``) that are benchmark outputs (records and unreadable rows, of both readers, at least a
    quarter of the lines neither took, as :func:`sim.formats.bench_files.is_bench_output` asks of records: a file
    whose rows are all unreadable, 1e300 t/s each, is still shown as one, its rows with their reasons), with what was
    read of each; {} when none is."""
    from sim.formats.batched_bench import read_batched_output
    from sim.formats.bench_files import read_bench_text
    from sim.formats.llama_bench import read_bench_output

    out = {}
    for path in files:
        text = read_bench_text(path)  # checked as a text file of at most MAX_BYTES, read once for both readers
        runs = read_bench_output(text, path)
        read = BenchFile(runs, read_batched_output(text, path))
        records = len(runs.records) + len(read.batched.records) + len(read.bad)
        if records and records >= read.other / 4:
            out[path] = read
    return out


def _rows(benches: dict[str, BenchFile], kind: str, fields) -> list[dict]:
    """One row per record of the ``kind`` reader (``bench`` or ``batched``), its ``fields`` after the file."""
    rows = []
    for path, read in benches.items():
        for r in getattr(read, kind).records:
            d = asdict(r)
            rows.append({"file": path} | {k: d.get(k) for k in fields if k != "file"})
    return rows


def print_bench(benches: dict[str, BenchFile], as_csv: bool, as_json: bool) -> None:
    """The tests and rows of ``benches`` (from :func:`bench_outputs`): a summary and tables, CSV (llama-bench's
    fields; batched-bench's; both when the files hold both kinds, a row filling its own) or JSON."""
    rows, batched = _rows(benches, "bench", FIELDS), _rows(benches, "batched", BATCHED_FIELDS)
    if as_json:
        doc = {"rows": rows, "batched_rows": batched,
               "files": {p: {"format": r.bench.format, "records": len(r.bench.records),
                             "batched_format": r.batched.format, "batched_records": len(r.batched.records),
                             "skipped": r.other, "bad": [{"line": b.line, "reason": b.reason} for b in r.bad]}
                         for p, r in benches.items()}}
        click.echo(json.dumps(doc, indent=2, allow_nan=False, default=str))
        return
    if as_csv:
        fields = FIELDS if not batched else BATCHED_FIELDS if not rows else FIELDS + tuple(
            f for f in BATCHED_FIELDS if f not in FIELDS)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows + batched)
        click.echo(buf.getvalue(), nl=False)
        return
    for path, read in benches.items():
        if read.bench.records or not (read.batched.records or read.batched.bad):
            click.echo(f"{path}: llama-bench output ({read.bench.format}): {len(read.bench.records)} tests, "
                       f"{read.other} other lines, {len(read.bench.bad)} unreadable rows")
        if read.batched.records or (read.batched.bad and not read.bench.records):  # a file of bad rows only too
            click.echo(f"{path}: llama-batched-bench output ({read.batched.format}): {len(read.batched.records)} "
                       f"rows, {read.other} other lines, {len(read.batched.bad)} unreadable rows")
        for b in read.bad[:5]:
            click.echo(f"  line {b.line}: {b.reason}")
    if rows:
        body = [[r["test"], _cell(r["n_gpu_layers"]), _cell(r["n_cpu_moe"]), _cell(r["n_ubatch"]),
                 _cell(r["n_threads"]), f"{r['avg_ts']:.2f}" + (f" ± {r['stddev_ts']:.2f}" if r["stddev_ts"] is not
                                                                None else "")] for r in rows]
        click.echo("\n".join(table(body, ["test", "ngl", "n_cpu_moe", "n_ubatch", "threads", "t/s"], "lrrrrr")))
        click.echo("fit your engine to them: sim fit-offload --scenario SCENARIO --bench FILE")
    if batched:
        click.echo("\n".join(_batched_table(batched)))


def _batched_table(rows: list[dict]) -> list[str]:
    """The rows as aligned columns: sizes, times (s) and speeds (tok/s), and the run's ngl, ubatch and -pps."""
    heads = ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s", "ngl", "n_ubatch",
             "-pps"]
    body = [[str(r["pp"]), str(r["tg"]), str(r["b"]), str(r["n_kv"]), f"{r['t_pp_s']:.3f}", _rate(r["s_pp_tok_s"]),
             f"{r['t_tg_s']:.3f}", _rate(r["s_tg_tok_s"]), f"{r['t_s']:.3f}", _rate(r["s_tok_s"]),
             _cell(r["n_gpu_layers"]), _cell(r["n_ubatch"]), _cell(None if r["is_pp_shared"] is None else
                                                                  int(r["is_pp_shared"]))] for r in rows]
    return table(body, heads, "r" * len(heads))


def _rate(v) -> str:
    return "nan" if v is None else f"{v:.2f}"


def _cell(v) -> str:
    return "-" if v is None else str(v)
