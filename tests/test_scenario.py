"""Scenario files: --set semantics (property tests), validation messages, calibration overlays, atomic output."""

import os

import pytest
import yaml
from conftest import HOME_LAB, tiny_scenario
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import ScenarioError
from sim.output import atomic_write_text
from sim.scenario import load_scenario, parse_set, set_dotted, validate

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
    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
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
    with pytest.raises(ScenarioError, match="no 'gpus'"):
        validate(raw, "f.yaml")


def test_calibration_overlay_fills_the_scenario():
    scn, resolved = load_scenario(HOME_LAB)
    assert scn.disks["rtx4090_box_disk"].read_gbps == pytest.approx(3.046, rel=1e-3)
    assert "read_gbps" not in yaml.safe_load(open(HOME_LAB))["disks"]["rtx4090_box_disk"]
    # --set wins over the calibration
    scn, _ = load_scenario(HOME_LAB, ["disks.rtx4090_box_disk.read_gbps=7"])
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
