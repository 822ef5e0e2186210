"""Machine-independent numerics: numpy's baseline kernels on every CPU.

numpy picks its vectorised loops at import from the CPU it finds (AVX2, AVX-512, ...). Its AVX-512 ``exp``, ``log``,
``power`` and friends round differently from the scalar loops in the last bit (probed: 5% of float64 ``exp`` results
differ), and a discrete-event run turns a last-bit change into a different trajectory: on one and the same scenario
and seed, the README's what-if printed +85.6% on one CI machine and +85.7% on another, and an expert-cache hit rate
moved by 0.1 point. So the ``sim`` command (``sim.__main__``) and the test configuration ask numpy, before numpy is
imported, to keep to its baseline loops (``NPY_ENABLE_CPU_FEATURES`` set to no dispatched feature) and its BLAS to one
thread. ``import sim`` changes nothing: a library must not change how numpy computes for the rest of a process. A
script or notebook gets the same bits as the command by calling :func:`reproducible_numerics` before numpy is first
imported, or by starting Python with ``NPY_ENABLE_CPU_FEATURES=' '``. A user who sets either of numpy's variables
keeps their own choice; a process that imported numpy first keeps what it has, and :func:`numpy_dispatch` says so.
"""

from __future__ import annotations

import os
import sys

ENV_ENABLE = "NPY_ENABLE_CPU_FEATURES"
ENV_DISABLE = "NPY_DISABLE_CPU_FEATURES"
BASELINE_ONLY = " "  # a blank list: no dispatched feature enabled (numpy >= 1.25; an empty value would mean unset)


def request_baseline_kernels() -> bool:
    """Ask numpy for its baseline loops if it is not imported yet and the user chose nothing; True when asked."""
    if "numpy" in sys.modules or ENV_ENABLE in os.environ or ENV_DISABLE in os.environ:
        return False
    os.environ[ENV_ENABLE] = BASELINE_ONLY
    return True


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def request_single_thread_blas() -> bool:
    """Ask the BLAS library numpy and scipy load for one thread, if numpy is not imported yet and the user set none
    of its thread variables; True when asked. The simulator's matrices are small (a fit's Jacobian is a few hundred
    rows by tens of columns): a threaded BLAS makes them slower, 25x on a shared 2-core machine (a 520 x 60 SVD,
    50 ms against 2 ms), and sums them in an order that depends on the core count."""
    if "numpy" in sys.modules or any(v in os.environ for v in BLAS_THREADS):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


def reproducible_numerics() -> bool:
    """The same bits as the ``sim`` command on every CPU: numpy's baseline loops and one BLAS thread, asked for before
    numpy is imported. True when numpy will use its baseline loops because of this call; False when numpy was
    imported already or the user chose numpy's CPU features themselves (then nothing is changed)."""
    asked = request_baseline_kernels()
    request_single_thread_blas()
    return asked


def numpy_dispatch() -> tuple[str, ...]:
    """The CPU features numpy's dispatched loops use in this process (empty: baseline loops only, as sim asks)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return tuple(f for f in __cpu_dispatch__ if __cpu_features__.get(f))
