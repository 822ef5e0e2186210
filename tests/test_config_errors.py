"""Every problem of a scenario at once (one line each, blamed on its own file or --set), YAML 1.2 read the same way
by the loader and by --set, and plausibility warnings that never stop a run."""

from __future__ import annotations

import copy
import glob
import os
import pickle

import pytest
from conftest import HOME_LAB, ROOT, tiny_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.config.load import load_scenario, validate
from sim.config.paths import parse_set
from sim.config.plausibility import plausibility_warnings
from sim.config.yaml_io import _yaml, dump_yaml, parse_scalar, parse_yaml, read_yaml
from sim.core.errors import ScenarioError, ScenarioErrors, combined, each_error

SHIPPED = sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")))


def moe_scenario() -> dict:
    """The tiny scenario with an MoE model."""
    raw = tiny_scenario()
    raw["models"]["m8"]["moe"] = {"layers": 4, "experts_per_layer": 8, "top_k": 2, "expert_mib": 16}
    return raw


def problems(raw: dict, source: str = "f.yaml") -> list[str]:
    with pytest.raises(ScenarioError) as err:
        validate(raw, source)
    return [str(e) for e in each_error(err.value)]


# --- every error at once ---------------------------------------------------------------------------------------

def test_a_typo_beside_its_missing_key_is_one_line():
    raw = moe_scenario()
    raw["models"]["m8"]["moe"]["topk"] = raw["models"]["m8"]["moe"].pop("top_k")
    assert problems(raw) == ["f.yaml: models.m8.moe.topk: unknown key; did you mean 'top_k'?"]


def test_the_typo_hint_prefers_the_missing_field():
    raw = moe_scenario()
    raw["models"]["m8"]["moe"]["layerz"] = raw["models"]["m8"]["moe"].pop("layers")
    assert problems(raw) == ["f.yaml: models.m8.moe.layerz: unknown key; did you mean 'layers'?"]


def test_the_typo_hint_is_the_closest_field_and_a_missing_one_stays_reported():
    """``slot_lane`` is ``slot_lanes``, not the missing ``slot_gen``: the hint names the closest field, and a missing
    field the hint does not name keeps its own line."""
    raw = moe_scenario()
    gpu = raw["machines"]["box"]["gpus"]["g0"]
    gpu.pop("slot_gen", None)
    gpu["slot_lane"] = gpu.pop("slot_lanes", 16)
    lines = problems(raw)
    assert lines == ["f.yaml: machines.box.gpus.g0.slot_gen: missing required key",
                     "f.yaml: machines.box.gpus.g0.slot_lane: unknown key; did you mean 'slot_lanes'?"]


def test_schema_problems_of_every_section_are_all_reported_in_file_order():
    raw = moe_scenario()
    raw["disks"]["d"]["read_gbps"] = "fast"
    raw["models"]["m8"]["moe"]["topk"] = raw["models"]["m8"]["moe"].pop("top_k")
    raw["machines"]["box"]["gpus"]["g0"]["slot_gen"] = 7
    raw["machines"]["box"]["page_cache_gib"] = -1
    lines = problems(raw)
    assert [line.split(": ")[1] for line in lines] == [
        "disks.d.read_gbps", "models.m8.moe.topk", "machines.box.page_cache_gib", "machines.box.gpus.g0.slot_gen"]
    assert "bad value 'fast'" in lines[0] and "bad value 7: expected 1, 2, 3, 4, 5 or 6" in lines[3]


def test_union_branches_make_one_line_without_their_names():
    raw = tiny_scenario()
    raw["models"]["m8"]["moe"] = {"layers": 4, "experts_per_layer": 8, "top_k": 2, "expert_mib": 16}
    raw["machines"]["box"]["engine"] = {"model": "m8", "gpu": "g0", "expert_cache": "lots"}
    assert problems(raw) == ["f.yaml: machines.box.engine.expert_cache: bad value 'lots': expected 'auto' or a valid "
                             "integer, unable to parse string as an integer"]


def test_cross_reference_problems_are_all_reported():
    raw = tiny_scenario()
    raw["machines"]["box"]["disk"] = "dd"
    raw["jobs"] = {"j": {"model": "m9", "tokens": 3}}
    raw["report"] = {"load_model": "m88"}
    lines = problems(raw)
    assert [line.split(": ")[1] for line in lines] == ["machines.box.disk", "jobs.j.model", "report.load_model"]
    assert "did you mean 'd'" in lines[0] and "did you mean 'm8'" in lines[2]


field_like = st.text(alphabet="qxz_", min_size=2, max_size=6).map(lambda k: "zz" + k)
places = st.sampled_from(["", "models.m8", "machines.box", "disks.d", "machines.box.gpus.g0", "loading"])


@settings(max_examples=40)
@given(st.lists(st.tuples(places, field_like), min_size=1, max_size=20, unique=True))
def test_any_number_of_unknown_keys_gives_as_many_lines_each_naming_its_key(bad):
    raw = tiny_scenario()
    for place, key in bad:
        node = raw
        for part in filter(None, place.split(".")):
            node = node[part]
        node[key] = 1
    lines = problems(raw)
    assert len(lines) == len(bad)
    expected = {f"f.yaml: {place + '.' if place else ''}{key}: unknown key" for place, key in bad}
    assert {line.split(";")[0] for line in lines} == expected
    assert all("\n" not in line for line in lines)


def test_many_problems_are_capped_with_a_count():
    raw = tiny_scenario()
    raw.update({f"zz{i}": i for i in range(27)})
    with pytest.raises(ScenarioErrors) as err:
        validate(raw, "f.yaml")
    assert len(err.value.errors) == 27
    lines = str(err.value).split("\n")
    assert len(lines) == ScenarioErrors.MAX_LINES + 1 and lines[-1] == "and 7 more problems"


def test_each_problem_is_blamed_on_its_own_source(tmp_path):
    path = tmp_path / "s.yaml"
    raw = read_yaml(HOME_LAB)
    raw["calibrations"] = [os.path.join(ROOT, "calibration", "loading.yaml")]
    raw["machines"]["rtx4090_box"]["page_cache_gib"] = -3
    path.write_text(dump_yaml(raw))
    with pytest.raises(ScenarioErrors) as err:
        sim.load(str(path), ["machines.mining_box.gpus.card0.negotiated_gen=4", "pcie.efficiency=2"])
    by_path = {e.path: e.source for e in err.value.errors}
    assert by_path["machines.rtx4090_box.page_cache_gib"].startswith(str(path) + " (with --set")
    assert by_path["pcie.efficiency"] == f"{path} (--set pcie.efficiency=2)"
    assert err.value.source == err.value.errors[0].source and err.value.path == err.value.errors[0].path


def test_a_single_problem_is_a_plain_scenario_error():
    raw = tiny_scenario()
    raw["disks"]["d"]["read_gbps"] = -1
    with pytest.raises(ScenarioError) as err:
        validate(raw, "f.yaml")
    assert type(err.value) is ScenarioError and err.value.lines() == [str(err.value)]


def test_errors_pickle_and_combine():
    a, b = ScenarioError("f", "x", "bad"), ScenarioError("f", "y", "worse")
    both = combined([a, b, ScenarioError("f", "x", "bad")])  # a repeated line is dropped
    assert isinstance(both, ScenarioErrors) and str(both) == "f: x: bad\nf: y: worse"
    assert (both.source, both.path, both.problem) == ("f", "x", "bad")
    again = pickle.loads(pickle.dumps(both))
    assert str(again) == str(both) and [e.path for e in again.errors] == ["x", "y"]
    assert str(pickle.loads(pickle.dumps(a))) == str(a)
    assert combined([a]) is a and each_error(combined([both, a])) == each_error(both)


# --- YAML 1.2 ----------------------------------------------------------------------------------------------------

YAML_12 = {"30e-6": 3e-05, "1e3": 1000.0, "yes": "yes", "on": "on", "017": 17, "0o17": 15, "1:30": "1:30",
           "true": True, "null": None, "~": None, ".inf": float("inf"), "[a, 1]": ["a", 1], "{x: 2}": {"x": 2}}


@pytest.mark.parametrize("text, value", YAML_12.items())
def test_files_and_set_values_read_yaml_1_2(text, value, tmp_path):
    assert parse_yaml(f"k: {text}\n") == {"k": value}
    assert _yaml(pure=True).load(f"k: {text}\n") == {"k": value}  # the C parser, if installed, reads the same
    assert parse_scalar(text) == value and parse_set(f"a.b={text}") == ("a.b", value)


def test_set_values_that_are_not_yaml_stay_text():
    assert parse_scalar("") == "" and parse_scalar("[1, 2") == "[1, 2" and parse_scalar("a: b: c") == "a: b: c"
    first = parse_scalar("[1, 2]")
    first.append(3)
    assert parse_scalar("[1, 2]") == [1, 2]  # each call its own copy


def test_a_set_exponent_without_a_dot_is_a_number():
    scn = sim.load(HOME_LAB, ["disks.mac_ssd.latency_s=30e-6"]).config
    assert scn.disks["mac_ssd"].latency_s == 3e-05


def plain(node) -> bool:
    if isinstance(node, dict):
        return type(node) is dict and all(plain(k) and plain(v) for k, v in node.items())
    if isinstance(node, list):
        return type(node) is list and all(plain(v) for v in node)
    return type(node) in (str, int, float, bool, type(None))


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_shipped_scenarios_read_as_plain_python(path):
    data = read_yaml(path)
    assert plain(data)
    assert read_yaml(path) == data and read_yaml(path) is not data  # the cache gives a copy per call


@pytest.mark.parametrize("text, words", [
    ("name: a\nmodels: {}\nname: b\n", "YAML syntax error: line 3 column 1: key 'name' appears twice in one map"),
    ("a:\n  b: 1\n  b: 2\n", "line 3 column 3: key 'b' appears twice"),
    ("name: a\nmodels: [\n", "YAML syntax error: line 3 column 1: "),
    ("a:\n\t- b\n", "YAML syntax error: line 2 column 1: "),
    ("a: 1\n---\nb: 2\n", "line 2 column 1: expected a single document in the stream but found another"),
])
def test_yaml_problems_are_one_line_with_a_place(text, words, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        read_yaml(str(path))
    assert words in str(err.value) and "\n" not in str(err.value) and err.value.source == str(path)


# --- plausibility --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_no_warning_on_a_shipped_scenario(path):
    assert plausibility_warnings(load_scenario(path)[0], path) == []


def test_an_acknowledged_warning_is_not_printed_and_needs_its_path():
    scn = load_scenario(HOME_LAB)[0]
    assert "machines.rtx4090_box.decode_tok_s.9B" in scn.acknowledged_warnings  # the catalog's bandwidth says so
    bare = load_scenario(HOME_LAB, ["acknowledged_warnings={}"])[0]
    assert [line.split(": ")[1] for line in plausibility_warnings(bare, HOME_LAB)] == [
        "machines.rtx4090_box.decode_tok_s.9B"]


def with_card(raw: dict, hbm_gbps: float = 1000.0) -> dict:
    raw["gpus"]["card"]["hbm_gbps"] = hbm_gbps
    return raw


def engine(raw: dict, **step) -> dict:
    raw["machines"]["box"]["engine"] = {"model": "m8", "gpu": "g0", "prefill_tok_s": 100.0, "overhead_gib": 2.0,
                                        "step": {"dense_s": 0.01, "gpu_expert_s": 1e-5, "cpu_expert_s": 1e-3,
                                                 "pcie_latency_s": 0, "graph_break_s": 0, **step}}
    return raw


def warned(raw: dict) -> list[tuple[str, str]]:
    return [tuple(w.split(": ", 2)[1:]) for w in plausibility_warnings(validate(raw, "f.yaml"), "f.yaml")]


CASES = {  # name -> (how to make the tiny scenario implausible, the key path warned about, words of the warning)
    "experts larger than the weights": (
        lambda r: r["models"]["m8"]["moe"].update(experts_per_layer=256), "models.m8.weights_gib", "larger: 4 layers"),
    "an expert larger than a layer": (
        lambda r: r["models"]["m8"]["moe"].update(expert_mib=4096), "models.m8.moe.expert_mib", "larger than a whole"),
    "weights of a dense model below a bit per parameter": (
        lambda r: r["models"]["m8"].update(dense={"params_b": 100, "layers": 32, "hidden": 4096,
                                                  "kv_kib_per_token": 512}), "models.m8.weights_gib", "bits per"),
    "KV above fp32 at full width": (
        lambda r: r["models"]["m8"].update(dense={"params_b": 4, "layers": 32, "hidden": 4096,
                                                  "kv_kib_per_token": 4096}), "models.m8.dense.kv_kib_per_token",
        "more than K and V"),
    "a decode rate above the roofline": (
        lambda r: with_card(r)["machines"]["box"]["decode_tok_s"].update(m16=100.0), "machines.box.decode_tok_s.m16",
        "above the memory roofline"),
    "a decode step faster than its weights can be read": (
        lambda r: engine(with_card(r), dense_s=1e-5, gpu_expert_s=0), "machines.box.engine.step.dense_s",
        "shorter than reading"),
    "a measured link above its paper rate": (
        lambda r: r["machines"]["box"]["gpus"]["g0"].update(measured_link_gbps=40.0),
        "machines.box.gpus.g0.measured_link_gbps", "PCIe Gen4 x16"),
    "prefill streaming above the link": (
        lambda r: engine(r)["machines"]["box"]["engine"].update(prefill={"token_s": 1e-4, "stream_gbps": 100.0}),
        "machines.box.engine.prefill.stream_gbps", "above the paper rate of GPU g0"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_plausibility_check_fires_on_its_case(name):
    make, path, words = CASES[name]
    raw = moe_scenario()
    assert warned(copy.deepcopy(raw)) == []  # the tiny scenario itself is plausible
    make(raw)
    found = warned(raw)
    assert [p for p, _ in found] == [path] and words in found[0][1], found


def test_a_plausible_roofline_does_not_warn():
    raw = with_card(moe_scenario())
    raw["machines"]["box"]["decode_tok_s"]["m16"] = 50.0  # 16 GiB at 1000 GB/s: at most 58 tok/s
    assert warned(engine(raw)) == []
