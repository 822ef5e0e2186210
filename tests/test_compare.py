"""Answers as differences: `sim compare` runs a baseline and its variants on the same seeds and prints each metric of
both with the change; the same numbers in text, --json, --out and --markdown."""

import csv
import json
import math

import pytest
from click.testing import CliRunner
from conftest import HOME_LAB

import sim
from sim.cli import main
from sim.compare import Case, compare, parse_variant, rows
from sim.core.text import number, unit_of

GEN3 = "scenarios/gen3_5090.yaml"
TENANT = "machines.strata_box.gpus.gpu0.reserved_gib"
SMALL = "serve.requests=40"  # a short run: the comparison, not the statistics, is under test


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def tenant_json():
    r = invoke("compare", GEN3, "--vs", f"gone: {SMALL}; {TENANT}=0", "--set", SMALL, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_change_is_the_difference_of_two_plain_runs(tenant_json):
    base = sim.load(GEN3).set(SMALL).run(seed=0).metrics
    gone = sim.load(GEN3).set(SMALL).set(TENANT, 0).run(seed=0).metrics
    entry = tenant_json["metrics"]["decode_tok_s"]
    v = entry["variants"]["gone"]
    assert entry["baseline"] == base["decode_tok_s"] and v["value"] == gone["decode_tok_s"]
    assert v["change"] == gone["decode_tok_s"] - base["decode_tok_s"] > 0
    assert math.isclose(v["relative"], v["change"] / base["decode_tok_s"])
    slots = tenant_json["metrics"]["expert_slots"]
    assert slots["variants"]["gone"]["value"] > slots["baseline"]  # the freed VRAM holds experts


def test_set_alone_compares_against_the_scenario_as_it_is():
    """`sim compare S --set X` is S with X against S without it."""
    gen1 = "machines.mining_box.gpus.card0.negotiated_gen=1"
    r = invoke("compare", HOME_LAB, "--set", gen1, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["baseline"]["set"] == [] and out["variants"][0]["set"] == [gen1]
    link = out["metrics"]["load.mining_box.link_gbps"]
    assert link["variants"][gen1]["value"] < link["baseline"]  # the riser at Gen1 out of the box


def test_identical_cases_change_nothing():
    """A variant equal to the baseline: every change is exactly zero and the text says no metric differs."""
    cmp = compare(Case("baseline", HOME_LAB), [Case("same", HOME_LAB)], [0])
    assert all(r["change"] == 0 or math.isnan(r["change"]) for r in rows(cmp))
    r = invoke("compare", HOME_LAB, "--vs", HOME_LAB)
    assert r.exit_code == 0 and f"0 of {len(cmp.metrics)} metrics differ" in r.stdout


def test_paired_seeds_give_an_interval_around_the_median_change():
    cmp = compare(Case("baseline", GEN3, (SMALL,)), [parse_variant(f"{TENANT}=9", Case("b", GEN3, (SMALL,)))],
                  [0, 1, 2])
    (row,) = [r for r in rows(cmp) if r["metric"] == "decode_tok_s"]
    assert row["change_p5"] <= row["change"] <= row["change_p95"]
    assert row["change_p5"] > 0  # the tenant's memory costs decode rate on every seed


def test_text_fits_120_columns_and_names_units(tenant_json):
    r = invoke("compare", GEN3, "--set", SMALL, "--vs", f"gen4: {SMALL.replace('40', '41')}",
               "--vs", f"gone: {TENANT}=0", "--vs", "lru: machines.strata_box.engine.policy=lru")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 120
    (decode,) = [line for line in lines if line.startswith("decode_tok_s ")][:1]
    assert "tok/s" in decode and "%" in decode
    assert "metrics differ" in lines[-1]


def test_out_writes_the_json_and_a_tidy_table(tmp_path, tenant_json):
    out = tmp_path / "cmp"
    r = invoke("compare", GEN3, "--vs", f"gone: {SMALL}; {TENANT}=0", "--set", SMALL, "--out", str(out))
    assert r.exit_code == 0, r.output
    assert json.loads((out / "comparison.json").read_text()) == tenant_json
    with open(out / "comparison.csv") as fh:
        table = list(csv.DictReader(fh))
    (decode,) = [t for t in table if t["metric"] == "decode_tok_s"]
    assert float(decode["change"]) == tenant_json["metrics"]["decode_tok_s"]["variants"]["gone"]["change"]


def test_markdown_has_a_row_per_case():
    r = invoke("compare", GEN3, "--set", SMALL, "--vs", f"gone: {TENANT}=0", "--vs", f"nine: {TENANT}=9",
               "--metric", "decode_tok_s", "--metric", "expert_hit_rate", "--markdown")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "| case | decode_tok_s (tok/s) | expert_hit_rate (%) |"
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| baseline", "| gone", "| nine"]
    assert "pts)" in lines[3] and "%)" in lines[3]


@pytest.mark.parametrize("args,needle", [
    ((), "give --set changes"),
    (("--vs", "nothere.yaml"), "nothere.yaml: file not found"),
    (("--vs", "just words"), "expected PATH=VALUE"),
    (("--set", "seed=1", "--metric", "no_such_metric"), "--metric: no_such_metric: matches no metric"),
    (("--vs", "seed=abc"), "seed: bad value"),
])
def test_bad_comparisons_are_one_line_errors(args, needle):
    r = CliRunner().invoke(main, ["compare", HOME_LAB, *args])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_units_and_numbers():
    assert unit_of("decode_tok_s") == ("tok/s", 1.0) and unit_of("decode_tok_s_median") == ("tok/s", 1.0)
    assert unit_of("pcie_spill_share") == ("%", 100.0) and unit_of("ttft_p99_s") == ("s", 1.0)
    assert unit_of("vram.gpu0.used_mib") == ("MiB", 1.0) and unit_of("expert_slots") == ("", 1.0)
    assert number(31862.3) == "31,862" and number(5785.0) == "5,785" and number(0.06026) == "0.06026"
    assert number(float("nan")) == "-" and "e" not in number(1.5e-7) and number(1.5e-7).startswith("0.000000")
    assert number(11.7) == "11.70" and number(1.381) == "1.381" and number(999.96) == "1,000"  # 4 digits each



def test_a_label_given_twice_is_numbered():
    r = invoke("compare", HOME_LAB, "--vs", f"x: {TENANT.replace('strata_box', 'nope')}=1", "--json")
    assert r.exit_code == 2
    r = invoke("compare", HOME_LAB, "--vs", "same: seed=1", "--vs", "same: seed=2", "--json")
    assert r.exit_code == 0 and [v["label"] for v in json.loads(r.stdout)["variants"]] == ["same", "same (2)"]
