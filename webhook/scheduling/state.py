"""The usage of every node and card, indexed so that a decision never scans the pods.

Keyed by pod uid, so adding a pod's share twice (our own bind, then the watch event
that confirms it) or removing it twice changes nothing.
"""

from __future__ import annotations

import heapq
import logging
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.cards import CORES_PER_CARD
from ..model.config import MthreadsConfig
from ..model.pods import resource_names
from .inventory import NodeCards, node_cards
from .nominated import NominatedPod, NominatedPods
from .one_copy import hold, one_name, release
from .pod_facts import hold_facts, release_facts
from .pod_index import PodIndex
from .resources import (
    NO_DEVICES,
    DeviceLimits,
    Devices,
    Resources,
    device_allocatable,
    node_allocatable,
)
from .shares import PodShare
from .volumes import Storage

log = logging.getLogger(__name__)


@dataclass
class CardUsage:
    memory_mib: int = 0
    cores: int = 0
    whole: int = 0  # shares that hold the card exclusively
    holders: int = 0  # shares of any kind
    containers: int = 0  # containers holding a share (instances of the card)

    @property
    def idle(self) -> bool:
        return self.holders == 0


@dataclass
class NodeUsage:
    requested: Resources = field(default_factory=Resources)
    devices: Devices = NO_DEVICES  # the Mthreads resources the bound pods request (kubelet's sum)
    whole_node: int = 0  # garbled shares that hold every card of the node


Key = tuple[float, str]  # a node's place in a policy's order: (used or -used, name)


@dataclass(frozen=True)
class NodeRoom:
    """What a node's cards have left, for skipping nodes that cannot fit at a glance."""

    used: float  # mean of the cards' used fraction (memory and cores), the node policies' key
    free: tuple[tuple[int, int], ...]  # (free MiB, free cores) of each card still shareable
    idle: int  # cards nobody holds
    models: frozenset[int]  # units per card of the node's cards


@dataclass(frozen=True)
class NodeInfo:
    name: str
    obj: JsonObject  # the Node as the API server returned it
    cards: NodeCards
    allocatable: Resources
    device_limits: DeviceLimits = (None, None, None)  # allocatable count, memory, cores


class ClusterState:
    def __init__(self, mt: MthreadsConfig):
        self.mt = mt
        self.names = resource_names(mt)
        self.nodes: dict[str, NodeInfo] = {}
        self.labels: dict[str, Mapping[str, str]] = {}  # each node's labels (topology pairs)
        self.shares: dict[str, PodShare] = {}
        self.cards: dict[str, CardUsage] = {}  # by card id, also for cards of nodes not seen yet
        self.node_usage: dict[str, NodeUsage] = {}
        self.pods = PodIndex()  # what the pods on each node show the rules of other pods
        self.storage = Storage()  # claims, volumes and classes (the allocator's watches)
        # each namespace's labels, as its watch shows them (affinity terms' namespaceSelector)
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.nominated = NominatedPods()  # pods nominated for a node, not bound yet
        # Bumped whenever room may have appeared (a share freed, a node added or changed):
        # pods that did not fit are retried only then.
        self.generation = 0
        # Nodes with a card left to share, in the order the node policies try them: (used, name)
        # for spread, (-used, name) for binpack; the first that fits is the one the policy picks.
        # One list per kind of free card: (free MiB's bit_length, free cores' bit_length), a
        # node in each list one of its shareable cards falls in; so a request looks only at
        # nodes with a card that may hold it, and skips the many whose cards are too full late
        # in a fill. Powers of two for the cores too: a decision merges every list that may
        # hold its request, and with a list per count of cores that was 15 lists a decision
        # (the merge's set-up was a quarter of the extender's choice of a node).
        # A policy's lists are made when a decision first asks for it and kept from then on:
        # most clusters use one policy, and each assumed share moves its node in every list.
        # Plain lists kept sorted by bisect: a move is a search and a shift of pointers in C,
        # a sixth of what a sorted container's did (sortedcontainers' SortedList, before), and
        # a list holds a few thousand nodes at most.
        self.room: dict[str, NodeRoom] = {}
        self._orders: dict[str, dict[tuple[int, int], list[Key]]] = {}
        # (policy, bit_lengths of MiB and cores) of a request -> the lists that may hold it
        self._qualifying: dict[tuple[str, int, int], list[list[Key]]] = {}

    def _keys(self, name: str, room: NodeRoom, policies: Iterable[str] | None = None
              ) -> Iterator[tuple[list[Key], Key]]:
        for bucket in {(mib.bit_length(), cores.bit_length()) for mib, cores in room.free}:
            for policy in policies or self._orders:
                used = -room.used if policy == "binpack" else room.used
                yield self._order(policy, bucket), (used, name)

    def _order(self, policy: str, bucket: tuple[int, int]) -> list[Key]:
        orders = self._orders[policy]
        order = orders.get(bucket)
        if order is None:
            order = orders[bucket] = []
            self._qualifying.clear()  # a new bucket may qualify for any request
        return order

    def _reindex(self, name: str) -> None:
        old = self.room.pop(name, None)
        if old is not None:
            for order, key in self._keys(name, old):
                del order[bisect_left(order, key)]  # the key it was added with: it is there
        info = self.nodes.get(name)
        if info is None or not info.cards.cards:
            return
        room = node_room(info.cards, self.cards)
        self.room[name] = room
        for order, key in self._keys(name, room):
            insort(order, key)

    def in_order(self, policy: str, least_mib: int, least_cores: int) -> Iterator[str]:
        """In the order of the node policy ("spread" or "binpack"), each node once, the nodes
        with a card of about `least_mib` free MiB and `least_cores` free cores (their
        buckets'; the caller checks the exact room)."""
        if policy not in self._orders:  # first asked: its lists, from every node's room
            self._orders[policy] = {}
            for name, room in self.room.items():
                for order, key in self._keys(name, room, (policy,)):
                    order.append(key)
            for order in self._orders[policy].values():
                order.sort()
        least = (policy, least_mib.bit_length(), least_cores.bit_length())
        buckets = self._qualifying.get(least)
        if buckets is None:
            buckets = self._qualifying[least] = [
                o for (mib_bits, cores_bits), o in self._orders[policy].items()
                if mib_bits >= least[1] and cores_bits >= least[2]]
        lists = [o for o in buckets if o]
        last = None
        for _, name in (lists[0] if len(lists) == 1 else heapq.merge(*lists)):
            if name != last:  # a node in several lists comes out of the merge as neighbours
                last = name
                yield name

    # nodes
    def set_node(self, node: JsonObject) -> None:
        """Everything of the node is read before anything changes: a node that raises while
        read leaves the state as it was (the cache's apply tells the front-end)."""
        name = node["metadata"]["name"]
        old = self.nodes.get(name)
        info = NodeInfo(name, node, node_cards(node, self.mt), node_allocatable(node),
                        device_allocatable(node, self.names))
        labels = (node.get("metadata") or {}).get("labels") or {}
        changed = old is None or _fingerprint(old.obj) != _fingerprint(node)
        # the offer is read from what the fingerprint holds: a heartbeat formats no text
        offer = _devices_text(info, self.names) if changed and old is not None else None
        self.nodes[name] = info
        self.labels[name] = labels
        _log_problem(name, old.cards.problem if old else None, info.cards.problem)
        if old is not None and offer is not None and _devices_text(old, self.names) != offer:
            log.info("node %s: now %s", name, offer)
        self._reindex(name)
        if changed:
            self.generation += 1  # heartbeats that change nothing a decision reads retry nothing

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.labels.pop(name, None)
            self._reindex(name)
            self.generation += 1

    def clear_nodes(self) -> dict[str, NodeInfo]:
        """Forget every node (a relist follows); returns them as they were."""
        before = self.nodes
        self.nodes = {}
        self.labels.clear()
        self.room.clear()
        for buckets in self._orders.values():
            buckets.clear()
        self._qualifying.clear()
        self.generation += 1
        return before

    def node_event(self, event: str, obj: JsonObject) -> None:
        """Apply an informer's node event of one node: DELETED, or an add/update (a relist
        is the cache's: `clear_nodes`, then each node)."""
        if event == "DELETED":
            self.remove_node(obj["metadata"]["name"])
        else:
            self.set_node(obj)

    def storage_event(self, kind: str, event: str, obj: JsonObject | list[JsonObject]) -> None:
        """A claim, volume or class changed: a pod waiting for it may fit now."""
        self.storage.apply(kind, event, obj)
        self.generation += 1

    def clear_namespaces(self) -> None:
        """Before a relist of the namespaces, which come back one by one (namespace_event)."""
        self.namespaces = {}
        self.generation += 1

    def namespace_event(self, event: str, obj: JsonObject) -> None:
        """A namespace added, changed or deleted. Its labels changing bumps the generation: a
        pod whose affinity term's namespaceSelector reads them may fit now."""
        name, labels = _namespace_of(obj)
        if event == "DELETED":
            if self.namespaces.pop(name, None) is not None:
                self.generation += 1
        elif self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
            self.generation += 1

    def nominate(self, uid: str, pod: NominatedPod | None) -> None:
        """A pod's nomination (None: none now, bound or gone): a cleared or moved one may
        leave room for the pods that yielded to it."""
        if self.nominated.put(uid, pod):
            self.generation += 1

    # shares
    def add(self, share: PodShare) -> None:
        old = self.shares.get(share.uid)
        if old is share or old == share:
            return
        if old is not None and (old.node, old.cards, old.whole_node) == \
                (share.node, share.cards, share.whole_node):
            # The same cards (the watch confirming an assumed share): no card changes, and the
            # node's room and its place in the policies' lists stay as they are.
            self.shares[share.uid] = share
            self._apply(old, -1, cards=False)
            self._apply(share, +1, cards=False)
            self.generation += 1
            return
        if old is not None:
            self.remove(share.uid)
        self.shares[share.uid] = share
        self._apply(share, +1)

    def remove(self, uid: str) -> PodShare | None:
        share = self.shares.pop(uid, None)
        if share is not None:
            self._apply(share, -1)
            self.generation += 1
        return share

    def clear_shares(self) -> None:
        self._release_all()
        self.shares.clear()
        self.cards.clear()
        self.node_usage.clear()
        self.pods.clear()
        for name in list(self.room):
            self._reindex(name)
        self.generation += 1

    def _release_all(self) -> None:
        for share in self.shares.values():
            _counted(share, -1)

    def __del__(self) -> None:
        # a state dropped with its shares (an allocator's session ends, a test's state) lets
        # go of the copies they held, as removing them one by one would; at the interpreter's
        # exit the tables may be gone first, and nothing is left to free
        try:
            self._release_all()
        except Exception:
            pass

    def _apply(self, share: PodShare, sign: int, cards: bool = True) -> None:
        _counted(share, sign)
        nu = self.node_usage.setdefault(share.node, NodeUsage())
        nu.requested = nu.requested + share.resources if sign > 0 else nu.requested - share.resources
        nu.devices = nu.devices + share.device_requests if sign > 0 else nu.devices - share.device_requests
        nu.whole_node += sign * share.whole_node
        if share.pod is not None:
            if sign > 0:
                self.pods.add(share, share.pod)
            else:
                self.pods.remove(share, share.pod)
        if not cards:
            return
        for c in share.cards:
            cu = self.cards.setdefault(c.card, CardUsage())
            cu.memory_mib += sign * c.memory_mib
            cu.cores += sign * c.cores
            cu.whole += sign * c.whole
            cu.holders += sign
            cu.containers += sign * c.containers
            if cu.holders == 0:
                del self.cards[c.card]
        if share.cards and share.node in self.nodes:
            self._reindex(share.node)

    # reads used by a decision: O(1) per node or card
    def requested_on(self, node: str) -> Resources:
        nu = self.node_usage.get(node)
        return nu.requested if nu else Resources()

    def devices_on(self, node: str) -> Devices:
        nu = self.node_usage.get(node)
        return nu.devices if nu else NO_DEVICES

    def node_held_whole(self, node: str) -> bool:
        nu = self.node_usage.get(node)
        return bool(nu and nu.whole_node)

    def card(self, card_id: str) -> CardUsage:
        return self.cards.get(card_id) or _IDLE


_IDLE = CardUsage()


def _counted(share: PodShare, sign: int) -> None:
    """The share's values held (sign +1) or released (-1) in one_copy's tables: the copies the
    next readings of equal values find, kept no longer than a counted share holds them."""
    if sign > 0:
        hold(share.resources)
        hold(share.device_requests)
        if share.pod is not None:
            hold_facts(share.pod)
    else:
        release(share.resources)
        release(share.device_requests)
        if share.pod is not None:
            release_facts(share.pod)


def card_used(memory_mib: int, u: CardUsage) -> float:
    """How full a card is, 0..1: the mean of its memory and its cores."""
    return (u.memory_mib / memory_mib + u.cores / CORES_PER_CARD) / 2


def shareable(memory_mib: int, u: CardUsage) -> bool:
    """Not held exclusively, and not simply full: a slice may still go there."""
    return not u.whole and not (u.memory_mib >= memory_mib and u.cores >= CORES_PER_CARD)


def node_room(cards: NodeCards, usage: Mapping[str, CardUsage]) -> NodeRoom:
    """`usage`: the cards' usage by id (a card nobody holds is not in it)."""
    used, idle, free = 0.0, 0, []
    for c in cards.cards:
        u = usage.get(c.id, _IDLE)
        used += card_used(c.memory_mib, u)
        if not cards.takes_new(c, u.containers):
            continue  # cordoned or at its limit of containers: no room to offer
        idle += not u.holders
        if shareable(c.memory_mib, u):
            free.append((c.memory_mib - u.memory_mib, CORES_PER_CARD - u.cores))
    return NodeRoom(used / len(cards.cards), tuple(free), idle, cards.models)


def _namespace_of(ns: JsonObject) -> tuple[str, Mapping[str, str]]:
    """(name, labels) of a Namespace; one whose labels are not a map of strings raises,
    naming the field (the cache's boundary tells of it and keeps the rest)."""
    meta = ns.get("metadata") or {}
    name, labels = meta.get("name"), meta.get("labels") or {}
    if not isinstance(name, str) or not name:
        raise ValueError(f"metadata.name is not a name: {name!r}")
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in labels.items()):
        raise ValueError(f"metadata.labels is not a map of strings: {labels!r}")
    return one_name(name), labels


def _log_problem(node: str, old: str | None, new: str | None) -> None:
    """Name a node whose capacity cannot be read as cards, once per change (not per heartbeat)."""
    if new and new != old:
        log.warning("node %s: %s; no Mthreads pod goes there until its capacity reads as cards",
                    node, new)
    elif old and not new:
        log.info("node %s: its capacity reads as cards again", node)


def _devices_text(info: NodeInfo, names: tuple[str, str, str]) -> str:
    """What a node offers Mthreads pods, for the log line of a change (a device plugin
    restarting, a card reported unhealthy): `2 cards of 96 units, allocatable mthreads.com/..."""
    cards = info.cards.cards
    offer = f"{len(cards)} cards of {cards[0].model.units} units" if cards else "no cards"
    listed = [f"{n}={v}" for n, v in zip(names, info.device_limits) if v is not None]
    return f"{offer}, allocatable {' '.join(listed) or 'none listed'}"


def _fingerprint(node: JsonObject) -> tuple[object, ...]:
    """What of a node a decision reads."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or () if c.get("type") == "Ready"]
    ann = meta.get("annotations") or {}
    return (repr(meta.get("labels")), repr(spec.get("taints")), spec.get("unschedulable"),
            repr(status.get("capacity")), repr(status.get("allocatable")), tuple(ready),
            ann.get(keys.CORDON), ann.get(keys.MAX_INSTANCES))
