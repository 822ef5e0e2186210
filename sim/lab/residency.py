"""Which models are resident in a machine's memory targets (VRAM or unified memory), least recently used first."""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from sim.lab.loading import ChunkPlan
from sim.lab.resources import MemoryTarget


@dataclass
class Placement:
    placed: list[float]  # bytes per memory target
    spilled: float  # bytes left in host RAM


class Residency:
    """Resident models of one machine. Making a model resident unloads least-recently-used models until it fits."""

    def __init__(self, targets: list[MemoryTarget]):
        self.targets = targets
        self.models: OrderedDict[str, Placement] = OrderedDict()

    def copy(self) -> Residency:
        return copy.deepcopy(self)

    def __contains__(self, model: str) -> bool:
        return model in self.models

    def capacity_bytes(self) -> float:
        return sum(t.capacity_bytes for t in self.targets)

    def free_bytes(self) -> list[float]:
        used = np.zeros(len(self.targets))
        for p in self.models.values():
            used += p.placed
        return [t.capacity_bytes - u for t, u in zip(self.targets, used, strict=True)]

    def make_room(self, need: float) -> list[float]:
        """Unload least-recently-used models until ``need`` bytes fit (or none is left); free bytes per target."""
        free = self.free_bytes()
        for victim in list(self.models):
            if sum(free) >= need:
                break
            free = [f + b for f, b in zip(free, self.models.pop(victim).placed, strict=True)]
        return free

    def touch(self, model: str) -> None:
        self.models.move_to_end(model)

    def add(self, model: str, plan: ChunkPlan) -> None:
        self.models[model] = Placement(list(plan.placed_bytes), plan.spilled_bytes)

    def spilled_bytes(self, model: str) -> float:
        return self.models[model].spilled
