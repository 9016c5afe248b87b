"""The cards of a node, read from its status.capacity (SPEC 4)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.json_types import JsonObject
from ..model.cards import CORES_PER_CARD, UNIT_MIB, CardModel
from ..model.config import MthreadsConfig
from ..model.pods import parse_quantity
from .node_annotations import CardSettings, card_settings


@dataclass(frozen=True)
class Card:
    id: str  # "<node>-mthreads-<index>"
    index: int
    model: CardModel
    # kept, not a property: every decision and every change of a node's room reads it per card
    memory_mib: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "memory_mib", self.model.units * UNIT_MIB)  # frozen


@dataclass(frozen=True)
class NodeCards:
    cards: tuple[Card, ...] = ()
    problem: str | None = None  # why a node that reports Mthreads capacity has no usable cards
    # the node's annotations: cordoned cards, the containers a card may hold
    settings: CardSettings = CardSettings()
    models: frozenset[int] = field(init=False, repr=False, compare=False)  # units per card

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", frozenset(c.model.units for c in self.cards))

    def takes_new(self, card: Card, containers: int) -> bool:
        """Whether a new share may go to the card at all: not cordoned, and holding fewer
        than the node's limit of containers."""
        return card.id not in self.settings.cordoned and containers < self.settings.max_instances


def card_id(node: str, index: int) -> str:
    return f"{node}-mthreads-{index}"


def node_cards(node: JsonObject, mt: MthreadsConfig) -> NodeCards:
    """cards = sgpu-core / 16, units per card = sgpu-memory / cards, model from the units;
    and what the node's annotations say of them."""
    cards, problem = _read_cards(node, mt)
    return NodeCards(cards, problem, card_settings(node, mt.max_instances_per_card))


def _read_cards(node: JsonObject, mt: MthreadsConfig) -> tuple[tuple[Card, ...], str | None]:
    name = (node.get("metadata") or {}).get("name", "")
    capacity = (node.get("status") or {}).get("capacity") or {}
    raw_cores, raw_memory = capacity.get(mt.core_resource), capacity.get(mt.memory_resource)
    if raw_cores is None and raw_memory is None:
        return (), None  # not an Mthreads node
    if raw_cores in ("0", 0) and raw_memory in ("0", 0, None):
        return (), None  # the device plugin reports no cards (e.g. while it restarts)
    cores, memory = parse_quantity(raw_cores), parse_quantity(raw_memory)
    if cores is None or memory is None:
        return (), (f"capacity {mt.core_resource}={raw_cores!r}, "
                    f"{mt.memory_resource}={raw_memory!r} are not both positive integers")
    if cores % CORES_PER_CARD:
        return (), f"{mt.core_resource}={cores} is not a multiple of {CORES_PER_CARD}"
    count = cores // CORES_PER_CARD
    if memory % count:
        return (), f"{mt.memory_resource}={memory} does not divide into {count} cards"
    units = memory // count
    if units < 2:
        return (), f"{units} units per card is less than the smallest slice (2)"
    model = CardModel.of(units)
    return tuple(Card(card_id(name, i), i, model) for i in range(count)), None
