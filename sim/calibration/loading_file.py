"""The calibration YAML a fit writes: parameters by dotted path, with provenance, errors and residuals."""

from __future__ import annotations

import os

from sim.calibration.fit_loading import FitResult
from sim.config.yaml_io import dump_yaml
from sim.formats.measured_tables import read_provenance


def calibration_yaml(result: FitResult, scenario: str, tables: list[str], out_file: str | None) -> str:
    here = os.path.dirname(os.path.abspath(out_file)) if out_file else os.getcwd()
    rel = [os.path.relpath(os.path.abspath(t), here) for t in tables]
    header = ["# Load-stage calibration written by `sim fit-loading`; do not edit by hand.",
              "# Reproduce from the project root with:",
              f"#   sim fit-loading {scenario} " + " ".join(f"--table {t}" for t in tables)
              + (f" --out {out_file}" if out_file else ""),
              "# Measurements used (provenance as in each table's header):"]
    for t in tables:
        prov = read_provenance(t)
        header += [f"#   {t}: {line}" for line in prov[:1]]
    header.append("# Parameters under exactly_determined are pinned by the data, no check left (no error estimate);")
    header.append("# pcie.efficiency is shared by all PCIe machines: over-determined by two or more measured links.")
    body = {
        "kind": "loading",
        "sources": rel,
        "parameters": result.parameters,
        "units": {p: ("fraction" if p == "pcie.efficiency" else "GB/s" if p.endswith("gbps") else "s/GB")
                  for p in result.parameters},
        "standard_errors": result.standard_errors,
        "exactly_determined": result.exactly_determined,
        "held_fixed_by_scenario": result.held_fixed,
        "degrees_of_freedom": result.dof,
        "residuals": [{k: (v + 0.0 if isinstance(v, float) else v) for k, v in r.items() if k != "source"}
                      for r in result.residuals],  # + 0.0: no negative zeros
    }
    return "\n".join(header) + "\n" + dump_yaml(body)
