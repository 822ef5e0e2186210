"""Scenario files: --set semantics (property tests), validation messages, calibration overlays, atomic output."""

import os

import pytest
from conftest import HOME_LAB, tiny_scenario
from hypothesis import given
from hypothesis import strategies as st

import sim
from sim import ScenarioError
from sim.config.load import validate
from sim.config.paths import parse_set, set_dotted
from sim.config.yaml_io import dump_yaml, read_yaml
from sim.core.output import atomic_write_text

keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8).filter(
    lambda k: not k.isdigit())
values = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=32),
                   st.booleans(), st.text(alphabet="abcxyz", min_size=1, max_size=5))


@given(st.lists(keys, min_size=1, max_size=5), values)
def test_set_dotted_then_read_back(path, value):
    data: dict = {}
    node = data
    for k in path[:-1]:
        node = node.setdefault(k, {})
    set_dotted(data, ".".join(path), value, "t")
    node = data
    for k in path:
        node = node[k]
    assert node == value


@given(values)
def test_parse_set_reads_yaml_scalars(value):
    text = dump_yaml(value).strip().removesuffix("...").strip()
    path, parsed = parse_set(f"a.b={text}")
    assert path == "a.b"
    assert parsed == value or (isinstance(value, float) and parsed == pytest.approx(value))


@given(st.floats(min_value=0.01, max_value=1e3, allow_nan=False), st.sampled_from([1, 2, 3, 4, 5, 6]))
def test_valid_numeric_overrides_validate(gbps, gen):
    raw = tiny_scenario()
    set_dotted(raw, "disks.d.read_gbps", gbps, "t")
    set_dotted(raw, "machines.box.gpus.g0.slot_gen", gen, "t")
    scn = validate(raw, "t")
    assert scn.disks["d"].read_gbps == gbps


@given(st.one_of(st.floats(max_value=0, allow_nan=False), st.sampled_from([float("inf"), float("nan"), "INF"]),
                 st.text(alphabet="abcxyz -", max_size=3), st.none(), st.lists(st.integers(), max_size=2)))
def test_invalid_bandwidth_names_the_key(bad):
    raw = tiny_scenario()
    set_dotted(raw, "disks.d.read_gbps", bad, "t")
    with pytest.raises(ScenarioError) as err:
        validate(raw, "file.yaml")
    assert err.value.path == "disks.d.read_gbps"
    assert "\n" not in str(err.value) and str(err.value).startswith("file.yaml: disks.d.read_gbps:")


def test_set_into_a_list_and_a_new_map_entry():
    raw = tiny_scenario()
    raw["dispatch"] = {"tie_break": {"rule": "prefer", "order": ["box"]}}
    set_dotted(raw, "dispatch.tie_break.order.0", "box", "t")
    set_dotted(raw, "jobs.new.model", "m8", "t")
    set_dotted(raw, "jobs.new.tokens", 5, "t")
    assert validate(raw, "t").jobs["new"].tokens == 5
    with pytest.raises(ScenarioError, match="not an index"):
        set_dotted(raw, "dispatch.tie_break.order.5", "box", "t")
    with pytest.raises(ScenarioError, match="not a map"):
        set_dotted(raw, "disks.d.read_gbps.x", 1, "t")


def test_cross_reference_errors_name_the_key():
    raw = tiny_scenario()
    raw["machines"]["box"]["disk"] = "dd"
    with pytest.raises(ScenarioError) as err:
        validate(raw, "f.yaml")
    assert err.value.path == "machines.box.disk" and "did you mean 'd'" in str(err.value)


def test_unified_machine_rules():
    raw = tiny_scenario()
    raw["machines"]["box"]["kind"] = "unified"
    with pytest.raises(ScenarioError, match="machines.box.kind.*a card behind PCIe"):
        validate(raw, "f.yaml")
    raw["machines"]["box"]["gpus"] = {}
    with pytest.raises(ScenarioError, match="unified_memory_gib"):
        validate(raw, "f.yaml")


def test_calibration_overlay_fills_the_scenario():
    scn = sim.load(HOME_LAB).config
    assert scn.disks["rtx4090_box_disk"].read_gbps == pytest.approx(3.046, rel=1e-3)
    assert "read_gbps" not in read_yaml(HOME_LAB)["disks"]["rtx4090_box_disk"]
    # --set wins over the calibration
    scn = sim.load(HOME_LAB, ["disks.rtx4090_box_disk.read_gbps=7"]).config
    assert scn.disks["rtx4090_box_disk"].read_gbps == 7


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(str(target), "new" * 1000)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["summary.json"]


def write_scenario(tmp_path, edit=None, calibration=None):
    """A copy of home_lab.yaml in tmp_path (its calibration path made absolute), edited by ``edit(raw)``."""
    raw = read_yaml(HOME_LAB)
    raw["calibrations"] = [calibration or os.path.join(os.path.dirname(HOME_LAB), "..", "calibration", "loading.yaml")]
    if edit:
        edit(raw)
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml(raw))
    return str(path)


def test_scenario_values_win_over_calibration(tmp_path):
    path = write_scenario(tmp_path, lambda r: r["disks"]["rtx4090_box_disk"].update(read_gbps=7.0))
    scn = sim.load(path).config
    assert scn.disks["rtx4090_box_disk"].read_gbps == 7.0
    assert scn.disks["mining_box_disk"].read_gbps == pytest.approx(1.45, rel=1e-2)


def test_set_calibrations_applies_before_the_calibration_files():
    with pytest.raises(ScenarioError) as err:
        sim.load(HOME_LAB, ["calibrations=[]"])
    assert "read_gbps" in err.value.path and "calibration" in err.value.problem


def test_bad_calibration_value_blames_the_calibration_file(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("parameters:\n  pcie.efficiency: 1.5\n")
    path = write_scenario(tmp_path, calibration=str(cal))
    with pytest.raises(ScenarioError) as err:
        sim.load(path)
    assert err.value.source.endswith("cal.yaml") and err.value.path == "pcie.efficiency"


def test_calibration_for_a_missing_machine_is_an_error(tmp_path):
    def rename(raw):
        raw["machines"]["rtx4090"] = raw["machines"].pop("rtx4090_box")
        raw["dispatch"]["tie_break"]["order"] = ["rtx4090"]
        raw["jobs"]["long_resident"]["resident_on"] = ["rtx4090", "mining_box"]

    with pytest.raises(ScenarioError, match="no key 'rtx4090_box' under machines .did you mean 'rtx4090'"):
        sim.load(write_scenario(tmp_path, rename))


def test_duplicate_keys_are_rejected(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: a\nname: b\n")
    with pytest.raises(ScenarioError, match="appears twice"):
        sim.load(str(path))


def test_negotiated_link_cannot_exceed_card_or_slot():
    with pytest.raises(ScenarioError) as err:
        sim.load(HOME_LAB, ["machines.mining_box.gpus.card0.negotiated_gen=4"])
    assert err.value.path == "machines.mining_box.gpus.card0.negotiated_gen" and "--set" in err.value.source


def test_new_entries_by_set_and_typo_hints():
    scn = sim.load(HOME_LAB, ["machines.mining_box.gpus.card3.type=mining_card",
                                 "machines.mining_box.gpus.card3.slot_gen=3"]).config
    assert len(scn.machines["mining_box"].gpus) == 4
    with pytest.raises(ScenarioError) as err:
        sim.load(HOME_LAB, ["machines.rtx4090_bx.page_cache_gib=3"])
    assert "did you mean 'rtx4090_box'" in str(err.value) and "--set" in err.value.source


def test_numbers_are_read_as_text_where_text_is_expected():
    scn = sim.load(HOME_LAB, ["name=123"]).config
    assert scn.name == "123"


def test_schema_does_not_require_calibrated_values():
    from sim.config.load import json_schema

    defs = json_schema()["$defs"]
    assert "read_gbps" not in defs["Disk"].get("required", [])
    assert "s_per_gb" not in defs["Loader"].get("required", [])


@pytest.mark.parametrize("override, words", [
    ("jobs.long_with_load.tokens=true", "not the boolean"),
    ("machines.rtx4090_box.page_cache_gib=true", "not the boolean"),
    ("machines.rtx4090_box.page_cache_gib=yes", "bad value 'yes'"),  # YAML 1.2: yes is text
    ("models.v1.5.weights_gib=3", "no key '5'"),
    ("loading.chunk_mib=1.5", None),
    ("models.9B.weights_gib=30000", "at most 100,000 chunks"),
    ("disks.mac_ssd.latency_s=1e308", "less than or equal to 60"),
])
def test_more_bad_values(override, words):
    if words is None:
        sim.load(HOME_LAB, [override])
        return
    with pytest.raises(ScenarioError, match=words):
        sim.load(HOME_LAB, [override])


def test_names_with_dots_are_rejected(tmp_path):
    path = write_scenario(tmp_path, lambda r: r["models"].update({"v1.5": {"weights_gib": 3}}))
    with pytest.raises(ScenarioError, match="without dots") as err:
        sim.load(path)
    assert err.value.path == "models.v1.5"


def test_error_inside_the_scenario_is_not_blamed_on_the_calibration(tmp_path):
    path = write_scenario(tmp_path, lambda r: r["machines"]["rtx4090_box"].update(gpus={}))
    with pytest.raises(ScenarioError) as err:
        sim.load(path)
    assert err.value.source == path and err.value.path == "machines.rtx4090_box"


def test_unattributable_error_mentions_the_overrides():
    with pytest.raises(ScenarioError) as err:
        sim.load(HOME_LAB, ["models={}"])
    assert "--set models={}" in err.value.source


def test_resident_models_that_do_not_fit_together():
    s = sim.load(HOME_LAB, ["models.9C.weights_gib=20", "machines.rtx4090_box.resident_models=[9B, 9C]",
                            "dispatch.isolation=shared", "jobs.long_resident.resident_on=null"])
    with pytest.raises(sim.SimulationError, match="do not fit .* together"):
        s.run(seed=0)
