"""Machine-independent numerics: sim keeps numpy to its baseline loops, whatever CPU the run lands on."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from sim.core.numerics import ENV_DISABLE, ENV_ENABLE, numpy_dispatch


def _child(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in (ENV_ENABLE, ENV_DISABLE)}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


PROBE = ("import numpy; from sim.core.numerics import numpy_dispatch; import os; "
         "print(repr(numpy_dispatch()), repr(os.environ.get('NPY_ENABLE_CPU_FEATURES')))")


def test_this_test_process_runs_numpy_baseline_loops():
    """The suite's expected values hold on any CPU only if numpy was imported after sim asked (conftest imports sim
    first); a plugin importing numpy earlier would fail here, not as a 4th-digit mismatch elsewhere."""
    assert numpy_dispatch() == ()


def test_import_sim_first_asks_numpy_for_its_baseline_loops():
    assert _child("import sim; " + PROBE) == "() ' '"


def test_a_choice_of_the_user_is_kept_and_numpy_imported_first_keeps_its_loops():
    assert _child("import sim; " + PROBE, NPY_DISABLE_CPU_FEATURES="").endswith("None")
    default = _child(PROBE)  # numpy alone: whatever the CPU offers (empty on a CPU with no dispatched feature)
    assert _child("import numpy, sim; " + PROBE) == default


def test_baseline_exp_is_the_scalar_libm_result():
    """What the baseline loops buy: numpy's exp over an array equals math.exp element by element (the AVX-512 loop
    differs in the last bit on about 5% of inputs)."""
    import math

    x = np.random.default_rng(1).uniform(-3, 3, 4096)
    assert np.array_equal(np.exp(x), np.array([math.exp(v) for v in x]))
