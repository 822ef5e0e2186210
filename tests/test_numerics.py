"""Machine-independent numerics: the sim command keeps numpy to its baseline loops, whatever CPU the run lands on;
`import sim` changes nothing in the process, and an API user asks for the same with sim.reproducible_numerics()."""

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
    """The suite's expected values hold on any CPU only if numpy was imported after the test configuration asked
    (tests/conftest.py); a plugin importing numpy earlier would fail here, not as a 4th-digit mismatch elsewhere."""
    assert numpy_dispatch() == ()


def test_import_sim_changes_nothing_in_the_process():
    """A library must not change how numpy computes for a notebook that imports it: no variable set, numpy's own
    loops, and the names of the API still there."""
    default = _child(PROBE)  # numpy alone: whatever the CPU offers (empty on a CPU with no dispatched feature)
    assert default.endswith("None")
    assert _child("import sim, sim.api, sim.cli; " + PROBE) == default
    assert _child("import os, sim; sim.load; print(os.environ.get('NPY_ENABLE_CPU_FEATURES'), "
                  "os.environ.get('OPENBLAS_NUM_THREADS'))", OPENBLAS_NUM_THREADS="") == "None"


def test_reproducible_numerics_before_numpy_gives_the_commands_loops():
    code = "import sim; print(sim.reproducible_numerics()); " + PROBE
    assert _child(code) == "True\n() ' '"


def test_the_sim_command_runs_numpy_baseline_loops():
    """The console script and python -m sim both enter through sim.__main__.main, which asks before importing."""
    code = ("import sys, sim.__main__ as entry; sys.argv = ['sim', 'schema']; import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        entry.main()\n    except SystemExit:\n        pass\n" + PROBE.replace("; ", "\n"))
    assert _child(code) == "() ' '"


def test_a_choice_of_the_user_is_kept_and_numpy_imported_first_keeps_its_loops():
    code = "import sim; print(sim.reproducible_numerics()); " + PROBE
    chosen = _child(code, NPY_DISABLE_CPU_FEATURES="")
    assert chosen.startswith("False\n") and chosen.endswith(" None")
    default = _child(PROBE)
    assert _child("import numpy, sim; print(sim.reproducible_numerics()); " + PROBE) == "False\n" + default


def test_baseline_exp_is_the_scalar_libm_result():
    """What the baseline loops buy: numpy's exp over an array equals math.exp element by element (the AVX-512 loop
    differs in the last bit on about 5% of inputs)."""
    import math

    x = np.random.default_rng(1).uniform(-3, 3, 4096)
    assert np.array_equal(np.exp(x), np.array([math.exp(v) for v in x]))
