"""The extender's verbs (filter, prioritize, preempt, bind) on its cache: decoded messages in,
answers out; app.py serves them over HTTP.

Concurrency: kube-scheduler decides one pod at a time (filter, prioritize), but binds in the
background, so the filter of the next pod may come before, during or after the bind of the
previous one; several binds may be under way at once. The rule that keeps the cards from
being handed out twice and a pod from losing a race: **the filter chooses the node and the
cards under the lock and reserves them** (an assumed share, counted by every later filter
and bind), answering that one node; the bind writes the reservation. A bind that finds no
reservation for its node (lapsed, or kube-scheduler chose another node) decides on the
state of that moment, as before, and answers an error if the cards are taken since.

The verbs do not wait for the cache's first list: the caller does (app.py), and a verb
called before it answers that the extender is not synced.

Trust: a call's body only names its pod (namespace, name, uid). Each verb answers for the pod
as the API server holds it: from the cache's watch of the pods waiting for our scheduler, or,
when the watch has not shown it yet, from a read (the verb's answer is then awaitable). A pod
that does not exist under that uid, is bound already or waits for another scheduler gets an
error and nothing is reserved or written for it; what the body says of the pod's containers or
annotations is never read. A bind checks the node's own rules (taints, selector, affinity,
readiness) again: a binding skips all of kube-scheduler's checks.

No pod stops the others (issue 46): a verb whose pod raises while decided answers that pod
with an error saying what raised (kube-scheduler backs the pod off), and a watched object that
raises while indexed is skipped; each is told of (observe/object_errors.py: a log line, a
Warning event sent by `tend`, the counter on /metrics).
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections import deque
from typing import Awaitable, Callable, TypeVar

from prometheus_client import CollectorRegistry

from ..kube.pods import patch_pod_status, post_binding, read_pod
from ..kube.reporter import warn_node, warn_object
from ..metrics.object_errors import INDEX, ObjectErrors
from ..model import annotations as keys
from ..model.cards import Fleet
from ..model.config import Config
from ..scheduling.binding import binding_body
from ..scheduling.binding_cycle import Outcome
from ..scheduling.decide import Placement
from ..scheduling.node_annotations import WARNING_REASON
from ..scheduling.object_errors import object_error
from ..scheduling.request import request_of
from . import wire
from .cache import WAITING

log = logging.getLogger("webhook.extender")

NOT_SYNCED = "the extender has not listed nodes and pods yet"

T = TypeVar("T")


class Extender:
    """`source`: the cache (cache.Cache); `api`: the API client (kube.api.Api, or a fake) for
    the binds and the reads they need, made on the event loop that serves the verbs;
    `registry`: where the count of objects that raised is exposed (/metrics)."""

    def __init__(self, config: Config, source, api, registry: CollectorRegistry | None = None):
        self.config, self.source, self.api = config, source, api
        self.fleet = Fleet.of(config.mthreads.memory_per_card)
        self.requeues: set[asyncio.Task] = set()  # the requeue writes under way
        self.warnings: deque[tuple[dict, str, str]] = deque()  # events `tend` sends
        self.errors = ObjectErrors("extender", registry or CollectorRegistry(),
                                   lambda *warning: self.warnings.append(warning))

    def index(self, kind: str, event: str, obj) -> None:
        """A watch's event (the watches' `emit`): applied to the cache, each object that
        raises told of and skipped."""
        try:
            failed = self.source.apply(kind, event, obj)
        except Exception as e:  # beside the cache's own boundary: the waiting pods, the nodes'
            failed = [object_error("pod" if kind == WAITING else kind, obj, e)]
        for err in failed:
            self.errors.report(INDEX, err)

    def synced(self) -> bool:
        return self.source.ready()  # no wait: Event.wait(0) takes a lock, three times a call

    def filter(self, body) -> dict | Awaitable[dict]:
        args = wire.extender_args(body)
        if not self.synced():
            return wire.filter_error(NOT_SYNCED)
        return self._for_pod("filter", args.pod, lambda pod: self._filter(args, pod),
                             wire.filter_error)

    def _filter(self, args: wire.ExtenderArgs, pod: dict) -> dict:
        ask = request_of(pod, self.config, self.fleet)
        if ask.need is None or ask.invalid:  # no card to choose: every node's answer
            fits, failed = self.source.filter(pod, ask, args.node_names)
            return wire.filter_result(args, fits, failed)
        result = self.source.reserve(pod, ask, args.node_names, time.monotonic())
        if isinstance(result, str):
            return wire.filter_error(result)
        chosen, failed, elsewhere = result
        if elsewhere is not None:
            self._requeue(pod, elsewhere, len(args.node_names))
        # The one node chosen; the other fitting nodes are left out without a reason (1.20
        # takes the answer's nodes as the feasible ones), so kube-scheduler binds there.
        return wire.filter_result(args, [chosen.node] if chosen else [], failed)

    # the pod a call names, as the API server holds it
    def _for_pod(self, verb: str, claimed: dict, answer: Callable[[dict], T],
                 refuse: Callable[[str], T]) -> T | Awaitable[T]:
        """`answer(pod)` for the API server's pod that `claimed` (a body's pod) names, at
        once when the watch shows it waiting for us, else after a read; `refuse(why)` when
        there is no such pod waiting for us, or when `answer` raised (told of as `verb`'s)."""
        name = wire.pod_name(claimed)
        if isinstance(name, str):
            return refuse(name)
        pod = self.source.waiting_pod(*name)
        if pod is not None:
            return self._answered(verb, pod, answer, refuse)
        return self._read_then(verb, name, answer, refuse)

    async def _read_then(self, verb: str, name: tuple[str, str, str],
                         answer: Callable[[dict], T], refuse: Callable[[str], T]) -> T:
        pod = await self._read_pod(*name)
        return refuse(pod) if isinstance(pod, str) else self._answered(verb, pod, answer, refuse)

    def _answered(self, verb: str, pod: dict, answer: Callable[[dict], T],
                  refuse: Callable[[str], T]) -> T:
        try:
            return answer(pod)
        except Exception as e:  # this pod's: told of, and answered with what raised
            return refuse(self._raised(verb, pod, e))

    def _raised(self, verb: str, pod: dict, e: Exception) -> str:
        """Tell of a pod whose `verb` raised; the answer's error."""
        err = object_error("pod", pod, e)
        return f"{err.who}: {self.errors.report(verb, err)}"

    async def _read_pod(self, namespace: str, name: str, uid: str) -> dict | str:
        return self._checked(namespace, name, uid, *await read_pod(self.api, namespace, name))

    def _checked(self, namespace: str, name: str, uid: str, status: int,
                 pod: dict | None) -> dict | str:
        """A read's answer (HTTP status, pod or None): the pod, if it is the one named and
        waits for our scheduler; else why the extender does not decide for it."""
        who = f"pod {namespace}/{name}"
        if pod is None:
            return f"{who}: " + ("not found" if status == 404 else f"cannot be read (HTTP {status})")
        spec = pod.get("spec") or {}
        if (pod.get("metadata") or {}).get("uid") != uid:
            return f"{who}: uid {uid} is gone"
        if spec.get("nodeName"):
            return f"{who} is already bound to {spec['nodeName']}"
        if spec.get("schedulerName") != self.config.scheduler_name:
            return (f"{who} waits for scheduler {spec.get('schedulerName')!r}, "
                    f"not {self.config.scheduler_name!r}")
        return pod

    def _requeue(self, pod: dict, elsewhere: str, offered: int) -> None:
        """The pod fits none of the nodes kube-scheduler offered, but `elsewhere`, outside its
        node sample, has room: kube-scheduler would park the pod until the cluster changes (up
        to a minute), so the pod's annotation `REQUEUES` is raised, which puts it back in
        kube-scheduler's queue for a cycle over another sample. At most as many times as
        samples of that size cover the cluster, plus two: kube-scheduler may still refuse that
        node for what the allocator's node checks leave out (volume attach limits, a
        WaitForFirstConsumer claim's provisioning)."""
        meta = pod["metadata"]
        done = _count((meta.get("annotations") or {}).get(keys.REQUEUES))
        if done >= math.ceil(self.source.node_count() / max(offered, 1)) + 2:
            return
        task = asyncio.get_running_loop().create_task(self._write_requeue(meta, done + 1, elsewhere))
        self.requeues.add(task)
        task.add_done_callback(self.requeues.discard)

    async def _write_requeue(self, meta: dict, count: int, elsewhere: str) -> None:
        who = f"{meta.get('namespace')}/{meta.get('name')}"
        # the uid: a pod made since under the same name is not touched (the API server refuses
        # to change a uid)
        patch = {"metadata": {"uid": meta.get("uid"), "annotations": {keys.REQUEUES: str(count)}}}
        status, message = await patch_pod_status(self.api, meta.get("namespace"),
                                                 meta.get("name"), patch)
        if status is not None and 200 <= status < 300:
            log.info("requeued %s (%d): no room on the nodes kube-scheduler offered, room on %s",
                     who, count, elsewhere)
        else:
            log.info("requeue %s: %s", who, message)

    def preempt(self, body) -> dict | Awaitable[dict]:
        args = wire.preemption_args(body)
        if not self.synced():
            return wire.preemption_result({})
        return self._for_pod("preempt", args.pod, lambda pod: self._preempt(args, pod),
                             lambda why: wire.preemption_result({}))

    def _preempt(self, args: wire.PreemptionArgs, pod: dict) -> dict:
        ask = request_of(pod, self.config, self.fleet)
        if ask.need is None or ask.invalid:  # the cards are not what keeps it out
            return wire.preemption_result(args.victims if not ask.invalid else {})
        chosen = self.source.victims(pod, ask, args.victims)
        meta = pod["metadata"]
        log.info("preempt %s/%s: %s", meta.get("namespace"), meta.get("name"), "; ".join(
            f"{node}: {len(uids)} victim(s)" for node, (uids, _) in sorted(chosen.items()))
            or "no node where evicting lower-priority pods frees the cards")
        return wire.preemption_result(chosen)

    def prioritize(self, body) -> list[dict] | Awaitable[list[dict]]:
        args = wire.extender_args(body)
        zeros = wire.priority_list([(n, 0) for n in args.node_names])
        if not self.synced():
            return zeros
        return self._for_pod("prioritize", args.pod, lambda pod: self._prioritize(args, pod),
                             lambda why: zeros)

    def _prioritize(self, args: wire.ExtenderArgs, pod: dict) -> list[dict]:
        ask = request_of(pod, self.config, self.fleet)
        return wire.priority_list(self.source.scores(pod, ask, args.node_names))

    async def bind(self, body) -> dict:
        b = wire.binding_args(body)
        if not self.synced():
            return wire.binding_result(NOT_SYNCED)
        try:
            return await self._bind(b)
        except Exception as e:  # this pod's: told of, and answered with what raised
            named = {"metadata": {"namespace": b.namespace, "name": b.name, "uid": b.uid}}
            return wire.binding_result(self._raised("bind", named, e))

    async def _bind(self, b: wire.BindingArgs) -> dict:
        who = f"{b.namespace}/{b.name}"
        reserved = self.source.take_reservation(b.uid, b.namespace, b.name, b.node,
                                                time.monotonic())
        if isinstance(reserved, str):
            log.info("bind %s on %s refused: %s", who, b.node, reserved)
            return wire.binding_result(f"node {b.node}: {reserved}")
        if reserved is not None:
            pod, placement = reserved
            return await self._write(b, pod, placement, True)
        pod = await self._pod(b)
        if isinstance(pod, str):
            return wire.binding_result(pod)
        ask = request_of(pod, self.config, self.fleet)
        result = self.source.choose_and_assume(pod, ask, b.node)
        if result is None:
            return wire.binding_result(f"pod {who}: a binding is already being written")
        if isinstance(result, str):
            log.info("bind %s on %s refused: %s", who, b.node, result)
            return wire.binding_result(f"node {b.node}: {result}")
        return await self._write(b, pod, result, ask.request is not None)

    async def _pod(self, b: wire.BindingArgs):
        """The pod to bind, read from the API server (the cache keeps bound pods only)."""
        who = f"{b.namespace}/{b.name}"
        doubt = self.source.in_doubt(b.uid)
        status, pod = await read_pod(self.api, b.namespace, b.name)
        if doubt:
            state = self.source.learn(b.uid, status, pod)
            if state == "bound":
                return f"pod {who} is already bound"
            if state == "unknown":
                return f"pod {who}: the outcome of an earlier binding is unknown"
        return self._checked(b.namespace, b.name, b.uid, status, pod)

    async def _write(self, b: wire.BindingArgs, pod: dict, p: Placement, mthreads: bool) -> dict:
        """Write the binding; its outcome is applied by the binding cycle (the cache's)."""
        who = f"{b.namespace}/{b.name}"
        try:
            body = binding_body(b.namespace, b.name, b.uid, p, time.time_ns(),
                                with_annotations=mthreads)
        except Exception:
            self.source.not_written(p.share)  # nothing is written: the cards are free again
            raise
        try:
            status, message = await post_binding(self.api, body)
        except Exception:  # it may have been written: held until a read tells
            self.source.binding_outcome(p.share, b.namespace, b.name, None, self._reread)
            raise
        outcome, reading = self.source.binding_outcome(p.share, b.namespace, b.name, status,
                                                       self._reread)
        if outcome is Outcome.UNKNOWN:
            log.warning("bind %s: %s; outcome unknown, holding its cards until re-read", who, message)
            return wire.binding_result(f"binding {who}: outcome unknown: {message}")
        if outcome is Outcome.BOUND:
            # at debug, as kube-scheduler logs its binds (--v=2): a line per pod cost some 5% of
            # the extender's CPU in a bench backlog; the cards are in the pod's annotations
            log.debug("bound %s to %s: %s", who, p.node,
                      body["metadata"].get("annotations", {}).get(keys.ALLOCATED, "-"))
            return wire.binding_result()
        if reading is not None:  # gone, or bound by another: read now, before answering
            await reading
        log.info("bind %s: %s", who, message)
        return wire.binding_result(f"binding {who}: {message}")

    async def _reread(self, uid: str, namespace: str, name: str) -> str | None:
        """The binding cycle's re-read of a pod whose binding outcome is unknown: a GET, and
        what the cache learns from it (binding_cycle.BindingCycle.read_answer)."""
        status, pod = 0, None
        try:
            status, pod = await read_pod(self.api, namespace, name)
        finally:  # a read that raised counts as one not answered: the pod is read again
            told = self.source.read_answer(uid, status, pod)
        return told

    async def reread(self, uid: str, namespace: str, name: str) -> str | None:
        """Read a pod whose binding outcome is unknown now: "bound" | "unbound" | "gone" |
        "unknown" (binding_cycle.BindingCycle.read_answer)."""
        return await self.source.reread_now(uid, namespace, name, self._reread)

    async def tend(self) -> None:
        """Until cancelled, on the event loop, every half second: release the reservations
        whose time is up, warn about nodes whose annotations had entries ignored, send the
        events of the objects that raised, and read again the pods whose binding outcome is
        unknown (each every binding_cycle.REREAD_EVERY seconds). A round that raises is
        logged; the next one comes all the same."""
        while True:
            await asyncio.sleep(0.5)
            try:
                await self._tend()
            except Exception:  # not one pod's (a re-read's failure is told of as its pod's)
                log.exception("tending the reservations; going on")

    async def _tend(self) -> None:
        self.source.expire(time.monotonic())
        me = self.config.scheduler_name, socket.gethostname()
        for said in self.source.to_tell():
            log.warning("node %s: %s", said.node, said.message)
            await warn_node(self.api, said.node, said.uid, WARNING_REASON, said.message, *me)
        while self.warnings:
            await warn_object(self.api, *self.warnings.popleft(), *me)
        for uid, namespace, name, reading in self.source.reread_due(self._named_reread):
            try:
                await reading
            except Exception as e:
                named = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
                self.errors.report(INDEX, object_error("pod", named, e))

    def _named_reread(self, uid: str, namespace: str, name: str
                      ) -> tuple[str, str, str, Awaitable[str | None]]:
        return uid, namespace, name, self._reread(uid, namespace, name)


def _count(value) -> int:
    """A requeue count as written in the annotation; anything else counts as 0."""
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0
