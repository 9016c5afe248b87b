"""Card models and their sgpu-memory whitelists (SPEC 1)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

CORES_PER_CARD = 16
UNIT_MIB = 512
VENDOR = "Mthreads"  # the device type in HAMi's annotation encoding

# Capacities (512 MiB units) of the models this project knows by name.
KNOWN_MODELS = {96: "MTT-S4000", 160: "MTT-S5000"}


def model_name(units: int) -> str:
    """The name of the model with this capacity; an unknown capacity gets a made-up one."""
    return KNOWN_MODELS.get(units, f"Mthreads-{units}")


def valid_memory_values(units: int) -> tuple[int, ...]:
    """Powers of two from 2 up to below the capacity, then the capacity itself."""
    values = []
    v = 2
    while v < units:
        values.append(v)
        v *= 2
    values.append(units)
    return tuple(values)


@dataclass(frozen=True)
class CardModel:
    name: str
    units: int
    valid: frozenset[int]

    @classmethod
    def of(cls, units: int) -> "CardModel":
        return cls(model_name(units), units, frozenset(valid_memory_values(units)))


@dataclass(frozen=True)
class Fleet:
    """The card models a cluster runs, as `devices.mthreads.memoryPerCard` lists them."""

    models: tuple[CardModel, ...]

    @classmethod
    def of(cls, memory_per_card: tuple[int, ...]) -> "Fleet":
        return cls(tuple(CardModel.of(u) for u in memory_per_card))

    @cached_property
    def by_name(self) -> dict[str, CardModel]:
        return {m.name: m for m in self.models}

    @cached_property
    def by_units(self) -> dict[int, CardModel]:
        return {m.units: m for m in self.models}

    @cached_property
    def smallest(self) -> CardModel:
        return min(self.models, key=lambda m: m.units)

    @cached_property
    def valid(self) -> frozenset[int]:
        return frozenset().union(*(m.valid for m in self.models))

    @cached_property
    def capacities_text(self) -> str:
        return "[" + ", ".join(str(m.units) for m in self.models) + "]"

    def models_for(self, model: str | None) -> tuple[CardModel, ...]:
        """The models a pod may use: the one it names, or all of them."""
        return (self.by_name[model],) if model else self.models

    def valid_text(self, model: str | None) -> str:
        """What a message lists as valid, for a pod that names a model or not."""
        if model:
            m = self.by_name[model]
            return f"{_join(sorted(m.valid))} ({m.name}, {m.units} units per card)"
        return f"{_join(sorted(self.valid))} (memoryPerCard {self.capacities_text})"


def _join(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)
