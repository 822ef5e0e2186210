import pytest

from sim.core.units import GB, GIB, PCIE_LANE_COUNTS, pcie_paper_gbps


@pytest.mark.parametrize(
    "gen, per_lane",
    [(1, 0.25), (2, 0.5), (3, 0.9846), (4, 1.9692), (5, 3.9385), (6, 7.5625)],
)
def test_pcie_lane_rate_per_generation(gen, per_lane):
    assert pcie_paper_gbps(gen, 1) == pytest.approx(per_lane, rel=1e-3)


@pytest.mark.parametrize("gen", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("lanes", PCIE_LANE_COUNTS)
def test_pcie_scales_with_lanes(gen, lanes):
    assert pcie_paper_gbps(gen, lanes) == pytest.approx(lanes * pcie_paper_gbps(gen, 1))


def test_paper_figures_quoted_in_the_source():
    # calibration/pcie_links.csv: Gen4 x16 = 31.5 GB/s, Gen2 x4 = 2.0 GB/s paper figures
    assert pcie_paper_gbps(4, 16) == pytest.approx(31.5, rel=2e-3)
    assert pcie_paper_gbps(2, 4) == pytest.approx(2.0)
    # each generation doubles (Gen3 changed the encoding, Gen6 the FLIT overhead)
    assert pcie_paper_gbps(5, 16) == pytest.approx(2 * pcie_paper_gbps(4, 16))


@pytest.mark.parametrize("gen, lanes", [(0, 16), (7, 16), (4, 3), (4, 32)])
def test_pcie_rejects_unknown(gen, lanes):
    with pytest.raises(ValueError):
        pcie_paper_gbps(gen, lanes)


def test_units():
    assert GIB / GB == pytest.approx(1.073741824)
