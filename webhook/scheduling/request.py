"""A pod read once for a decision: what it asks of the Mthreads cards, or why it cannot be placed.

The one place the pod-to-request step is written; the allocator, the extender and the
benchmarks all call `request_of`. The answers are kept per pod shape (pod_shape.py): a pod's
request, read once per workload, is what every decision of its replicas reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.cards import Fleet
from ..model.config import Config, MthreadsConfig
from ..model.pods import (
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
from .pod_shape import Shape, shape_of
from .resources import NO_DEVICES, Devices, Resources, device_requests, pod_requests


@dataclass(frozen=True)
class PodAsk:
    request: PodRequest | None  # None: no Mthreads cards (or devices disabled)
    need: CardNeed | None  # None: no card to choose
    invalid: str | None = None  # why the pod breaks an admission rule, the whole message
    device_requests: Devices = NO_DEVICES  # its requests of the three resources, against allocatable
    wants: Resources = Resources()  # cpu, memory and the rest, as kube-scheduler counts them


# The answers kept per pod shape (pod_shape.py), for one config and fleet: replicas ask the same,
# and reading a pod's request was a fifth of the extender's decision. An answer is kept while a
# pod that asked it (by uid) waits: `forget(uid)` when the cache sees the pod bound or gone, and
# the last pod's going drops it (issue 46, finding 6). Bounded too: past a limit a table starts
# over.
SHAPES_KEPT = 4096
CONFIGS_KEPT = 16
ASKERS_KEPT = 100_000


class _Kept:
    """The answers of one (MthreadsConfig, Fleet); it holds both, so their ids stay theirs."""

    __slots__ = ("mt", "fleet", "asks", "askers")

    def __init__(self, mt: MthreadsConfig, fleet: Fleet):
        self.mt, self.fleet = mt, fleet
        self.asks: dict[Shape, PodAsk] = {}
        self.askers: dict[Shape, set[str]] = {}  # the uids of the pods it answered


_KEPT: dict[tuple[int, int], _Kept] = {}
_ASKED: dict[str, tuple[_Kept, Shape]] = {}  # uid -> where its answer is kept


def request_of(pod: JsonObject, config: Config, fleet: Fleet | None = None) -> PodAsk:
    """What the pod asks. `fleet`: the card models of config.mthreads (made from it if None)."""
    mt = config.mthreads
    kept = _kept(mt, fleet)
    shape = shape_of(pod)
    uid = (pod.get("metadata") or {}).get("uid")
    if shape is None or not isinstance(uid, str) or not uid:  # nobody to forget it for
        return _read(pod, mt, kept.fleet)
    ask = kept.asks.get(shape)
    if ask is None:
        if len(kept.asks) >= SHAPES_KEPT or len(_ASKED) >= ASKERS_KEPT:
            _start_over()
        ask = kept.asks[shape] = _read(pod, mt, kept.fleet)
    before = _ASKED.get(uid)
    if before is None or before[0] is not kept or before[1] != shape:
        forget(uid)
        kept.askers.setdefault(shape, set()).add(uid)
        _ASKED[uid] = (kept, shape)
    return ask


def read_ask(pod: JsonObject, mt: MthreadsConfig) -> PodAsk:
    """What a pod this process does not decide asks (a nominated pod, nominated_fit.py), read
    from the Mthreads settings alone and not kept."""
    return _read(pod, mt, _kept(mt, None).fleet)


def forget(uid: str) -> None:
    """The pod no longer waits (bound or gone): its answer goes with the last pod it answered."""
    where = _ASKED.pop(uid, None)
    if where is None:
        return
    kept, shape = where
    askers = kept.askers.get(shape)
    if askers is not None:
        askers.discard(uid)
        if not askers:
            del kept.askers[shape]
            kept.asks.pop(shape, None)


def _start_over() -> None:
    for kept in _KEPT.values():
        kept.asks.clear()
        kept.askers.clear()
    _ASKED.clear()


def _kept(mt: MthreadsConfig, fleet: Fleet | None) -> _Kept:
    key = (id(mt), id(fleet))  # by identity: a config is one object for a process's life
    kept = _KEPT.get(key)
    if kept is None:
        if len(_KEPT) >= CONFIGS_KEPT:
            _start_over()
            _KEPT.clear()
        kept = _KEPT[key] = _Kept(mt, fleet or Fleet.of(mt.memory_per_card))
    return kept


def _read(pod: JsonObject, mt: MthreadsConfig, fleet: Fleet) -> PodAsk:
    names = resource_names(mt)
    items = containers(pod)  # walked once for both reads
    wants = pod_requests(pod)
    if not mt.enabled or not is_mthreads_pod(pod, names, items):
        return PodAsk(None, None, wants=wants)
    try:
        request = read_request(pod, mt, fleet, items)
    except InvalidRequest as e:
        return PodAsk(None, None, f"{reasons.INVALID_REQUEST}: the pod breaks admission rule "
                                  f"{e.rule}: {e.message}", wants=wants)
    if request.kind is Kind.NONE:
        return PodAsk(request, None, wants=wants)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return PodAsk(request, need_of(request, card_ids(ann.get(keys.USE_CARDS)),
                                   card_ids(ann.get(keys.NOUSE_CARDS))),
                  device_requests=device_requests(pod, names), wants=wants)
