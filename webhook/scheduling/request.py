"""A pod read once for a decision: what it asks of the Mthreads cards, or why it cannot be placed.

The one place the pod-to-request step is written; the allocator, the extender and the
benchmarks all call `request_of`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import annotations as keys
from ..cards import Fleet
from ..config import Config
from ..json_types import JsonObject
from ..pods import (
    InvalidRequest,
    Kind,
    PodRequest,
    containers,
    is_mthreads_pod,
    read_request,
    resource_names,
)
from . import reasons
from .card_fit import CardNeed, card_ids, need_of
from .resources import NO_DEVICES, Devices, device_requests


@dataclass(frozen=True)
class PodAsk:
    request: PodRequest | None  # None: no Mthreads cards (or devices disabled)
    need: CardNeed | None  # None: no card to choose
    invalid: str | None = None  # why the pod breaks an admission rule, the whole message
    device_requests: Devices = NO_DEVICES  # its requests of the three resources, against allocatable


def request_of(pod: JsonObject, config: Config, fleet: Fleet | None = None) -> PodAsk:
    mt = config.mthreads
    names = resource_names(mt)
    items = containers(pod)  # walked once for both reads
    if not mt.enabled or not is_mthreads_pod(pod, names, items):
        return PodAsk(None, None)
    try:
        request = read_request(pod, mt, fleet or Fleet.of(mt.memory_per_card), items)
    except InvalidRequest as e:
        return PodAsk(None, None, f"{reasons.INVALID_REQUEST}: the pod breaks admission rule "
                                  f"{e.rule}: {e.message}")
    if request.kind is Kind.NONE:
        return PodAsk(request, None)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return PodAsk(request, need_of(request, card_ids(ann.get(keys.USE_CARDS)),
                                   card_ids(ann.get(keys.NOUSE_CARDS))),
                  device_requests=device_requests(pod, names))
