"""The pod cache both front-ends share: which pods wait, which shares are counted, and why.

Plain data, no I/O and no lock (the allocator calls it from its one decision thread, the
extender under its own lock). The life of a pod, as kube-scheduler's cache has it:

- the watch shows it unbound: `pending` (the allocator only keeps its own scheduler's pods);
- a card is chosen: `assume` counts its share at once, before the binding is written, so the
  next decision sees it; the pod leaves `pending` (the extender's reservations are assumed
  shares with no write under way, dropped with `bind_failed` when they lapse);
- the write's outcome: `bind_ok` (keep counting until the watch confirms), `bind_failed`
  (nothing was written: the share is dropped and the pod waits again), `bind_unknown` (it may
  have happened: the share is held and the pod is `uncertain` until a read tells);
- a read of an uncertain pod: `resolved`;
- the watch shows it bound: its annotation counts the same share (keyed by uid, so not twice),
  and the assumption ends; shown gone: everything about it is forgotten;
- a relist rebuilds everything from the list, keeping only the assumed shares of pods the
  list still shows unbound (our binding is newer than the list).

The extender watches bound pods only (`BOUND_LIVE_PODS`, `unbound_watched=False`):
kube-scheduler hands it each pending pod in the call, so the unbound ones would be half its
watch events for nothing. Then no pod waits in `pending`, and a relist keeps the assumed
shares of every pod it does not show (the extender reads those whose write is done, and lets
its reservations lapse; extender/cache.py).
"""

from __future__ import annotations

import logging
from typing import Callable

from ..config import MthreadsConfig
from ..observe.fleet import BoundPods
from .shares import PodShare, share_of
from .state import ClusterState

log = logging.getLogger(__name__)

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"  # the pods a cache lists and watches
BOUND_LIVE_PODS = "spec.nodeName!=," + LIVE_PODS  # the extender's: only those on a node
TERMINAL = ("Succeeded", "Failed")


def uid_of(pod: dict) -> str:
    return pod["metadata"]["uid"]


def name_of(pod: dict) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace')}/{m.get('name')}"


def is_bound(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def scheduled_condition(pod: dict) -> dict | None:
    """The pod's PodScheduled condition (a scheduler's last word on it), if any."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return c
    return None


class PodCache:
    def __init__(self, mt: MthreadsConfig, scheduler_name: str | None = None,
                 on_settled: Callable[[str], None] | None = None,
                 on_changed: Callable[[str], None] | None = None,
                 bound: BoundPods | None = None, unbound_watched: bool = True):
        """`scheduler_name`: keep only the unbound pods of this scheduler (None: all).
        `on_settled(uid)`: a pod was seen bound or gone; `on_changed(uid)`: a pending pod's
        annotations changed (what it asks for may have). `bound`: the bound pods' view that
        the metrics read, kept in step with the watch (emptied: a new cache knows no pod).
        `unbound_watched` False: the watch shows bound pods only (the extender's)."""
        self.state = ClusterState(mt)
        self.bound = bound if bound is not None else BoundPods()
        self.bound.clear()
        self.scheduler_name = scheduler_name
        self.unbound_watched = unbound_watched
        self.on_settled = on_settled or (lambda uid: None)
        self.on_changed = on_changed or (lambda uid: None)
        self.pending: dict[str, dict] = {}  # uid -> an unbound pod, not assumed
        self.assumed: dict[str, PodShare] = {}  # uid -> our share, not yet seen bound
        self.in_flight: set[str] = set()  # uids whose binding write is under way
        self.uncertain: dict[str, tuple[str, str]] = {}  # uid -> (ns, name): outcome unknown
        self.synced: set[str] = set()
        self.warned: set[str] = set()

    @property
    def ready(self) -> bool:
        return self.synced >= {"node", "pod"}

    # watch events
    def apply(self, kind: str, event: str, obj) -> None:
        """An informer's event: RESET (a full list), DELETED, or an add/update."""
        if kind == "node":
            self.state.node_event(event, obj)
        elif event == "RESET":
            self.relist(obj)
        elif event == "DELETED":
            self.gone(uid_of(obj))
        else:
            self.seen(obj)
        if event == "RESET":
            self.synced.add(kind)

    def relist(self, pods: list[dict]) -> None:
        keep = dict(self.assumed)
        self.state.clear_shares()
        self.bound.clear()
        self.pending.clear()
        self.assumed.clear()
        unbound = {uid_of(p) for p in pods if not is_bound(p)}
        if not self.unbound_watched:  # the list shows no unbound pod: any it does not show bound
            unbound = set(keep) - {uid_of(p) for p in pods if is_bound(p)}
        for uid, share in keep.items():
            if uid in unbound:  # our binding is newer than the list (or still being written)
                self.assumed[uid] = share
                self.state.add(share)
        for pod in pods:
            self.seen(pod)

    def seen(self, pod: dict) -> None:
        uid = uid_of(pod)
        if (pod.get("status") or {}).get("phase") in TERMINAL:
            # its containers have stopped: it holds nothing (the kubelet counts it no more),
            # whether the watch shows the change or, for LIVE_PODS, its removal
            self.gone(uid)
            return
        if is_bound(pod):
            self.pending.pop(uid, None)
            ours = self.assumed.pop(uid, None)
            self.uncertain.pop(uid, None)
            self.on_settled(uid)
            # The pod we chose for: its requests as read then (a pod's resources do not change
            # before it runs), the cards as the annotation says now.
            share = share_of(pod, self.state.names,
                             (ours.resources, ours.devices) if ours is not None else None)
            if share.problem and uid not in self.warned:
                self.warned.add(uid)
                log.warning("pod %s: %s; counting %s as fully used", name_of(pod), share.problem,
                            ", ".join(c.card for c in share.cards) or f"every card of {share.node}")
            self.state.add(share)
            self.bound.seen(pod)
            return
        if uid in self.assumed or not self.unbound_watched:
            return  # an event older than our binding; or no pod waits here
        meta = pod["metadata"]
        theirs = self.scheduler_name is not None and \
            (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name
        if theirs or meta.get("deletionTimestamp"):
            self.pending.pop(uid, None)
            return
        old = self.pending.get(uid)
        if old is not None and (old.get("metadata") or {}).get("annotations") != meta.get("annotations"):
            self.on_changed(uid)
        self.pending[uid] = pod

    def gone(self, uid: str) -> None:
        self.pending.pop(uid, None)
        self.assumed.pop(uid, None)
        self.uncertain.pop(uid, None)
        self.warned.discard(uid)
        self.on_settled(uid)
        self.state.remove(uid)
        self.bound.gone(uid)

    # our bindings
    def assume(self, share: PodShare, writing: bool = True) -> None:
        """`writing` False: a reservation (the extender's filter), no write under way yet."""
        self.pending.pop(share.uid, None)
        self.assumed[share.uid] = share
        if writing:
            self.in_flight.add(share.uid)
        self.state.add(share)

    def bind_ok(self, share: PodShare) -> None:
        self.in_flight.discard(share.uid)

    def bind_failed(self, share: PodShare, pod: dict) -> bool:
        """Nothing was written: drop the share and let the pod wait again, unless the watch
        has replaced the assumption since. True if it was dropped."""
        self.in_flight.discard(share.uid)
        if self.assumed.get(share.uid) is not share:
            return False
        del self.assumed[share.uid]
        self.state.remove(share.uid)
        if self.unbound_watched:
            self.pending[share.uid] = pod
        return True

    def bind_unknown(self, share: PodShare, namespace: str, name: str) -> None:
        """It may have happened: hold the share until a read of the pod tells."""
        self.in_flight.discard(share.uid)
        if self.assumed.get(share.uid) is share:
            self.uncertain[share.uid] = (namespace, name)

    def resolved(self, uid: str, status: int, pod: dict | None) -> str:
        """A fresh read of a pod (HTTP status, the pod or None): "bound", "unbound", "gone",
        or "unknown" (not readable, or a write is under way: keep counting its share)."""
        if status == 404 or (pod is not None and uid_of(pod) != uid):
            self.gone(uid)
            return "gone"
        if pod is None or uid in self.in_flight:
            return "unknown"
        self.uncertain.pop(uid, None)
        if is_bound(pod):
            self.seen(pod)
            return "bound"
        if self.assumed.pop(uid, None) is not None:
            self.state.remove(uid)
        self.seen(pod)
        return "unbound"
