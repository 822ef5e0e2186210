"""``sim validate --public``: every domain of the fidelity benchmark run leave-one-source-out, and the report.

The domains are looked up by name; a domain whose module is not there (a part of the benchmark not built yet) is
named in the report as missing rather than silently left out.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from sim.fidelity.domain import Domain, Excluded
from sim.fidelity.loso import Result, run

# name -> (module, class, what it is given: the project root or its folder of public tables)
DOMAINS: dict[str, tuple[str, str, str]] = {
    "llama.cpp": ("sim.fidelity.llamacpp", "LlamaCppDomain", "root"),
    "loads": ("sim.fidelity.loads", "LoadsDomain", "public"),
    "routing": ("sim.fidelity.routing", "RoutingDomain", "public"),
    "concurrency": ("sim.fidelity.concurrency", "ConcurrencyDomain", "public"),
}
HEADLINE = [("llama.cpp", "tg_tok_s"), ("llama.cpp", "pp_tok_s"), ("llama.cpp", "vram_gib"), ("loads", "load_s")]
DOMAIN_NAMES = {"llama.cpp": "llama.cpp", "loads": "load times", "routing": "expert cache and routing",
                "concurrency": "serving under load"}
NOTES = os.path.join("calibration", "fidelity_notes.yaml")


def domain(name: str, root: str) -> Domain | None:
    """The domain ``name`` for the project at ``root``, or None when its module is not part of this build."""
    module, cls, given = DOMAINS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError:
        return None
    return getattr(mod, cls)(root if given == "root" else os.path.join(root, "calibration", "public"))


def notes(root: str) -> dict[str, str]:
    """Explanations of rows by row id (calibration/fidelity_notes.yaml: ``rows: {ROW: why}``), if any."""
    from sim.config.yaml_io import read_yaml

    path = os.path.join(root, NOTES)
    if not os.path.exists(path):
        return {}
    return {str(k): str(v) for k, v in (read_yaml(path).get("rows") or {}).items()}


def benchmark(root: str, names: list[str] | None = None, workers: int = 1,
              only: Callable[[str], bool] | None = None
              ) -> tuple[list[tuple[str, list[Result], list[Excluded]]], list[str]]:
    """Each domain's leave-one-source-out results and excluded rows; and the domains not available."""
    out, missing = [], []
    for name in names or list(DOMAINS):
        d = domain(name, root)
        if d is None:
            missing.append(name)
            continue
        results, excluded = run(d, workers=workers, only=only)
        out.append((name, results, excluded))
    return out, missing
