"""`sim validate`: every shipped measured table against its scenario passes, and a broken engine is caught."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import ROOT

from sim.calibration.validate import Cell
from sim.cli import main


@pytest.mark.slow
def test_every_shipped_table_is_within_its_tolerance():
    r = CliRunner().invoke(main, ["validate", "--root", ROOT, "--json"])
    assert r.exit_code == 0, r.output[-2000:]
    data = json.loads(r.output)
    assert data["outside"] == 0
    tables = {c["table"] for c in data["cells"]}
    for name in ("loading_stages.csv", "strata_gen3_5090.csv", "strata_spill_buckets.csv", "strata_concurrency.csv",
                 "basalt_3gpu.csv", "basalt_context_sweep.csv", "basalt_peer_reserve.csv",
                 "basalt_vision_placement.csv"):
        assert name in tables, name
    assert all(c["status"] in ("ok", "info") for c in data["cells"])


def test_cells_judge_rates_shares_and_ranges():
    assert Cell("t", "c", 100.0, 109.0, 0.10).status == "ok"
    assert Cell("t", "c", 100.0, 111.0, 0.10).status == "OUTSIDE"
    assert Cell("t", "c", 0.80, 0.82, 0.015, "share").status == "OUTSIDE"
    assert Cell("t", "c", 40.0, 30.0, 0.25, "range", lo=35, hi=44).status == "ok"  # 30 is 14% under 35
    assert Cell("t", "c", 40.0, 20.0, 0.25, "range", lo=35, hi=44).status == "OUTSIDE"
    assert Cell("t", "c", 40.0, 20.0, 0.25, "range", info="why", lo=35, hi=44).status == "info"
    assert Cell("t", "c", 40.0, float("nan"), 0.25).status == "OUTSIDE"


@pytest.mark.slow
def test_validate_fails_when_a_mechanism_is_broken(tmp_path):
    """Copy the project, break the Strata calibration (a tenfold fixed cost per layer), and validate must exit 1."""
    import shutil

    for part in ("scenarios", "calibration"):
        shutil.copytree(f"{ROOT}/{part}", tmp_path / part)
    from sim.config.yaml_io import dump_yaml, parse_yaml

    cal = tmp_path / "calibration" / "strata_moe.yaml"
    data = parse_yaml(cal.read_text())
    data["parameters"]["machines.strata_box.engine.step.layer_s"] *= 10
    cal.write_text(dump_yaml(data))
    r = CliRunner().invoke(main, ["validate", "--root", str(tmp_path), "--only", "concurrency"])
    assert r.exit_code == 1 and "OUTSIDE" in r.output
