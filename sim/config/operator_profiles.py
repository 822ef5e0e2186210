"""The operator profiles shipped in ``calibration/`` (a source checkout): which cards and which model geometry each
was measured for, so a scenario built from catalog names uses the measured times where they exist; and a scenario's
``engine.iteration.operators`` read when its engine is set up, so the engine is handed the table, never its file."""

from __future__ import annotations

import os

from sim.core.errors import ScenarioError
from sim.formats.operator_profiles import OperatorTable, operator_table

# (file, catalog GPU ids, (layers, hidden, KiB of KV per token at 2 bytes a value))
PROFILES: tuple[tuple[str, tuple[str, ...], tuple[int, int, float]], ...] = (
    ("vidur_a100/llama3_8b_mlp_ops.csv", ("a100_80gb_sxm", "a100_80gb_pcie"), (32, 4096, 128.0)),
    ("vidur_a100/llama2_7b_tp1_mlp_ops.csv", ("a100_80gb_sxm", "a100_80gb_pcie"), (32, 4096, 512.0)),
    ("vidur_h100/llama2_7b_tp1_mlp_ops.csv", ("h100_sxm",), (32, 4096, 512.0)),
)
CALIBRATION = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "calibration")


def profile_for(gpu: str, layers: int, hidden: int, kv_kib_per_token: float, tensor_parallel: int = 1) -> str | None:
    """The shipped operator profile measured on catalog card ``gpu`` for a model of this geometry (16-bit weights)
    at this tensor-parallel degree, or None (none shipped, or not in this installation)."""
    for file, gpus, geometry in PROFILES:
        path = os.path.join(CALIBRATION, file)
        if gpu in gpus and geometry == (layers, hidden, kv_kib_per_token) and os.path.exists(path):
            try:
                operator_table(path, tensor_parallel)
            except ScenarioError:
                continue
            return path
    return None


def iteration_operators(path: str | None, tensor_parallel: int, key_path: str) -> OperatorTable | None:
    """The operator table a machine's ``engine.iteration.operators`` names (None: it names none), read once per
    process per file content; a bad table is a one-line error at ``key_path``."""
    return operator_table(path, tensor_parallel, key_path) if path is not None else None
