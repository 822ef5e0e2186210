"""Command line: ``sim run``, ``sim compare``, ``sim breakeven``, ``sim sweep``, ``sim plot``, ``sim calibrate``,
``sim validate``, ``sim fit-loading``, ``sim logs``, ``sim schema``. Thin: parse, call, print."""

from sim.cli import calibration, simulate, sweeps  # noqa: F401 - each registers its commands on main
from sim.cli.app import main

__all__ = ["main"]
