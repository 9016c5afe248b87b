"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules and timings.

A standby takes the lease only after it has seen the record unchanged for a whole lease
duration (measured on its own monotonic clock, never comparing clocks across machines).
The leader renews every retry period; when it has not renewed for the renew deadline it
stops deciding (`holds()` turns false), which is before any standby may take over.

The requests run on the I/O loop (kube/io_loop.py); `holds()` and `changed` are for any thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime, timezone

from .api import Api, ApiError
from .io_loop import IoLoop, io_loop

log = logging.getLogger(__name__)

LEASE_NAME = "mthreads-allocator"
LEASE_SECONDS = 15
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0


def micro_time(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: Api, namespace: str, identity: str, clock=time.monotonic,
                 lease_seconds: float = LEASE_SECONDS, renew_deadline: float = RENEW_DEADLINE,
                 retry_period: float = RETRY_PERIOD, io: IoLoop | None = None):
        self.api, self.namespace, self.identity = api, namespace, identity
        self.io = io or io_loop()
        self.clock = clock
        self.lease_seconds, self.renew_deadline, self.retry_period = \
            lease_seconds, renew_deadline, retry_period
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE_NAME}"
        self._renewed_at: float | None = None  # monotonic time a successful write was sent
        self._observed: tuple | None = None  # (holder, renewTime, transitions) last seen
        self._observed_at = 0.0
        self._lock: asyncio.Lock | None = None  # made on the I/O loop: one exchange at a time
        self.changed = threading.Event()  # set whenever holds() may have changed

    def holds(self) -> bool:
        """True while we are the leader and renewed within the renew deadline."""
        at = self._renewed_at
        return at is not None and self.clock() - at < self.renew_deadline

    def run(self, stop: threading.Event) -> None:
        """Take and renew the lease on the I/O loop until `stop` is set; returns once the
        renewing has ended (so a `release` after it is the last write)."""
        renewing = self.io.run(self._start_renewing())
        stop.wait()
        self.io.run(self._stop_renewing(renewing))

    async def _start_renewing(self) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(self._renew())

    @staticmethod
    async def _stop_renewing(renewing: asyncio.Task) -> None:
        renewing.cancel()
        try:
            await renewing
        except asyncio.CancelledError:
            pass

    async def _renew(self) -> None:
        while True:
            was = self.holds()
            try:
                await self._try_acquire_or_renew()
            except ApiError as e:
                log.warning("lease: %s", e)
            if was and not self.holds():
                log.warning("lease: lost (not renewed within %.0fs); stopped deciding",
                            self.renew_deadline)
                self._renewed_at = None
            if was != self.holds():
                self.changed.set()
            await asyncio.sleep(self.retry_period)

    def _spec(self, old: dict | None, acquiring: bool) -> dict:
        now = micro_time()
        spec = dict((old or {}).get("spec") or {})
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.lease_seconds),
                    renewTime=now)
        if acquiring:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if old else 0)
        return spec

    def _exchange(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def try_acquire_or_renew(self) -> bool:
        """One try, waited for (on the I/O loop): whether we hold the lease now."""
        return self.io.run(self._try_acquire_or_renew())

    async def _try_acquire_or_renew(self) -> bool:
        async with self._exchange():
            sent = self.clock()
            reply = await self.api.call("GET", self.path)
            if reply.status == 404:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": LEASE_NAME, "namespace": self.namespace},
                        "spec": self._spec(None, True)}
                created = await self.api.call("POST", self.path.rsplit("/", 1)[0], body=body)
                if created.ok:
                    self._became(sent)
                    log.info("lease: created %s/%s as %s", self.namespace, LEASE_NAME, self.identity)
                    return True
                if created.status != 409:
                    raise ApiError(f"create lease: {created.message()}")
                return False
            if not reply.ok or reply.body is None:
                raise ApiError(f"get lease: {reply.message()}")
            lease = reply.body
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
            if record != self._observed:
                self._observed, self._observed_at = record, sent
            ours = holder == self.identity
            expired = self._observed_at + float(spec.get("leaseDurationSeconds") or
                                                self.lease_seconds) <= sent
            if holder and not ours and not expired:
                self._renewed_at = None
                return False
            lease["spec"] = self._spec(lease, acquiring=not ours)
            updated = await self.api.call("PUT", self.path, body=lease)  # resourceVersion guards races
            if not updated.ok:
                if updated.status != 409:  # 409: someone else wrote first
                    raise ApiError(f"update lease: {updated.message()}")
                return False
            if not ours:
                log.info("lease: acquired %s/%s as %s", self.namespace, LEASE_NAME, self.identity)
            self._became(sent)
            return True

    def _became(self, sent: float) -> None:
        was = self.holds()
        self._renewed_at = sent
        if not was:
            self.changed.set()

    def release(self) -> None:
        """Give the lease up at once (holder empty) so a standby need not wait for it to expire."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        self.changed.set()
        self.io.run(self._release())

    async def _release(self) -> None:
        try:
            async with self._exchange():
                reply = await self.api.call("GET", self.path)
                if not reply.ok or reply.body is None:
                    return
                lease = reply.body
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") != self.identity:
                    return
                spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time())
                lease["spec"] = spec
                await self.api.call("PUT", self.path, body=lease)
                log.info("lease: released")
        except ApiError as e:
            log.warning("lease: release failed: %s", e)
