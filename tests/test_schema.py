"""The JSON Schema of `sim schema`: every shipped scenario validates against it (read as YAML 1.2, as the loader and
editors read it), numbers a calibration file may supply are not required, typos and wrong types are rejected."""

from __future__ import annotations

import copy
import glob
import os

import jsonschema
import pytest
from conftest import ROOT

from sim.config.load import json_schema
from sim.config.yaml_io import read_yaml

SHIPPED = sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def messages(validator, data) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_every_shipped_scenario_validates(validator, path):
    assert messages(validator, read_yaml(path)) == []


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_a_typo_key_is_rejected(validator, path):
    data = read_yaml(path)
    machine = next(iter(data["machines"].values()))
    machine["page_cache_gb"] = 8  # for page_cache_gib
    data["sead"] = 1
    found = messages(validator, data)
    assert any("page_cache_gb" in m for m in found) and any("sead" in m for m in found)


def test_wrong_types_are_rejected(validator):
    data = read_yaml(os.path.join(ROOT, "scenarios", "home_lab.yaml"))
    for bad in ({"seed": "zero"}, {"pcie": {"efficiency": "high"}}, {"models": {"9B": {"weights_gib": [20]}}},
                {"machines": {"mac": {"kind": "laptop", "unified_memory_gib": 32}}}, {"name": None}):
        changed = copy.deepcopy(data)
        changed.update(bad)
        assert messages(validator, changed), bad


def test_numbers_are_never_required_but_names_are():
    schema = json_schema()
    defs = schema["$defs"]
    assert "token_s" not in defs["Prefill"].get("required", [])
    assert "expert_s" not in defs["PeerTier"].get("required", [])
    assert "weights_gib" not in defs["ModelSpec"].get("required", [])
    # an engine's GPU may be left out: llama.cpp then runs on the machine's first card, or on a CPU-only machine
    assert defs["Engine"]["required"] == ["model"] and defs["Gpu"]["required"] == ["type"]
    assert schema["required"] == ["name", "models", "machines"]


def test_a_missing_name_is_still_reported(validator):
    data = read_yaml(os.path.join(ROOT, "scenarios", "home_lab.yaml"))
    del data["machines"]["mining_box"]["gpus"]["card0"]["type"]
    assert any("'type' is a required property" in m for m in messages(validator, data))
