"""The command line contract: --json, --out, --set, --seed, errors with key paths and exit code 2."""

import json
import os

import pytest
from click.testing import CliRunner
from conftest import HOME_LAB

from sim.cli import main


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_run_json_contract():
    r = invoke("run", HOME_LAB, "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["scenario"] == "home_lab" and out["seed"] == 0
    m = out["metrics"]
    for machine in ("rtx4090_box", "mining_box"):
        for key in ("cold_gbps", "hot_gbps", "link_gbps", "disk_s_per_gb", "other_s_per_gb"):
            assert isinstance(m[f"load.{machine}.{key}"], float)
    assert "load.mac.link_gbps" not in m and m["load.mac.cold_gbps"] > m["load.rtx4090_box.cold_gbps"]
    assert all(isinstance(v, (int, float)) for v in m.values())
    jobs = {j["id"]: j for j in out["jobs"]}
    assert set(jobs) == {"long_resident", "long_with_load", "short_with_load"}
    for j in jobs.values():
        assert {"id", "machine", "tie", "estimates_s", "completed_s"} <= set(j)
    assert jobs["long_with_load"]["tie"] is True and jobs["long_with_load"]["machine"] == "rtx4090_box"


def test_breakeven_json_contract():
    r = invoke("breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_box", "--machine", "rtx4090_box", "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["breakeven_tokens"] < out["clear_win_tokens"]
    assert out["metrics"]["breakeven_tokens"] == out["breakeven_tokens"]
    assert out["clear_win"]["rtx4090_box"][0] == 0 and out["clear_win"]["mining_box"][1] is None


def test_breakeven_text_mentions_both_counts():
    r = invoke("breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_box", "--machine", "rtx4090_box")
    assert r.exit_code == 0 and "closed form" in r.stdout and "wins clearly" in r.stdout
    assert "20,389" in r.stdout and "from 98,240" in r.stdout and "below 10,288" in r.stdout


def test_same_seed_gives_byte_identical_json():
    a = invoke("run", HOME_LAB, "--json", "--seed", "7", "--set", "machines.mining_box.decode_jitter_cv=0.3")
    b = invoke("run", HOME_LAB, "--json", "--seed", "7", "--set", "machines.mining_box.decode_jitter_cv=0.3")
    c = invoke("run", HOME_LAB, "--json", "--seed", "8", "--set", "machines.mining_box.decode_jitter_cv=0.3")
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout


def test_out_writes_summary_and_tables(tmp_path):
    out = tmp_path / "run"
    r = invoke("run", HOME_LAB, "--out", str(out))
    assert r.exit_code == 0
    names = sorted(os.listdir(out))
    assert names == ["estimates.csv", "jobs.csv", "links.csv", "load_stages.csv", "loads.csv", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"] == json.loads(invoke("run", HOME_LAB, "--json").stdout)["metrics"]
    assert (out / "loads.csv").read_text().startswith("machine,model,gb,fits,cold_gbps")


def test_set_changes_nested_keys():
    base = json.loads(invoke("run", HOME_LAB, "--json").stdout)["metrics"]
    r = invoke("run", HOME_LAB, "--json", "--set", "disks.rtx4090_box_disk.read_gbps=6.0",
               "--set", "machines.rtx4090_box.gpus.gpu0.slot_gen=3", "--set", "dispatch.tie_threshold=0")
    m = json.loads(r.stdout)["metrics"]
    assert m["load.rtx4090_box.cold_gbps"] > base["load.rtx4090_box.cold_gbps"]
    assert m["link.rtx4090_box.gpu0.gen"] == 3
    assert m["link.rtx4090_box.gpu0.card_max_gen"] == 4
    assert m["jobs.ties"] == 0


@pytest.mark.parametrize(
    "override, path, words",
    [
        ("machines.rtx4090_box.gpus.gpu0.slot_gen=9", "machines.rtx4090_box.gpus.gpu0.slot_gen", "expected"),
        ("machines.rtx4090_box.pagecache_gib=3", "machines.rtx4090_box.pagecache_gib", "did you mean 'page_cache_gib'"),
        ("machines.rtx4090_bx.page_cache_gib=3", "machines.rtx4090_bx.page_cache_gib", "did you mean 'rtx4090_box'"),
        ("jobs.short_with_load.model=7B", "jobs.short_with_load.model", "expected a model"),
        ("jobs.short_with_load.tokens=-5", "jobs.short_with_load.tokens", "bad value -5"),
        ("loading.composition=parallel", "loading.composition", "'serial' or 'pipelined'"),
    ],
)
def test_bad_values_exit_2_with_key_path(override, path, words):
    r = CliRunner().invoke(main, ["run", HOME_LAB, "--set", override])
    assert r.exit_code == 2
    assert r.stdout == ""
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert path in line and words in line and "home_lab.yaml" in line


def test_bad_file_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmachines:\n  a: {disk: d, page_cache_gib: many}\n")
    r = CliRunner().invoke(main, ["run", str(bad)])
    assert r.exit_code == 2 and str(bad) in r.stderr
    bad.write_text("name: x\nmachines: [\n")
    r = CliRunner().invoke(main, ["run", str(bad)])
    assert r.exit_code == 2 and "YAML syntax error" in r.stderr
    r = CliRunner().invoke(main, ["run", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "file not found" in r.stderr


def test_schema_is_json_schema():
    r = invoke("schema")
    schema = json.loads(r.stdout)
    assert schema["type"] == "object" and "machines" in schema["properties"]


def test_fit_loading_writes_calibration(tmp_path):
    from conftest import CALIBRATION

    out = tmp_path / "loading.yaml"
    r = invoke("fit-loading", HOME_LAB, "--table", os.path.join(CALIBRATION, "loading_stages.csv"),
               "--table", os.path.join(CALIBRATION, "loading_mac_sample.csv"), "--out", str(out))
    assert r.exit_code == 0 and out.exists() and "pcie.efficiency" in out.read_text()


def test_unwritable_out_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = CliRunner().invoke(main, ["run", HOME_LAB, "--out", str(blocker / "sub")])
    assert r.exit_code == 2 and "cannot write" in r.stderr and "Traceback" not in r.stderr


def test_breakeven_bad_machine_exits_2():
    r = CliRunner().invoke(main, ["breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_bx",
                                  "--machine", "rtx4090_box"])
    assert r.exit_code == 2 and "did you mean 'mining_box'" in r.stderr and "--machine: no machine" in r.stderr


def test_outputs_have_ordinary_permissions(tmp_path):
    invoke("run", HOME_LAB, "--out", str(tmp_path / "o"))
    mode = os.stat(tmp_path / "o" / "summary.json").st_mode & 0o777
    assert mode & 0o044  # readable by group/others under the usual umask


def test_breakeven_out_writes_evaluations(tmp_path):
    r = invoke("breakeven", HOME_LAB, "--model", "9B", "--machine", "mining_box", "--machine", "rtx4090_box",
               "--out", str(tmp_path / "b"))
    assert r.exit_code == 0
    assert sorted(os.listdir(tmp_path / "b")) == ["evaluations.csv", "summary.json"]


@pytest.mark.parametrize("args, words", [
    (["run"], "Missing argument"),
    (["run", HOME_LAB, "--bogus"], "No such option"),
    (["run", HOME_LAB, "--seed", "-1"], "--seed"),
    (["run", HOME_LAB, "--out", HOME_LAB], "is a file"),
])
def test_usage_errors_are_one_line_exit_2(args, words):
    r = CliRunner().invoke(main, args, standalone_mode=True)
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert line.startswith("sim: error:") and "\n" not in line and words in line


def test_impossible_simulation_exits_1_naming_the_file():
    r = CliRunner().invoke(main, ["run", HOME_LAB, "--set", "gpus.rtx4090.vram_gib=1"])
    assert r.exit_code == 1
    assert r.stderr.startswith(f"sim: error: {HOME_LAB}: jobs.long_resident.resident_on:")


def test_internal_errors_are_one_line(monkeypatch):
    import sim.runner

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(sim.runner, "run", broken)
    monkeypatch.delenv("SIM_DEBUG", raising=False)
    r = CliRunner().invoke(main, ["run", HOME_LAB])
    assert r.exit_code == 70 and "internal error: RuntimeError: boom" in r.stderr and "Traceback" not in r.stderr


def test_fit_loading_warns_about_poor_fits(tmp_path):
    from sim.config.yaml_io import dump_yaml, read_yaml

    raw = read_yaml(HOME_LAB)
    raw["calibrations"] = []
    raw["machines"]["mining_box"]["disk"] = "rtx4090_box_disk"  # one disk for two machines that measured differently
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml(raw))
    from conftest import CALIBRATION

    r = CliRunner().invoke(main, ["fit-loading", str(path), "--table", os.path.join(CALIBRATION, "loading_stages.csv")])
    assert r.exit_code == 0 and "sim: warning: mining_box cold_gbps fits" in r.stderr
