"""What a pod asks for (SPEC 1 and 3, rules 1 to 7 and 11), as plain data.

Both the webhook (to admit and patch) and the allocator (to place) read a pod
through `read_request`, so the two can never disagree about what a pod wants.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

from ..base.json_types import JsonObject
from ..base.shown import shown
from . import annotations as keys
from .cards import CORES_PER_CARD, CardModel, Fleet
from .config import MAX_QUANTITY, MthreadsConfig

VENDOR_WHOLE_GPU = "mthreads.com/gpu"  # the vendor plugin's own whole-card resource
# A pod's cards are on one node, and no node holds more: this bounds the patch and the
# annotation the webhook writes (one entry per card) however large a count a user types.
MAX_CARDS_PER_POD = 64
_PLAIN_INTEGER = re.compile(r"[1-9][0-9]{0,9}")


class Rule(IntEnum):
    """The admission rules by name, numbered as SPEC 3 and docs/rules.md number them (a
    denial's message and the rule metric's label carry the number)."""

    QUANTITY = 1  # a count, memory or core value that is not a plain positive integer
    MEMORY_VALUE = 2  # a slice's memory outside the valid values of the configured models
    CORE_VALUE = 3  # a slice's cores outside 1..16
    ONE_CARD_SLICE = 4  # memory or cores without a count, or with more than one card
    CORES_WITHOUT_MEMORY = 5
    VENDOR_GPU_MIX = 6  # mthreads.com/gpu beside this project's resources
    ONE_SHARED_CARD = 7  # the slices of a pod must fit one card of one model
    HOST_REACH = 8  # privileged, SYS_ADMIN or a hostPath reaching every card of the node
    PRESET_NODE = 9  # an Mthreads pod created with spec.nodeName set
    ALLOCATION_WRITERS = 10  # allocation annotations written by anyone but the allocator
    CARD_MODEL = 11  # mthreads.com/card-model naming no configured model
    OPT_OUT = 12  # the opt-out label on an Mthreads pod
    POLICY_ANNOTATIONS = 13  # a scheduling policy or card id the allocator does not know


class InvalidRequest(Exception):
    """A pod the rules refuse, and the rule it breaks."""

    def __init__(self, rule: Rule, message: str):
        super().__init__(message)
        self.rule = rule
        self.message = message


class Kind(str, Enum):
    NONE = "none"
    WHOLE = "whole"
    SLICE = "slice"


@dataclass(frozen=True)
class ContainerAsk:
    """What one container asks for. `memory` and `cores` are per card.

    A whole-card ask that only gave a count has memory None until the
    webhook writes the card's capacity into it.
    """

    name: str
    init: bool
    index: int  # position in spec.containers or spec.initContainers, for patch paths
    kind: Kind
    cards: int = 0
    memory: int | None = None
    cores: int | None = None
    vendor_card: bool = False  # asks for nothing of ours but for the vendor plugin's whole card

    @property
    def slice_memory(self) -> int:
        """A slice's memory: read_container never makes a slice without it."""
        assert self.memory is not None, f"slice of {self.name!r} without memory"
        return self.memory


@dataclass(frozen=True)
class PodRequest:
    asks: tuple[ContainerAsk, ...]  # init containers first, as in the annotations
    model: str | None  # the mthreads.com/card-model the pod names
    models: tuple[CardModel, ...]  # the models whose cards can serve the pod
    # Derived from `asks` once, when built: they are read several times per review, and a
    # cached_property's first read (behind a lock) cost more than working them out.
    kind: Kind = field(init=False, repr=False, compare=False)
    cards: int = field(init=False, repr=False, compare=False)  # one for slices (they share it)
    slices: tuple[ContainerAsk, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slices, cards, whole = [], 0, False
        for a in self.asks:
            if a.kind is Kind.SLICE:
                slices.append(a)
            elif a.kind is Kind.WHOLE:
                whole = True
            cards += a.cards
        kind = Kind.SLICE if slices else Kind.WHOLE if whole else Kind.NONE
        object.__setattr__(self, "kind", kind)  # frozen: the dataclass way to set a field
        object.__setattr__(self, "cards", 1 if slices else cards)
        object.__setattr__(self, "slices", tuple(slices))


def containers(pod: JsonObject) -> list[tuple[bool, int, JsonObject]]:
    """(is_init, index, container) for every container, init containers first.

    A list, so that one admission walks the pod once and hands it on (`items=`)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return []
    out = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        items = spec.get(key)
        if isinstance(items, list):
            out += [(init, i, c) for i, c in enumerate(items) if isinstance(c, dict)]
    return out


def container_name(c: JsonObject) -> str:
    name = c.get("name")
    return name if isinstance(name, str) else "?"


def _resource_maps(c: JsonObject) -> tuple[JsonObject, JsonObject]:
    res = c.get("resources")
    if not isinstance(res, dict):
        return {}, {}
    limits, requests = res.get("limits"), res.get("requests")
    return (limits if isinstance(limits, dict) else {}), (requests if isinstance(requests, dict) else {})


def _raw(limits: JsonObject, requests: JsonObject, resource: str) -> Any:
    """The value of a resource from limits, else requests, else None."""
    return limits[resource] if resource in limits else requests.get(resource)


def parse_quantity(raw: Any) -> int | None:
    """A plain positive integer no larger than 2^31-1, or None if it is anything else."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 0 < raw <= MAX_QUANTITY else None
    if isinstance(raw, str) and _PLAIN_INTEGER.fullmatch(raw):
        value = int(raw)
        return value if value <= MAX_QUANTITY else None
    return None


def _display(raw: Any) -> str:
    """A value as a message shows it: 32, "16Gi", 1.5 (a long one cut short: shown.py)."""
    return shown(raw, json.dumps) if isinstance(raw, (str, int, float, bool)) or raw is None \
        else type(raw).__name__


def resource_names(mt: MthreadsConfig) -> tuple[str, str, str]:
    return mt.count_resource, mt.memory_resource, mt.core_resource


def is_mthreads_pod(pod: JsonObject, names: tuple[str, str, str],
                    items: list[tuple[bool, int, JsonObject]] | None = None) -> bool:
    """Does any container name the count, memory or core resource? (the hot path)

    Only looks the names up in each container's limits and requests, nothing parsed:
    every review of a plain pod asks this and stops here. `items`: containers(pod)."""
    for _, _, c in containers(pod) if items is None else items:
        limits, requests = _resource_maps(c)
        for r in names:
            if r in limits or r in requests:
                return True
    return False


def card_model(pod: JsonObject, fleet: Fleet) -> str | None:
    """The model a pod names, checked against the fleet (rule 11)."""
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(ann, dict) or keys.CARD_MODEL not in ann:
        return None
    model = ann[keys.CARD_MODEL]
    if not isinstance(model, str) or model not in fleet.by_name:
        raise InvalidRequest(Rule.CARD_MODEL, f"annotation {keys.CARD_MODEL}={model!r} names no configured card "
                                 f"model; configured: {', '.join(fleet.by_name)}")
    return model


def read_container(init: bool, index: int, c: JsonObject, mt: MthreadsConfig,
                   capacities: tuple[int, ...]) -> ContainerAsk:
    """Classify one container (rules 1, 4, 5 and 6).

    `capacities` are the units per card of the models the pod may use; they
    tell the whole-card form the webhook writes from a slice of a full card.
    """
    name = container_name(c)
    count_r, mem_r, core_r = resource_names(mt)
    limits, requests = _resource_maps(c)  # once: each value below is read from them
    count = _quantity(name, count_r, limits, requests)
    memory = _quantity(name, mem_r, limits, requests)
    cores = _quantity(name, core_r, limits, requests)
    vendor_card = _raw(limits, requests, VENDOR_WHOLE_GPU) is not None
    if count is None and memory is None and cores is None:
        return ContainerAsk(name, init, index, Kind.NONE, vendor_card=vendor_card)
    if vendor_card:
        raise InvalidRequest(Rule.VENDOR_GPU_MIX, f"{_who(name)}: {VENDOR_WHOLE_GPU} cannot be combined with "
                                f"{count_r}, {mem_r} or {core_r}")
    if count is not None and count > MAX_CARDS_PER_POD:
        raise InvalidRequest(Rule.ONE_CARD_SLICE, f"{_who(name)}: {count_r}={count} asks for more cards than one "
                                f"pod may hold (at most {MAX_CARDS_PER_POD}: a pod's cards are on "
                                f"one node)")
    if count is None:
        given = mem_r if memory is not None else core_r
        raise InvalidRequest(Rule.ONE_CARD_SLICE, f"{_who(name)}: {given} is set without {count_r}; "
                                f"set {count_r}: 1 to share one card")
    if memory is None and cores is None:
        return ContainerAsk(name, init, index, Kind.WHOLE, cards=count)
    whole_units = _whole_form_units(count, memory, cores, capacities)
    if whole_units is not None:
        return ContainerAsk(name, init, index, Kind.WHOLE, count, whole_units, CORES_PER_CARD)
    if count > 1:
        raise InvalidRequest(Rule.ONE_CARD_SLICE, f"{_who(name)}: {count_r}={count} with {mem_r} or {core_r} would "
                                f"share {count} cards; sharing over several cards is not supported "
                                f"(ask for {count_r}: 1, or for whole cards with {count_r} alone)")
    if memory is None:
        raise InvalidRequest(Rule.CORES_WITHOUT_MEMORY, f"{_who(name)}: {core_r}={cores} is set without {mem_r}; "
                                f"a shared card must bound its memory")
    return ContainerAsk(name, init, index, Kind.SLICE, 1, memory, cores)


def _who(name: str) -> str:
    """A container as messages name it; only built for a message."""
    return f"container {name!r}".replace("'", '"')


def _quantity(name: str, resource: str, limits: JsonObject, requests: JsonObject) -> int | None:
    """One resource's value, parsed (rule 1), from the container's maps already read."""
    raw = _raw(limits, requests, resource)
    if raw is None:
        return None
    value = parse_quantity(raw)
    if value is None:
        raise InvalidRequest(Rule.QUANTITY, f"{_who(name)}: {resource}={_display(raw)} is not valid; it must "
                                f"be a plain positive integer (at most {MAX_QUANTITY})")
    return value


def _whole_form_units(count: int, memory: int | None, cores: int | None,
                      capacities: tuple[int, ...]) -> int | None:
    """The capacity C when memory = count x C and cores = 16 x count, else None."""
    if memory is None or cores != CORES_PER_CARD * count or memory % count:
        return None
    per_card = memory // count
    return per_card if per_card in capacities else None


def read_request(pod: JsonObject, mt: MthreadsConfig, fleet: Fleet,
                 items: list[tuple[bool, int, JsonObject]] | None = None) -> PodRequest:
    """Everything the pod asks for, checked against the fleet (rules 1 to 7 and 11).

    `items`: containers(pod), when the caller has walked the pod already."""
    model = card_model(pod, fleet)
    allowed = fleet.models_for(model)
    capacities = tuple(m.units for m in allowed)
    asks = tuple(read_container(init, i, c, mt, capacities)
                 for init, i, c in (containers(pod) if items is None else items))
    request = PodRequest(asks, model, allowed)
    if request.kind is Kind.SLICE:
        _no_vendor_card_beside_a_slice(request)
        return PodRequest(asks, model, _slice_models(request, mt, fleet, allowed))
    if request.kind is Kind.WHOLE:
        return PodRequest(asks, model, (_whole_model(request, fleet, allowed),))
    return request


def _no_vendor_card_beside_a_slice(request: PodRequest) -> None:
    """Rule 6 across containers: a vendor whole card and a shared slice are two Mthreads
    devices in one pod with sharing, which the vendor's document rules out."""
    for a in request.asks:
        if a.vendor_card:
            raise InvalidRequest(Rule.VENDOR_GPU_MIX, f"{_who(a.name)}: {VENDOR_WHOLE_GPU} (a whole card "
                                    f"of the vendor's plugin) cannot be in the same pod as "
                                    f'{_who(request.slices[0].name)}\'s shared card; only one '
                                    f"Mthreads card can be shared in a pod, and alone")


def names_in_message(names: list[str], most: int = 3) -> str:
    """'"a", "b", "c" and 5 more': a denial names a few containers, not thousands."""
    shown = ", ".join(f'"{n}"' for n in names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _slice_models(request: PodRequest, mt: MthreadsConfig, fleet: Fleet,
                  allowed: tuple[CardModel, ...]) -> tuple[CardModel, ...]:
    """Rules 2, 3 and 7: the models whose one card can hold every slice of the pod."""
    count_r, mem_r, core_r = resource_names(mt)
    # The values valid on any model the pod may use (`allowed` is fleet.models_for(model)).
    valid_any = fleet.by_name[request.model].valid if request.model else fleet.valid
    for a in request.asks:
        if a.kind is Kind.WHOLE:
            raise InvalidRequest(Rule.ONE_SHARED_CARD, f'container "{a.name}" asks for whole cards beside a shared '
                                    f"card in the same pod; only one Mthreads card can be shared "
                                    f"in a pod")
        if a.kind is not Kind.SLICE:
            continue
        if a.memory not in valid_any:
            raise InvalidRequest(Rule.MEMORY_VALUE, f'container "{a.name}": {mem_r}={a.memory} is not valid; '
                                    f"valid values are {fleet.valid_text(request.model)}")
        if a.cores is not None and not 1 <= a.cores <= CORES_PER_CARD:
            raise InvalidRequest(Rule.CORE_VALUE, f'container "{a.name}": {core_r}={a.cores} is not valid; '
                                    f"valid values are 1 to {CORES_PER_CARD} (core groups per "
                                    f"card)")
    slices = request.slices
    memory = sum(a.slice_memory for a in slices)
    cores = sum(a.cores or 0 for a in slices)
    fitting = tuple(m for m in allowed
                    if all(a.memory in m.valid for a in slices)
                    and memory <= m.units and cores <= CORES_PER_CARD)
    if not fitting:
        names = names_in_message([a.name for a in slices])
        cards = "; ".join(f"{m.name} has {m.units} units and {CORES_PER_CARD} core groups"
                          for m in allowed)
        raise InvalidRequest(Rule.ONE_SHARED_CARD, f"containers {names} share one card and together ask for "
                                f"{memory} units of {mem_r} and {cores} of {core_r}, more than "
                                f"one card of a model on which each value is valid holds ({cards}); "
                                f"only one Mthreads card can be shared in a pod")
    return fitting


def _whole_model(request: PodRequest, fleet: Fleet, allowed: tuple[CardModel, ...]) -> CardModel:
    """The one model all whole-card asks of the pod take (rule 7: one pod, one model)."""
    if request.cards > MAX_CARDS_PER_POD:
        raise InvalidRequest(Rule.ONE_CARD_SLICE, f"the containers ask for {request.cards} cards together, more than "
                                f"one pod may hold (at most {MAX_CARDS_PER_POD}: a pod's cards "
                                f"are on one node)")
    written = {a.memory for a in request.asks if a.kind is Kind.WHOLE and a.memory is not None}
    if len(written) > 1:
        raise InvalidRequest(Rule.ONE_SHARED_CARD, "the containers ask for whole cards of different models "
                                f"({', '.join(fleet.by_units[u].name for u in sorted(written))}); "
                                "the cards of one pod are on one node, of one model")
    if written:
        return fleet.by_units[written.pop()]
    return min(allowed, key=lambda m: m.units)
