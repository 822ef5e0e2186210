"""Measured-against-simulated tables of the docs that `sim validate` produces: every simulated figure (and error) a
page quotes in such a table is what `sim validate --only GROUP --json` prints now, rounded as the page rounds it.
The measured column comes from calibration/ and is checked there; a row the page shows from another command (a
`sim run`) is shown by a console block of the page instead. A re-fit or a code change that moves a figure fails here
until the page follows."""

from __future__ import annotations

import json
import os
import re
from functools import cache

import pytest
from click.testing import CliRunner

from sim.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")

# page -> (validate group, first column of the page's table holding the simulated figures, {row label: figures});
# a figure is (cell of `sim validate`, "simulated" or "error", how the page writes it: a format spec, x100 when it
# ends in %)
Figure = tuple[str, str, str]


def both(cell: str, spec: str) -> list[Figure]:
    """A cell's simulated value written with ``spec``, then its relative error in % with one decimal and a sign."""
    return [(cell, "simulated", spec), (cell, "error", "+.1f%")]


TABLES: dict[str, tuple[str, int, dict[str, list[Figure]]]] = {
    "docs/expert_caches.md": ("strata", 2, {
        "round 1: expert slots (8.31 GiB free)": [("round1_slots", "simulated", ".0f")],
        "round 2: expert slots (26.01 GiB free)": [("round2_slots", "simulated", ".0f")],
        "round 1: coverage": [("round1_coverage", "simulated", ".1f%")],
        "round 1: decode hit rate (median request)": [("round1_decode_hit_rate", "simulated", ".1f%")],
        "round 1: decode tok/s": both("round1_decode_tok_s", ".1f"),
        "round 1 / round 2: GPU utilisation": [("gpu_utilization_round1", "simulated", ".1f%"),
                                               ("gpu_utilization_round2", "simulated", ".1f%")],
        "round 2 / round 1: power": [("power_ratio_round2_over_round1", "simulated", ".2f")],
        "bucket spill 0 (none): decode tok/s": both("pcie_spill 0-0", ".1f"),
        "bucket spill under 0.5%: decode tok/s": both("pcie_spill 0-0.5", ".1f"),
        "bucket spill 0.5-3%: decode tok/s": both("pcie_spill 0.5-3", ".1f"),
        "bucket spill over 5%: decode tok/s": both("pcie_spill 5-up", ".1f"),
        "bucket hit rate 90-95%: decode tok/s": both("hit_rate 90-95", ".1f"),
        "bucket hit rate 95-99%: decode tok/s": both("hit_rate 95-99", ".1f"),
        "not fitted: round 2 decode tok/s": [("1 single_stream_decode_tok_s", "simulated", ".1f")],
    }),
    "docs/multi_gpu.md": ("basalt", 2, {
        "bench decode (acceptance not reported; 88.5% assumed: the log's requests at that rate had 88-89%)": [
            ("bench_decode", "simulated", ".0f"), ("bench_decode", "error", "+.1f%")],
        "bench pp16384 cold prefill tok/s (not claimed, see below)": [
            ("bench_prefill_16k_cold", "simulated", ",.0f"), ("bench_prefill_16k_cold", "error", "+.1f%")],
        "sweep prefill tok/s 32K / 64K / 128K / 256K": [
            (f"{k} prefill_tok_s_median", "simulated", ",.0f") for k in ("32K", "64K", "128K", "256K")],
        "sweep decode tok/s cold (cached) medians": [
            (f"{k} decode_cold_median", "simulated", ".0f") for k in ("32K", "64K", "128K", "256K")],
        "2 GPUs, peer reserve 600 MiB: decode tok/s, free MiB on the peer": [
            ("600 decode_tok_s_values", "simulated", ".1f")],
        "peer reserve 1536 / 2048: decode tok/s, free MiB": [("1536 decode_tok_s_values", "simulated", ".1f"),
                                                             ("2048 decode_tok_s_values", "simulated", ".1f")],
        "vision encoder on the primary / on the CPU: decode tok/s": [
            ("on_5090_primary decode_tok_s_values", "simulated", ".1f"),
            ("cpu_16_threads decode_tok_s_values", "simulated", ".1f")],
    }),
    "docs/loading.md": ("loads", 3, {
        "WL0003 (BV-syschar)": both("WL0003 bv_3070ti direct_read_gbps", ".3f"),
        "WL0007 (BV-syschar)": both("WL0007 bv_3070ti h2d_pageable_gbps", ".2f"),
        "WL0074 (HR114)": both("WL0074 hr_laptop start_s", ".1f"),
        "WL0059 (HR107)": both("WL0059 hr_laptop start_s", ".1f"),
        "WL0061 (HR107)": both("WL0061 hr_laptop start_s", ".1f"),
        "WL0063 (HR107)": both("WL0063 hr_laptop start_s", ".1f"),
        "WL0053 (BV-load-fork)": both("WL0053 bv_3070ti start_s", ".2f"),
    }),
}
LOADS_MEDIAN = re.compile(r"Median absolute error of the (\d+) checks: ([\d.]+)%")


@cache
def validate(group: str) -> dict[str, dict]:
    """cell name -> its JSON row, from one in-process `sim validate --only GROUP --json`."""
    result = CliRunner().invoke(main, ["validate", "--root", ROOT, "--only", group, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {cell["cell"]: cell for cell in json.loads(result.stdout)["cells"]}


def page_rows(name: str, column: int, after: str = "") -> dict[str, str]:
    """row label (first cell) -> the text of the cells from ``column`` on, of every table row of the page (after the
    first line starting with ``after``; the first row of a label)."""
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    if after:
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith(after)):]
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > column:
            rows.setdefault(cells[0], " | ".join(cells[column:]))
    return rows


def written(value: float, spec: str) -> str:
    """``value`` as the page writes it: ``spec`` a format spec, the value in % (x100) when the spec ends in %."""
    if spec.endswith("%"):
        return format(value * 100, spec[:-1])
    return format(value, spec)


def numbers(text: str) -> list[str]:
    """The numbers of a cell's text, thousands separators dropped."""
    return [n.replace(",", "") for n in NUMBER.findall(text)]


def in_order(expected: list[str], quoted: list[str]) -> bool:
    """Whether every expected figure is among the quoted ones, in the same order."""
    rest = iter(quoted)
    return all(figure in rest for figure in expected)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_pages_simulated_figures_are_what_validate_prints(name):
    group, column, rows = TABLES[name]
    cells, shown = validate(group), page_rows(name, column)
    for label, figures in rows.items():
        assert label in shown, f"{name}: no table row {label!r}"
        expected = [written(cells[cell][key], spec).replace(",", "") for cell, key, spec in figures]
        assert in_order(expected, numbers(shown[label])), (
            f"{name}: row {label!r} quotes {shown[label]!r}; `sim validate --only {group}` gives {expected}")


def test_the_loads_median_error_is_validates():
    with open(os.path.join(ROOT, "docs/loading.md"), encoding="utf-8") as fh:
        found = LOADS_MEDIAN.search(fh.read())
    assert found, "docs/loading.md: no 'Median absolute error of the N checks: X%' sentence"
    cell = next(c for name, c in validate("loads").items() if name.startswith("check rows median |error|"))
    assert f"check rows median |error| ({found[1]} rows)" == cell["cell"]
    assert found[2] == written(cell["simulated"], ".1f%"), f"docs/loading.md: validate gives {cell['simulated']}"


# --- prose and tables quoting other producers -------------------------------------------------------------------------
# Each check below rebuilds a page's figures from what produces them (a benchmark's functions, a shipped calibration
# file, the fidelity report, a short run) and fails when the page and the producer part.

def page(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def flat(text: str) -> str:
    """``text`` with every run of white space as one blank (prose wraps anywhere)."""
    return " ".join(text.split())


def says(name: str, *pieces: str) -> None:
    """Each piece is in the page, in the order given (white space as in :func:`flat`)."""
    text, at = flat(page(name)), 0
    for piece in pieces:
        found = text.find(flat(piece), at)
        assert found >= 0, f"{name}: no longer says {piece!r} (after character {at})"
        at = found + len(flat(piece))


def in_row(name: str, label: str, *pieces: str, column: int = 1, after: str = "") -> None:
    """The page's table row ``label`` (after the line starting with ``after``) holds each piece, in order, in its
    cells from ``column`` on."""
    rows = page_rows(name, column, after)
    assert label in rows, f"{name}: no table row {label!r}"
    at = 0
    for piece in pieces:
        found = rows[label].find(piece, at)
        assert found >= 0, f"{name}: row {label!r} is {rows[label]!r}; expected {piece!r} there"
        at = found + len(piece)


def short_exp(value: float) -> str:
    """3 significant figures in the pages' exponent form: 9.39e-5."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.2e}").replace("e+", "e")


def benchmark(name: str):
    """A module of benchmarks/ (they import their siblings, so benchmarks/ goes on the path)."""
    import importlib
    import sys

    folder = os.path.join(ROOT, "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


@cache
def vidur() -> tuple:
    """(benchmarks/vidur_compare.py, its results per rate, its targets), as its main() computes them."""
    import tempfile

    vc = benchmark("vidur_compare")
    results = {}
    with tempfile.TemporaryDirectory(prefix="sim-vidur-") as workdir:
        for rate in vc.RATES:
            ours, _ = vc.sim_outcomes(rate, vc.REQUESTS, workdir, {})
            results[rate] = {"sim": vc.statistics(ours)} | {
                run: vc.statistics(vc.vidur_outcomes(rate, run, vc.REQUESTS)) for run in vc.VIDUR_RUNS}
    return vc, results, vc.targets(results)


def test_the_vidur_page_is_what_its_benchmark_writes_but_the_run_times():
    vc, results, checks = vidur()
    report = vc.markdown(results, checks, dict.fromkeys(vc.RATES, 0.0), 0.0, 1.0, vc.REQUESTS).splitlines()
    shown = page("docs/vidur_compare.md").splitlines()
    timed = "sim's run time"  # the one line of wall times, which vary

    assert [line for line in shown if not line.startswith(timed)] == [
        line for line in report if not line.startswith(timed)], "docs/vidur_compare.md: rerun " \
        "`python benchmarks/vidur_compare.py --out docs/vidur_compare.md`"


def test_the_vidur_figures_other_pages_quote_are_the_benchmarks():
    vc, results, checks = vidur()
    f = vc.fmt
    for rate in vc.RATES:
        s, v = results[rate]["sim"], results[rate][vc.TARGET_RUN]
        rel = vc.relative(s["tpot_p50_s"], v["tpot_p50_s"])
        in_row("docs/batching.md", f"{rate}/s",
               f"{f(s['throughput_tok_s'])} / {f(v['throughput_tok_s'])} "
               f"({vc.pct(vc.relative(s['throughput_tok_s'], v['throughput_tok_s']))})",
               f"{f(s['ttft_p50_s'])} / {f(v['ttft_p50_s'])}, {f(s['ttft_p99_s'])} / {f(v['ttft_p99_s'])}",
               f"{f(s['tpot_p50_s'], 1e3)} / {f(v['tpot_p50_s'], 1e3)} ({rel:+.0%}), "
               f"{f(s['tpot_p99_s'], 1e3)} / {f(v['tpot_p99_s'], 1e3)}", f"{f(s['restarts'])} / {f(v['restarts'])}")
    saturating = next(c for c in checks if c["key"] == "steady_completion_rate_per_s")
    assert all(c["met"] for c in checks)
    says("docs/batching.md", f"The saturating rate is {f(saturating['sim'])} against Vidur's {f(saturating['vidur'])} "
         f"requests/s ({vc.pct(saturating['relative'])}): all {len(checks)} targets")
    worst = max(abs(c["relative"]) for c in checks if c is not saturating)
    says("docs/serving.md", f"within {worst:.1%} at 1, 2 and 3 requests/s, the saturating rate within "
         f"{abs(saturating['relative']):.1%}")


def test_the_kernel_fits_the_pages_quote_are_the_benchmarks():
    fits = benchmark("fit_kernel_families").run()
    ampere, hopper = fits["families"]["ampere"], fits["families"]["hopper"]
    held = {h["source"]: h["error"] for h in fits["held_out"]}
    a100_l2, a100_l3, a40 = (held[s] for s in ("A100 80GB / Llama-2-7B", "A100 80GB / Llama-3-8B", "A40 / Llama-2-7B"))
    says("docs/serving.md", f"Ampere {ampere['memory_efficiency']} / {ampere['compute_efficiency']} (the A100 "
         f"profiles held out: median {a100_l2:.1%} and {a100_l3:.1%}; the A40, a card never fitted: {a40:.1%}), "
         f"Hopper {hopper['memory_efficiency']} / {hopper['compute_efficiency']} (one source)")
    says("docs/batching.md", f"Ampere {ampere['memory_efficiency']} and {ampere['compute_efficiency']} from the A100 "
         f"and A40 profiles, Hopper {hopper['memory_efficiency']} and {hopper['compute_efficiency']} from the H100's; "
         f"judged leave-one-source-out, the A100's two profiles are predicted within a median {a100_l2:.1%} and "
         f"{a100_l3:.1%} and the A40's (a card never fitted) within {a40:.1%}")
    attention = benchmark("fit_attention_kernels").fit()
    efficiency, call_us = attention["kv_read_efficiency"], attention["attention_call_s"] * 1e6
    says("docs/serving.md", f"Ampere {efficiency} and {call_us:.1f} us",
         f"median error {attention['batched_median_error']:.1%} over its batched rows")
    ramp = f"at {efficiency:.1%} of the bandwidth after a {call_us:.0f} us ramp per layer"
    says("docs/batching.md", f"reads KV {ramp}")
    says("docs/vidur_compare.md", f"KV read {ramp}")


def test_the_prefix_caches_gain_is_what_its_test_configuration_gives():
    """docs/serving.md quotes tests/test_prefix_cache.py's configuration: a 2,048-token prompt at 6 requests/s."""
    import numpy as np
    from test_dense_serve import dense_scenario, run

    saved, ttft, off_ttft = [], [], set()
    for share in (0.0, 0.25, 0.5, 0.75):
        system = int(2048 * share)
        over = {"serve__prompt_tokens": 2048 - system, "serve__workload__system_prompt_tokens": system,
                "serve__requests": 200, "serve__workload__rate_per_s": 6.0}
        on = run(dense_scenario(**over))
        off = run(dense_scenario(**over, machines__box__engine__scheduler={"enable_prefix_caching": False}))
        saved.append(f"{int(np.sum(on[1].cached_tokens)):,}")
        ttft.append(f"{on[2]['ttft_mean_s']:.1f}")
        off_ttft.add(f"{off[2]['ttft_mean_s']:.1f}")
    assert len(off_ttft) == 1
    says("docs/serving.md", f"prefill tokens saved {', '.join(saved[:3])} and {saved[3]} at a shared system prompt "
         f"of 0, 25, 50 and 75% of it, and mean TTFT {', '.join(ttft[:3])} and {ttft[3]} s against {off_ttft.pop()} s "
         "without the cache")


@cache
def fidelity() -> dict[tuple[str, str, str], list[str]]:
    """(table, backend, quantity) -> the cells from `rows` on of docs/fidelity.md's row (table "all": its headline,
    backend "all" for the headline's **all**); the first row of a key when engines share it."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for line in page("docs/fidelity.md").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[3].isdigit():  # headline: domain, quantity, backend, rows, ...
            out.setdefault(("all", cells[2].strip("*"), cells[1]), cells[3:])
        elif len(cells) == 13 and cells[4].isdigit():  # by table: table, engine, backend, quantity, rows, ...
            out.setdefault((cells[0], cells[2], cells[3]), cells[4:])
    return out


def test_llamacpps_held_out_table_is_the_fidelity_reports():
    report, held_out = fidelity(), "## How it does on machines it never saw"

    def head(quantity: str, backend: str = "all") -> list[str]:
        return report[("all", backend, quantity)]

    for label, quantity in (("decode (tg)", "tg_tok_s"), ("prompt (pp)", "pp_tok_s")):
        rows, sources, median, *_, in_sample = head(quantity)[:7]
        in_row("docs/llamacpp.md", label, rows, sources, median, in_sample,
               *(f"{name} {head(quantity, name.lower())[2]}" for name in ("CUDA", "HIP", "Vulkan", "Metal")),
               after=held_out)
    vram = head("vram_gib")
    in_row("docs/llamacpp.md", "VRAM", vram[0], vram[1], f"{vram[2]} ({float(vram[7]):.2f} GiB; {vram[8]} within "
           "0.5 GiB)", vram[6], after=held_out)
    btg, bpp = (report[("unified_memory_concurrency.csv", "cuda", q)] for q in ("btg_tok_s", "bpp_tok_s"))
    in_row("docs/llamacpp.md", "llama-batched-bench S_TG / S_PP (GB10)", f"{btg[0]} / {bpp[0]}", btg[1],
           f"{btg[2]} / {bpp[2]}", f"{btg[6]} / {bpp[6]}", after=held_out)


def test_unified_memorys_held_out_table_is_the_fidelity_reports():
    """Every row but the pooled "all unified" one, which the report does not give (the page says where it is from)."""
    report, name = fidelity(), "docs/unified_memory.md"

    def cells(table: str, backend: str, *quantities: str) -> tuple[list[str], ...]:
        return tuple(report[(table, backend, q)] for q in quantities)

    bench, batched = "unified_memory_llamabench.csv", "unified_memory_concurrency.csv"
    for label, table, quantity in (("GB10 llama-bench tg", bench, "tg_tok_s"), ("GB10 llama-bench pp", bench,
                                   "pp_tok_s"), ("GB10 batched-bench S_TG", batched, "btg_tok_s"),
                                   ("GB10 batched-bench S_PP", batched, "bpp_tok_s")):
        (row,) = cells(table, "cuda", quantity)
        in_row(name, f"{label} ({row[0]})", row[2], row[6])
    for label, backend in (("Strix Halo HIP", "hip"), ("Strix Halo Vulkan", "vulkan")):
        tg, pp = cells(bench, backend, "tg_tok_s", "pp_tok_s")
        in_row(name, f"{label} tg / pp ({tg[0]} / {pp[0]})", f"{tg[2]} / {pp[2]}", f"{tg[6]} / {pp[6]}")
    rates = cells("concurrency.csv", "-", "output_tok_s", "tpot_mean_ms", "ttft_mean_ms")
    assert len({r[0] for r in rates}) == 1
    in_row(name, f"vLLM on a GB10, Qwen3.6-35B-A3B FP8 ({rates[0][0]} rows): throughput / TPOT / TTFT",
           " / ".join(r[2] for r in rates), " / ".join(r[6] for r in rates))


def shipped(name: str) -> dict:
    from ruamel.yaml import YAML

    with open(os.path.join(ROOT, "calibration", name), encoding="utf-8") as fh:
        return YAML(typ="safe").load(fh)


def test_the_llamacpp_bands_and_counts_are_the_shipped_files():
    bands = shipped("llamacpp_bands.yaml")

    def band(key: str) -> str:
        return ", ".join(f"{q} {lo:.2f}-{hi:.2f}" for q, (lo, hi) in bands[key].items())

    says("docs/llamacpp.md", f"({band('band')}; anchored to a run of your own, {band('band_within')})")
    fit = shipped("llamacpp.yaml")
    rows: dict[str, int] = {}
    for key, value in fit["summary"].items():
        quantity = key.rsplit(".", 1)[1]
        rows[quantity] = rows.get(quantity, 0) + value["rows"]
    says("docs/llamacpp.md", f"That is {sum(rows.values()):,} measured numbers", f"({rows['tg_tok_s']} decode rates, "
         f"{rows['pp_tok_s']} prompt rates, {rows['vram_gib']} VRAM totals, {rows['btg_tok_s']} S_TG and "
         f"{rows['bpp_tok_s']} S_PP of llama-batched-bench); {len(fit['excluded'])} rows are listed with why")


def test_the_model_file_sizes_are_within_what_the_hardware_page_says():
    import csv

    from sim.modelfiles import read_hf_config

    with open(os.path.join(ROOT, "tests", "data", "model_file_sizes.csv"), encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] == "ftype"]
    worst = max(abs(read_hf_config(os.path.join(ROOT, "calibration", "models", f"{r['config']}.json"),
                                   r["ftype"]).weights_bytes / 2**30 / float(r["file_size_gib"]) - 1) for r in rows)
    says("docs/hardware.md", f"within {worst:.1%} of every file size the public llama-bench tables give")


def test_the_basalt_fit_the_pages_quote_is_the_shipped_file():
    fit = shipped("basalt_moe.yaml")
    value = {k.split(".", 1)[1].removeprefix("basalt_box.").removeprefix("basalt_pack."): v
             for k, v in fit["parameters"].items()}
    sd = {k.split(".", 1)[1].removeprefix("basalt_box.").removeprefix("basalt_pack."): v
          for k, v in fit["log_sd"].items()}
    p = "engine.prefill."
    says("docs/calibration.md", f"the fixed time is {value['engine.step.layer_s'] * 1e6:.0f} us per layer and the "
         f"prefill {short_exp(value[p + 'token_s'])} s per token and {value[p + 'stream_gbps']:.1f} GB/s")
    says("docs/multi_gpu.md",
         f"`prefill.token_s` {short_exp(value[p + 'token_s'])} s (relative standard error {sd[p + 'token_s']:.1%}), "
         f"`prefill.stream_gbps` {value[p + 'stream_gbps']:.1f} GB/s ({sd[p + 'stream_gbps']:.0%}), "
         f"`prefill.kv_spill_token_s` {short_exp(value[p + 'kv_spill_token_s'])} s, `prefill.fixed_s` "
         f"{value[p + 'fixed_s']:.3f} s); the routing law (exponent {value['moe.routing.exponent']:.3f}, spread "
         f"{value['moe.routing.exponent_spread']:.4f}, which the data do not pin down: relative standard error "
         f"{sd['moe.routing.exponent_spread']:.0%}); the step (`step.layer_s` {value['engine.step.layer_s'] * 1e6:.1f}"
         f" us, {sd['engine.step.layer_s']:.1%},",
         f"(`kv_kib_per_token` {value['moe.kv_kib_per_token']:.2f} KiB, not pinned down: "
         f"{sd['moe.kv_kib_per_token']:.0%}); and `peers.gpu1.paging_link_share` "
         f"({value['engine.peers.gpu1.paging_link_share']:.3f}, {sd['engine.peers.gpu1.paging_link_share']:.0%})")
    says("docs/multi_gpu.md", f"(fitted: {value['engine.peers.gpu1.paging_link_share']:.3f} of 6.44 GB/s)")
    logged = [r for r in fit["residuals"] if r["target"].startswith("basalt_serve_sample.log:")]

    def spread(observable: str) -> str:
        values = [r["simulated"] * 100 for r in logged if r["target"].endswith(" " + observable)]
        return f"{min(values):.1f}-{max(values):.1f}%"

    says("docs/multi_gpu.md", f"the fit gives every line {spread('expert_hit_rate')} and "
         f"{spread('pcie_share').removesuffix('%')}")


def test_the_strata_figures_outside_validate_are_the_shipped_fits_and_its_cells():
    logged = {r["target"].rsplit(" ", 1)[1]: r for r in shipped("strata_moe.yaml")["residuals"]
              if r["target"].startswith("strata_sample.log:")}
    spill = logged["pcie_share"]
    in_row("docs/expert_caches.md", "not fitted: spill share, the log's one request", f"{spill['measured']:.2%}",
           f"{spill['simulated']:.2%} (median of 25 replays)")
    says("docs/expert_caches.md", f"read {spill['measured']:.2%} of its routed experts over PCIe at "
         f"{logged['expert_hit_rate']['measured']:.1%} hits")
    cells = validate("strata")  # energy per token is power over decode: round 2's over round 1's
    energy = (cells["power_ratio_round2_over_round1"]["simulated"] * cells["round1_decode_tok_s"]["simulated"]
              / cells["1 single_stream_decode_tok_s"]["simulated"])
    in_row("docs/expert_caches.md", "round 2 / round 1: energy per token", f"| {energy:.2f}")


@pytest.mark.parametrize("reserve, label", [
    (600, "2 GPUs, peer reserve 600 MiB: decode tok/s, free MiB on the peer"),
    (1536, "peer reserve 1536 / 2048: decode tok/s, free MiB"),
    (2048, "peer reserve 1536 / 2048: decode tok/s, free MiB")])
def test_the_2_gpu_free_vram_and_prefill_are_what_sim_run_gives(reserve, label):
    """docs/multi_gpu.md's free MiB on the peer and 2-GPU prefill: `sim run` of the requests `sim validate` runs."""
    import sim

    over = ["serve.workload.kind=sequential", "serve.requests=20", "serve.prompt_tokens=6867",
            "serve.output_tokens_min=200", "serve.output_tokens_max=200",
            f"machines.basalt_box.engine.peers.gpu1.reserve_mib={reserve}"]
    metrics = sim.load(os.path.join(ROOT, "scenarios", "basalt_2gpu_vision.yaml"), over).run(seed=11).metrics
    shown = numbers(page_rows("docs/multi_gpu.md", 2)[label])
    assert f"{metrics['vram.gpu1.free_mib']:.0f}" in shown, f"docs/multi_gpu.md: row {label!r}: sim run gives " \
                                                            f"{metrics['vram.gpu1.free_mib']:.0f} MiB free"
    in_row("docs/multi_gpu.md", "prefill across the three reserves", f"unchanged ({metrics['prefill_tok_s']:,.0f})",
           column=2)


def test_the_capacity_spread_serving_quotes_is_what_sim_capacity_gives(tmp_path):
    """The spread of docs/serving.md's first session (its console line also prints the wall time, so it is not
    quoted there)."""
    lab = str(tmp_path / "lab.yaml")
    runner = CliRunner()
    wrote = runner.invoke(main, ["vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct", "--gpu", "a100_80gb_sxm",
                                 "--rate", "4", "--requests", "2000", "--prompt", "1000", "--gen", "200",
                                 "--write", lab, "--no-run"], catch_exceptions=False)
    assert wrote.exit_code == 0, wrote.output
    answer = runner.invoke(main, ["capacity", lab, "--goal", "ttft_p99<1s", "--goal", "tpot_p99<50ms", "--json"],
                           catch_exceptions=False)
    assert answer.exit_code == 0, answer.output
    found = json.loads(answer.stdout)
    says("docs/serving.md", f"The second answers the capacity question on it: {found['capacity']:.1f} requests/s "
         f"({found['low']:.2f} to {found['high']:.2f} over 5 seeds)")


def test_the_llamacpp_fits_rows_and_sources_are_what_it_reads():
    from sim.calibration.llamacpp_cases import read_cases

    table = read_cases(ROOT)
    says("docs/llamacpp.md", f"That is {len(table.cases):,} measured numbers of "
         f"{len({(c.table, c.row_id) for c in table.cases})} rows from {len({c.source for c in table.cases})} sources",
         f"{len(table.excluded)} rows are listed with why")
