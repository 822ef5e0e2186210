"""fit-loading: bad tables are one-line errors; fixed, shared and unmeasured parameters are handled honestly."""

import os

import pytest
from conftest import CALIBRATION, HOME_LAB

from sim import ScenarioError
from sim.calibration.fit_loading import fit, load_raw_for_fit
from sim.config.yaml_io import parse_yaml

STAGES = os.path.join(CALIBRATION, "loading_stages.csv")


def table(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("body, words", [
    ("machine,cold_gbps,hot_gbps\nrtx4090_box,0,4\n", "expected a bandwidth above 0"),
    ("machine,cold_gbps,hot_gbps\nrtx4090_box,inf,4\n", "expected a bandwidth above 0"),
    ("machine,cold_gbps,hot_gbps\nrtx4090_box,-1,4\n", "expected a bandwidth above 0"),
    ("machine,cold_gbps,hot_gbps\nrtx4090_box,nan,4\n", "expected a bandwidth above 0"),
    ("machine,cold_gbps,hot_gbps,file_gb\nrtx4090_box,1,4,0\n", "row 1.file_gb"),
    ("machine,cold_gbps,hot_gbps\nrtx4090_box,abc,4\n", "expected a bandwidth above 0"),
    ("machine,cold_gbps,hot_gbps,link_gbps\nmac,6,16,20\n", "no PCIe link"),
    ("machine,cold_gbps,hot_gbps\n", "at least one row"),
    ("cold_gbps,hot_gbps\n1,2\n", "missing ['machine']"),
    ("machine,cold_gbps,hot_gbps\nrtx4090_box,,\n", "no measured rates"),
    ("machine,cold_gbps,hot_gbps\nrtx4090_bx,1,2\n", "expected a machine"),
    ("machine,cold_gbps\nrtx4090_box,1\n", "missing ['hot_gbps']"),
])
def test_bad_tables(tmp_path, body, words):
    with pytest.raises(ScenarioError, match=words.replace("[", r"\[").replace("]", r"\]")):
        fit(load_raw_for_fit(HOME_LAB), HOME_LAB, [table(tmp_path, body)])


def test_too_few_observations(tmp_path):
    path = table(tmp_path, "machine,cold_gbps,hot_gbps\nrtx4090_box,1,\n")
    with pytest.raises(ScenarioError, match="cannot determine"):
        fit(load_raw_for_fit(HOME_LAB), HOME_LAB, [path])


def test_no_link_rows_fit_no_efficiency(tmp_path):
    path = table(tmp_path, "machine,cold_gbps,hot_gbps,file_gb\nmining_box,0.72,1.43,10.7\n")
    result = fit(load_raw_for_fit(HOME_LAB), HOME_LAB, [path])
    assert "pcie.efficiency" not in result.parameters and result.dof == 0


def test_values_set_in_the_scenario_are_held_fixed(tmp_path):
    raw = load_raw_for_fit(HOME_LAB)
    raw["disks"]["mining_box_disk"]["read_gbps"] = 5.0
    result = fit(raw, HOME_LAB, [STAGES])
    assert result.held_fixed == {"disks.mining_box_disk.read_gbps": 5.0}
    assert "disks.mining_box_disk.read_gbps" not in result.parameters
    assert result.dof == 2 and "machines.mining_box.loader.copy_gbps" in result.standard_errors


def test_a_shared_disk_is_one_parameter(tmp_path):
    raw = load_raw_for_fit(HOME_LAB)
    raw["machines"]["mining_box"]["disk"] = "rtx4090_box_disk"
    result = fit(raw, HOME_LAB, [STAGES])
    assert list(result.parameters).count("disks.rtx4090_box_disk.read_gbps") == 1
    assert result.dof == 6 - 4 and not result.exactly_determined


def test_pipelined_fit_matches_pipelined_simulation(tmp_path):
    """The fit models loads with the scenario's composition and buffers, so the simulation reproduces the table."""
    from sim.config.load import validate
    from sim.config.paths import set_dotted
    from sim.lab.probes import probe_machine

    raw = load_raw_for_fit(HOME_LAB)
    raw["loading"] = {"composition": "pipelined", "chunk_mib": 256, "buffer_chunks": 1}
    result = fit(raw, HOME_LAB, [STAGES])
    for key, value in result.parameters.items():
        set_dotted(raw, key, value, "t")
    set_dotted(raw, "disks.mac_ssd.read_gbps", 9.6, "t")  # the Mac is not in this table
    set_dotted(raw, "machines.mac.loader.copy_gbps", 16.8, "t")
    scn = validate(raw, "t")
    rep = probe_machine(scn, "mining_box", "9B", 10.7e9 / 2**30)
    assert rep.hot.gbps == pytest.approx(1.43, rel=0.02) and rep.link.link_gbps == pytest.approx(1.69, rel=0.02)


def test_calibration_yaml_round_trips(tmp_path):
    from sim.calibration.loading_file import calibration_yaml

    result = fit(load_raw_for_fit(HOME_LAB), HOME_LAB, [STAGES])
    text = calibration_yaml(result, HOME_LAB, [STAGES], str(tmp_path / "c.yaml"))
    body = parse_yaml(text)
    assert body["parameters"] == result.parameters and body["degrees_of_freedom"] == result.dof
