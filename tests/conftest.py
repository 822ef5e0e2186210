from __future__ import annotations

import os
import sys

from sim.core.numerics import reproducible_numerics

# before any test module imports numpy: the sim command's numerics (numpy's baseline loops, one BLAS thread), which
# `import sim` leaves alone; tests/test_numerics.py fails if a plugin imported numpy first
reproducible_numerics()

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import sim  # noqa: E402

# CI runs the property tests with a fixed seed, so a run is reproducible; locally they explore freely.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME_LAB = os.path.join(ROOT, "scenarios", "home_lab.yaml")
CALIBRATION = os.path.join(ROOT, "calibration")

sys.path.insert(0, ROOT)


@pytest.fixture
def home_lab():
    return sim.load(HOME_LAB).config


def tiny_scenario(**over) -> dict:
    """A one-machine scenario with round numbers, for closed-form checks (as a raw mapping)."""
    raw = {
        "name": "tiny",
        "loading": {"composition": "serial", "chunk_mib": 1024, "buffer_chunks": 2},
        "disks": {"d": {"read_gbps": 2.0, "latency_s": 0.01}},
        "gpus": {"card": {"vram_gib": 48, "pcie_max_gen": 4, "pcie_max_lanes": 16}},
        "models": {"m8": {"weights_gib": 8, "tensors": 800}, "m16": {"weights_gib": 16}, "m4": {"weights_gib": 4}},
        "machines": {
            "box": {
                "disk": "d", "page_cache_gib": 20,
                "loader": {"s_per_gb": 0.1, "s_per_tensor": 0.001},
                "gpus": {"g0": {"type": "card", "slot_gen": 4, "slot_lanes": 16, "measured_link_gbps": 10.0}},
                "decode_tok_s": {"m8": 100.0, "m16": 50.0, "m4": 200.0},
            }
        },
    }
    for path, value in over.items():
        from sim.config.paths import set_dotted

        set_dotted(raw, path.replace("__", "."), value, "test")
    return raw
