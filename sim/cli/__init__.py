"""Command line: ``sim run``, ``sim compare``, ``sim breakeven``, ``sim sweep``, ``sim plot``, ``sim calibrate``,
``sim validate``, ``sim fit-loading``, ``sim fit-routing``, ``sim logs``, ``sim schema``, ``sim model``,
``sim catalog``, ``sim advise``, ``sim fit-offload``, ``sim llama``, ``sim capacity``, ``sim vllm``. Thin: parse, call,
print."""

from sim.cli import (  # noqa: F401 - each registers its commands on main
    calibration,
    capacity,
    catalog,
    llama_cmd,
    llamacpp,
    models,
    routing,
    serving_cmd,
    simulate,
    sweeps,
)
from sim.cli.app import main

__all__ = ["main"]
