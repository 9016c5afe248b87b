"""What one bound pod holds: cpu/memory on its node and memory/cores on its cards.

Read from the pod alone (its `hami.io/mthreads-vgpu-devices-allocated` annotation), so
usage can be rebuilt from the cluster's pods at any time. A garbled annotation is never
under-counted: the cards it names (or, when it names none, every card of its node) are held whole.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Iterable

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.config import MthreadsConfig
from ..model.hami import Device, EncodingError, decode_kept
from ..model.pods import resource_names
from .one_copy import one_name
from .pod_facts import PodFacts, facts_of
from .resources import NO_DEVICES, Devices, Resources, device_requests, pod_requests

log = logging.getLogger(__name__)

_CARD_ID = re.compile(r"[A-Za-z0-9.\-]+-mthreads-[0-9]+")


@dataclass(frozen=True, slots=True)
class CardShare:
    card: str
    memory_mib: int
    cores: int
    whole: bool = False  # held exclusively: nothing else may share the card
    containers: int = 1  # the pod's containers holding a share of the card (each an instance)


@dataclass(frozen=True, slots=True)
class PodShare:
    uid: str
    node: str
    resources: Resources
    cards: tuple[CardShare, ...] = ()
    whole_node: bool = False  # garbled allocation naming no card: every card of the node is held
    # the Mthreads resources its containers request, as the kubelet sums them against allocatable
    device_requests: Devices = NO_DEVICES
    problem: str | None = None  # why the annotation could not be read, for the log
    pod: PodFacts | None = None  # what the rules of the pods after it read of it


def card_shares(devices: Iterable[Device]) -> tuple[CardShare, ...]:
    """What a pod's devices hold on each card: the memory and cores of every entry naming it,
    summed, and how many entries (one per container), one share a card, in the order the
    cards first appear."""
    merged: dict[str, list[int]] = {}
    for d in devices:
        m = merged.setdefault(d.card, [0, 0, 0])
        m[0] += d.memory_mib
        m[1] += d.cores
        m[2] += 1
    return tuple(CardShare(card, memory, cores, containers=n)
                 for card, (memory, cores, n) in merged.items())


def _meta(pod: JsonObject) -> JsonObject:
    return pod.get("metadata") or {}


_DEFAULT_NAMES = resource_names(MthreadsConfig())


def share_of(pod: JsonObject, names: tuple[str, str, str] = _DEFAULT_NAMES,
             requests: tuple[Resources, Devices] | None = None) -> PodShare:
    """The share of a pod bound to a node (no allocation annotation: cpu/memory and the
    resource requests only). `names`: the three Mthreads resource names. `requests`: the
    pod's (cpu/memory, Mthreads resources) when already read from this pod's spec."""
    meta = _meta(pod)
    uid, node = meta.get("uid", ""), one_name((pod.get("spec") or {}).get("nodeName", ""))
    # a bound pod counts for what its status says the kubelet allocated too (in-place resize)
    resources, requested = requests or (pod_requests(pod, use_status=True), device_requests(pod, names))
    facts = facts_of(pod)
    ann = meta.get("annotations") or {}
    text = ann.get(keys.ALLOCATED)
    if text is None:
        return PodShare(uid, node, resources, device_requests=requested, pod=facts)
    try:
        containers = decode_kept(text) if isinstance(text, str) else None
        if containers is None:
            raise EncodingError("not a string")
        if any(not d.card for devices in containers for d in devices):
            raise EncodingError(f"an entry has no card id in {text!r}")
        return PodShare(uid, node, resources,
                        card_shares(d for devices in containers for d in devices),
                        device_requests=requested, pod=facts)
    except EncodingError as e:
        return _garbled(uid, node, resources, requested, ann, str(text), str(e), facts)


def _garbled(uid: str, node: str, resources: Resources, devices: Devices, ann: JsonObject,
             text: str, why: str, facts: PodFacts | None) -> PodShare:
    named = set(_CARD_ID.findall(text))
    index = ann.get(keys.GPU_INDEX)
    if isinstance(index, str):
        named.update(f"{node}-mthreads-{i.strip()}" for i in index.split(",") if i.strip().isdigit())
    problem = f"unreadable {keys.ALLOCATED} ({why})"
    if named:
        return PodShare(uid, node, resources, tuple(CardShare(c, 0, 0, whole=True) for c in sorted(named)),
                        device_requests=devices, problem=problem, pod=facts)
    return PodShare(uid, node, resources, whole_node=True, device_requests=devices, problem=problem,
                    pod=facts)


def unread_share(pod: JsonObject, why: str) -> PodShare | None:
    """What a bound pod that raised while it was read is counted for, as a garbled annotation
    is (never under-counted): the cards its allocation annotation names, held whole, or every
    card of its node when it names none. None: it has no allocation annotation (it holds no
    card), or its uid or node cannot be read."""
    try:
        meta = _meta(pod)
        uid, node = meta.get("uid"), (pod.get("spec") or {}).get("nodeName")
        ann = meta.get("annotations") or {}
        text = ann.get(keys.ALLOCATED)
        if not (isinstance(uid, str) and isinstance(node, str) and node and text is not None):
            return None
        return _garbled(uid, node, Resources(pods=1), NO_DEVICES, ann, str(text), why, None)
    except Exception:  # what cannot be read at all holds nothing that can be named
        return None
