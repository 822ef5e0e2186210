"""The Python API: the docs show it in a python block (tests/test_docs_commands.py runs it); a scenario is
immutable, changed with --set semantics and validated at once; a run's tables are DataFrames that can be read again;
the same seed gives what `sim run` gives."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import HOME_LAB, ROOT
from docs_text import find_block

import sim
from sim.cli import main

GEN3 = os.path.join(ROOT, "scenarios", "gen3_5090.yaml")
FAST = {"serve.requests": 20}


def test_the_docs_show_the_api_in_a_python_block():
    """tests/test_docs_commands.py runs every python block of the docs; this one must be among them."""
    path, _, code = find_block("sim.load(", info="python")
    assert any(".run(" in line for line in code) and any(".set(" in line for line in code), path


def test_set_returns_a_new_validated_scenario_with_set_semantics():
    base = sim.load(GEN3, FAST)
    free = base.set("machines.strata_box.gpus.gpu0.reserved_gib", 0)
    assert base.get("machines.strata_box.gpus.gpu0.reserved_gib") > 17 and free.config is not base.config
    assert free.get("machines.strata_box.gpus.gpu0.reserved_gib") == 0
    same = [base.set({"machines.strata_box.engine.policy": "lru"}), base.set("machines.strata_box.engine.policy=lru"),
            base.set(["machines.strata_box.engine.policy=lru"])]
    assert {s.config.machines["strata_box"].engine.policy for s in same} == {"lru"}
    added = sim.load(HOME_LAB).set({"jobs.extra.model": "9B", "jobs.extra.tokens": 800})  # an entry of a named map
    assert added.get("jobs.extra.tokens") == 800 and "extra" in added.config.jobs
    assert base.get("machines.strata_box.engine.step.layer_s") == pytest.approx(7.30167e-05)  # its calibration's
    assert base.get("serve.fidelity") == "counts"  # a schema default
    step = base.get("machines.strata_box.engine.step")  # a section: every value, defaults and calibrations included
    assert step["layer_s"] == pytest.approx(7.30167e-05) and step["break_mode"] == "sticky"
    assert step["dense_s"] is None  # left to the card's specs
    assert base.get("gpus.rtx5090.hbm_gbps") == 1792  # from the catalog
    assert base.get("serve")["workload"]["kind"] == "sequential"
    step["layer_s"] = 1.0  # plain data: a copy
    assert base.config.machines["strata_box"].engine.step.layer_s == pytest.approx(7.30167e-05)
    with pytest.raises(KeyError):
        base.get("machines.strata_box.engine.no_such_key")
    pairs = sim.load(GEN3, [("serve.requests", 7), "serve.prompt_tokens=9"])  # (path, value) pairs and --set text
    assert (pairs.get("serve.requests"), pairs.get("serve.prompt_tokens")) == (7, 9)
    with pytest.raises(TypeError):
        sim.load(GEN3, [42])


def test_bad_values_raise_the_one_line_error_the_command_line_prints():
    with pytest.raises(sim.ScenarioError) as err:
        sim.load(GEN3).set("machines.strata_box.engine.parallel", 0)
    assert err.value.path == "machines.strata_box.engine.parallel" and "\n" not in str(err.value)
    cli = CliRunner().invoke(main, ["run", GEN3, "--set", "machines.strata_box.engine.parallel=0"])
    assert cli.exit_code == 2 and str(err.value).split(": ", 1)[1] in cli.output
    with pytest.raises(sim.ScenarioError, match="file not found"):
        sim.load("no/such/file.yaml")
    with pytest.raises(sim.SimulationError, match="does not fit"):
        sim.load(GEN3, {"machines.strata_box.gpus.gpu0.reserved_gib": 31.9}).run()
    with pytest.raises(TypeError):
        sim.load(GEN3).set("serve.requests")


def test_a_run_is_what_sim_run_prints_and_its_tables_can_be_read_again(tmp_path):
    run = sim.run(GEN3, seed=3, changes=FAST)
    cli = CliRunner().invoke(main, ["run", GEN3, "--json", "--seed", "3", "--set", "serve.requests=20", "--out",
                                    str(tmp_path)])
    assert json.loads(cli.output)["metrics"] == run.metrics
    assert run.summary["metrics"] == run.metrics and run.text.startswith("scenario gen3_5090 (seed 3)")
    first = run.requests
    first["ttft_s"] = 0.0  # a caller's change stays in its copy
    again = run.requests
    assert again is not first and (again["ttft_s"] > 0).all()
    csv = pd.read_csv(tmp_path / "requests.csv")
    assert list(again.columns) == list(csv.columns) and len(again) == 20
    pd.testing.assert_frame_equal(again, csv, check_dtype=False)
    assert set(run.tables()) == {"loads", "load_stages", "links", "jobs", "estimates", "requests", "spill_buckets"}
    assert run.table("spill_buckets").shape == (9, 5)
    with pytest.raises(KeyError, match="no table"):
        run.table("nothing")
    assert run.engine.expert_slots == sim.load(GEN3).engine().expert_slots and len(run.served) == 20


def test_lab_runs_have_jobs_and_no_requests():
    run = sim.load(HOME_LAB).run()
    assert list(run.jobs["id"]) == ["long_resident", "long_with_load", "short_with_load"]
    assert run.requests.empty and run.engine is None and sim.load(HOME_LAB).engine() is None
    assert list(run.table("requests").columns) == list(run.requests.columns) and "requests" not in run.tables()
    assert run.metrics["job.long_resident.tie"] == 0.0
