"""The extender's view of the cluster: the scheduler cache (scheduling/cache.py) fed by its
watches, the pods waiting for its scheduler, and the decisions the verbs ask for, each made
under the cache's lock together with what it assumes.

kube-scheduler sends node names only, so the extender keeps the nodes and the bound pods'
shares itself (it is node-cache capable). Its watches (`watched`): the nodes, the live pods
bound to a node (`BOUND_LIVE_PODS`: the shares), the live pods waiting for its scheduler
(`waiting`), and the claims, volumes and classes (the node rules of the requeue's look outside
kube-scheduler's sample, decisions.room_outside, read them as the allocator does). A call's body only names its pod: every verb answers for the pod as the
API server holds it, from `waiting` or, when that watch has not shown it yet, from a read
(verbs.py), so a body cannot make the extender reserve, choose or write for a pod that does not
exist, waits for another scheduler or asks for something else.

Reservations are the cache's RESERVED shares: the filter chooses the node and the cards and
counts them at once, `RESERVE_FOR` seconds to live; the bind writes that choice. One ends when
the bind takes it, when the pod is seen bound (its real share replaces it, on that node or
another), filtered again, bound for another node, when the watch of waiting pods no longer
shows the pod (deleted, or bound by another), or when its time is up (verbs.py's `tend`, on
the event loop). Only a pod that waits for our scheduler gets one, and one at a time.
"""

from __future__ import annotations

import threading

from ..base.json_types import JsonObject
from ..kube.informer import NAMESPACE_WATCH, STORAGE_WATCHES
from ..model.config import Config
from ..scheduling.binding_cycle import BindingCycle, Outcome, R, Read
from ..scheduling.cache import NAMESPACE, STORAGE_KINDS, Assumed, Phase, SchedulerCache, Snapshot
from ..scheduling.cycle_state import forget as forget_pod
from ..scheduling.cycle_state import rules_of
from ..scheduling.decide import Placement
from ..scheduling.node_annotations import Ignored, IgnoredEntries
from ..scheduling.object_errors import ObjectError, object_error
from ..scheduling.pod_status import BOUND_LIVE_PODS, uid_of, waiting_for
from ..scheduling.preemption import victims_on
from ..scheduling.request import PodAsk
from ..scheduling.shares import PodShare
from .decisions import choose, fitting_nodes, node_refusal, pick, room_outside, scores

RESERVE_FOR = 30.0  # seconds a filter's choice is held for the bind that writes it
IN_DOUBT = "an earlier binding of the pod is being written or its outcome is unknown"
WAITING = "waiting"  # the kind of the watch of the pods waiting for the extender's scheduler


class Cache:
    """The state source of the extender's verbs; its watches (`watched`) feed `apply`."""

    def __init__(self, config: Config):
        self.config = config
        self.core = SchedulerCache(config.mthreads, shows_unbound=False,
                                   kinds=("node", "pod", NAMESPACE) + STORAGE_KINDS)
        self._cycle = BindingCycle(self.core)  # the binds' outcomes, and the re-reads they need
        self._waiting_lock = threading.Lock()
        self._waiting: dict[str, dict] = {}  # uid -> a pod waiting for our scheduler, as watched
        # Decisions need the nodes, the bound pods and the volumes listed; not the pods waiting
        # for us (a verb reads its pod until that list is in: verbs.py), the largest list in a
        # backlog, so the first filters are answered sooner.
        self.synced = threading.Event()
        self._ignored = IgnoredEntries(config.mthreads.max_instances_per_card)
        self._to_tell: list[Ignored] = []  # nodes whose annotations had entries ignored

    def watched(self) -> list[tuple[str, str, str | None]]:
        """(kind, path, fieldSelector) of the watches that feed `apply`."""
        return [("node", "/api/v1/nodes", None), ("pod", "/api/v1/pods", BOUND_LIVE_PODS),
                (WAITING, "/api/v1/pods", waiting_for(self.config.scheduler_name)),
                NAMESPACE_WATCH] + \
            [(kind, path, None) for kind, path in STORAGE_WATCHES]

    def ready(self) -> bool:
        return self.synced.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Whether everything is listed, waiting up to `timeout` seconds for it."""
        return self.synced.wait(timeout)

    def apply(self, kind: str, event: str, obj) -> list[ObjectError]:
        """A watch's event; returns the objects that raised while applied (the others are)."""
        if kind == WAITING:
            failed = self._apply_waiting(event, obj)
        else:
            failed = self.core.apply(kind, event, obj)
            if kind == "node":
                try:
                    self._to_tell += self._ignored.seen(event, obj)
                except Exception as e:  # the nodes are applied; their warnings wait for the next
                    failed.append(object_error("node", obj, e))
        if not self.synced.is_set() and self.core.ready:
            self.synced.set()
        return failed

    def _apply_waiting(self, event: str, obj) -> list[ObjectError]:
        failed = []
        if event == "RESET":
            waiting = {}
            for p in obj:
                try:
                    waiting[uid_of(p)] = p
                except Exception as e:
                    failed.append(object_error("pod", p, e))
            with self._waiting_lock:
                gone = [uid for uid in self._waiting if uid not in waiting]
                self._waiting = waiting
            for uid in gone:
                forget_pod(uid)  # what its decisions kept goes
            return failed + self.core.nominations("RESET", list(waiting.values()))
        uid = uid_of(obj)
        with self._waiting_lock:
            if event == "DELETED":  # gone, or out of the selector: bound, finished
                self._waiting.pop(uid, None)
            else:
                self._waiting[uid] = obj
        if event == "DELETED":
            forget_pod(uid)  # what its decisions kept goes
            self.core.release(uid)  # a reservation the bind did not take has no use now
        return failed + self.core.nominations(event, obj)

    def ignored_counts(self) -> dict[str, int]:
        """The warnings told per node annotation key (a metric; any thread)."""
        return self._ignored.counts

    def to_tell(self) -> list[Ignored]:
        """The nodes to warn about since the last call (the watch's loop only)."""
        told, self._to_tell = self._to_tell, []
        return told

    def waiting_pod(self, namespace: str, name: str, uid: str) -> dict | None:
        """The pod waiting for our scheduler with this uid, namespace and name, as watched;
        None when the watch does not show it (not yet, or no such pod)."""
        with self._waiting_lock:
            pod = self._waiting.get(uid)
        if pod is None:
            return None
        meta = pod["metadata"]
        return pod if (meta.get("namespace"), meta.get("name")) == (namespace, name) else None

    # the verbs' decisions, each under the cache's lock with what it assumes
    def reserve(self, pod: dict, ask: PodAsk, names: list[str], now: float
                ) -> tuple[Placement | None, dict[str, str], str | None] | str:
        """(the filter's choice among `names`, reserved; the reasons when none fits; then a
        node outside `names` with room for the pod, or None); or why the pod cannot be
        filtered now."""
        uid = uid_of(pod)
        rules = rules_of(pod)  # its sets, before the lock
        with self.core.deciding() as state:
            self.core.release(uid)  # a new filter of the pod replaces its reservation
            if self.core.is_assumed(uid):
                return IN_DOUBT
            chosen, failed = pick(pod, ask, names, state, self.config)
            if chosen is None:
                return None, failed, room_outside(pod, ask, names, state, self.config, rules)
            self.core.reserve(chosen, pod, now + RESERVE_FOR)
            return chosen, failed, None

    def take_reservation(self, uid: str, namespace: str, name: str, node: str, now: float
                         ) -> tuple[dict, Placement] | str | None:
        """The pod and the placement reserved for it on `node`, now being written; None if it
        has none (expired, gone) or it was for another node (then it is released); the reason
        when the node's own rules refuse the pod now (released too)."""
        with self.core.deciding() as state:
            def admit(r: Assumed) -> str | None:
                if r.share.node != node or (r.until or 0) <= now or \
                        (r.namespace, r.name) != (namespace, name):
                    return ""
                return node_refusal(r.pod or {}, node, state)

            taken = self.core.take_reservation(uid, admit)
            if not isinstance(taken, Assumed):
                return taken or None
            assert taken.pod is not None and taken.placement is not None  # a reservation's
            return taken.pod, taken.placement

    def choose_and_assume(self, pod: dict, ask: PodAsk, node: str) -> Placement | str | None:
        """The cards on `node` chosen on the state that counts every share chosen before, and
        counted at once (before the write: never handed out twice); or why they do not fit;
        None if a binding of the pod is being written right now."""
        meta = pod["metadata"]
        rules = rules_of(pod)
        with self.core.deciding() as state:
            if self.core.phase(meta["uid"]) is Phase.BINDING:
                return None
            result = choose(pod, ask, node, state, self.config, rules)
            if not isinstance(result, str):
                self.core.assume(result.share, meta["namespace"], meta["name"])
            return result

    def victims(self, pod: dict, ask: PodAsk, proposed: dict[str, tuple[list[str], int]]
                ) -> dict[str, tuple[list[str], int]]:
        """Per node kube-scheduler proposes: its victims plus the card holders to evict, or
        the node left out when no set of lower-priority pods frees room."""
        out = {}
        with self.core.deciding() as state:
            holders = self.core.holders(proposed)
            for node, (uids, pdb) in proposed.items():
                chosen = victims_on(pod, ask, node, state, self.config, holders[node], uids)
                if chosen is not None:
                    out[node] = (chosen, pdb)
        return out

    def filter(self, pod: dict, ask: PodAsk, names: list[str]) -> tuple[list[str], dict[str, str]]:
        """Every node's answer, reserving nothing (pods without a card to choose)."""
        fits, failed = self.core.read(lambda state: fitting_nodes(pod, ask, names, state, self.config))
        return list(fits), failed

    def scores(self, pod: dict, ask: PodAsk, names: list[str]) -> list[tuple[str, int]]:
        return self.core.read(lambda state: scores(pod, ask, names, state, self.config))

    # the binding cycle (scheduling/binding_cycle.py): the bind verb's writes and re-reads
    def not_written(self, share: PodShare) -> bool:
        """Nothing was sent for the share: its cards are free again."""
        return self._cycle.not_written(share)

    def binding_outcome(self, share: PodShare, namespace: str, name: str, status: int | None,
                        read: Read[R]) -> tuple[Outcome, R | None]:
        """A write's outcome applied to the cache; with what `read` returned if a re-read was
        started (404/409)."""
        return self._cycle.outcome(share, namespace, name, status, read)

    def reread_now(self, uid: str, namespace: str, name: str, read: Read[R]) -> R:
        """A re-read of the pod started now (`read`)."""
        return self._cycle.read_now(uid, namespace, name, read)

    def reread_due(self, read: Read[R]) -> list[R]:
        """A re-read started (`read`) for each pod whose binding outcome is unknown and due."""
        return self._cycle.reread_due(read)

    def read_answer(self, uid: str, status: int, pod: JsonObject | None) -> str | None:
        """What a re-read told (binding_cycle.BindingCycle.read_answer)."""
        return self._cycle.read_answer(uid, status, pod)

    def in_doubt(self, uid: str) -> bool:
        """Whether a binding of the pod is under way, written and not seen yet, or unknown."""
        return self.core.in_doubt(uid)

    def learn(self, uid: str, status: int, pod: JsonObject | None) -> str:
        """What a fresh read of a pod in doubt, before it is bound again, tells the cache."""
        return self._cycle.learn(uid, status, pod)

    def expire(self, now: float) -> int:
        """Release the reservations whose time is up; returns how many."""
        return self.core.expire(now)

    def node_count(self) -> int:
        return self.core.node_count()

    def snapshot(self) -> Snapshot:
        """The nodes and the bound pods' cards, for /metrics."""
        return self.core.snapshot()
