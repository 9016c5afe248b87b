"""Telling users why a pod waits: the PodScheduled condition and a FailedScheduling event.

The writes run on the I/O loop (kube/io_loop.py), one at a time, so the decision thread
never waits on them: `unschedulable` and `forget` only queue work; a pod reported again before
its last report was written is written once, with the newest message.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict

from .api import Api, ApiError
from .events import EventBook, event_body, now_text
from .io_loop import IoLoop, io_loop

log = logging.getLogger(__name__)


def _says_unschedulable(pod: dict, message: str) -> bool:
    """Whether the pod's PodScheduled condition already says Unschedulable with `message`."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return c.get("status") == "False" and c.get("reason") == "Unschedulable" \
                and c.get("message") == message
    return False


async def warn_object(api: Api, involved: dict, reason: str, message: str, component: str,
                      instance: str) -> None:
    """Post a Warning event on `involved` (an event's involvedObject: `kubectl describe` of the
    object shows it); a refusal is logged."""
    body = event_body(involved, reason, message, component, instance)
    what = f"{involved['kind'].lower()} {involved['name']}"
    try:
        reply = await api.call("POST", f"/api/v1/namespaces/{body['metadata']['namespace']}/events",
                               body=body)
    except ApiError as e:
        log.warning("event for %s: %s", what, e)
        return
    if not reply.ok:
        log.warning("event for %s: %s", what, reply.message())


async def warn_node(api: Api, node: str, uid: str, reason: str, message: str, component: str,
                    instance: str) -> None:
    """A Warning event on a node (in `default`, as the kubelet's)."""
    await warn_object(api, {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
                      reason, message, component, instance)


class Reporter:
    def __init__(self, api: Api, component: str, instance: str, io: IoLoop | None = None):
        self.api, self.component, self.instance = api, component, instance
        self.io = io or io_loop()
        self.book = EventBook()  # the I/O loop's only
        self._lock = threading.Lock()
        # uid -> (forget what was reported first?, the newest report or None)
        self._work: OrderedDict[str, tuple[bool, tuple[dict, str] | None]] = OrderedDict()
        self._wake: asyncio.Event | None = None  # made on the I/O loop
        self._woken = False  # a wake-up is on its way to the loop
        self._stopped = False
        self._writing = self.io.submit(self._run())

    def unschedulable(self, pod: dict, message: str) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            forget, _ = self._work.pop(uid, (False, None))
            self._work[uid] = (forget, (pod, message))
        self._wake_up()

    def forget(self, uid: str) -> None:
        with self._lock:
            self._work.pop(uid, None)
            self._work[uid] = (True, None)
        self._wake_up()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped = True
        self.io.call_soon(self._set_wake)
        try:
            self._writing.result(timeout)
        except Exception:  # timed out, or the loop's end: nothing more to write
            pass

    def idle(self) -> bool:
        with self._lock:
            return not self._work

    def _wake_up(self) -> None:
        with self._lock:
            if self._woken:
                return
            self._woken = True
        self.io.call_soon(self._set_wake)

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        self._wake = asyncio.Event()
        while not self._stopped:
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)
            except TimeoutError:
                pass
            self._wake.clear()
            with self._lock:
                self._woken = False
            while not self._stopped:
                with self._lock:
                    if not self._work:
                        break
                    uid, (forget, report) = self._work.popitem(last=False)
                if forget:
                    self.book.forget(uid)
                if report is not None:
                    await self.write(*report)

    async def write(self, pod: dict, message: str) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        try:
            await self._condition(pod, message)
            action = self.book.note(uid, message, time.monotonic())
            if action == "create":
                await self._create_event(pod, message)
                log.info("unschedulable %s/%s: %s", ns, name, message)
            elif action == "patch":
                await self._patch_event(ns, uid)
        except ApiError as e:
            log.warning("reporting %s/%s: %s", ns, name, e)

    async def _condition(self, pod: dict, message: str) -> None:
        if _says_unschedulable(pod, message):
            return  # already says so: no write
        meta = pod["metadata"]
        patch = {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message, "lastProbeTime": None, "lastTransitionTime": now_text()}]}}
        reply = await self.api.call("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/"
                              f"{meta['name']}/status", body=patch,
                              content_type="application/strategic-merge-patch+json")
        if not reply.ok and reply.status != 404:
            log.warning("condition on %s/%s: %s", meta["namespace"], meta["name"], reply.message())

    async def _create_event(self, pod: dict, message: str) -> None:
        meta = pod["metadata"]
        ns = meta["namespace"]
        body = event_body({"apiVersion": "v1", "kind": "Pod", "namespace": ns,
                           "name": meta["name"], "uid": meta["uid"],
                           "resourceVersion": meta.get("resourceVersion")},
                          "FailedScheduling", message, self.component, self.instance)
        reply = await self.api.call("POST", f"/api/v1/namespaces/{ns}/events", body=body)
        if reply.ok:
            self.book.written(meta["uid"], body["metadata"]["name"], time.monotonic())
        else:
            log.warning("event for %s/%s: %s", ns, meta["name"], reply.message())

    def node_warning(self, node: str, uid: str, reason: str, message: str) -> None:
        """A Warning event on a node, written on the I/O loop (not queued with the pods')."""
        self.io.submit(warn_node(self.api, node, uid, reason, message, self.component,
                                 self.instance))

    def warning(self, involved: dict, reason: str, message: str) -> None:
        """A Warning event on any object (an event's involvedObject), as `node_warning`."""
        self.io.submit(warn_object(self.api, involved, reason, message, self.component,
                                   self.instance))

    async def _patch_event(self, ns: str, uid: str) -> None:
        t = self.book.by_pod[uid]
        reply = await self.api.call("PATCH", f"/api/v1/namespaces/{ns}/events/{t.name}",
                              body={"count": t.count, "lastTimestamp": now_text()},
                              content_type="application/merge-patch+json")
        self.book.written(uid, None, time.monotonic())
        if not reply.ok:
            log.warning("event %s/%s: %s", ns, t.name, reply.message())
