"""The allocator's pending pods as gauges: how many wait, why, and since when.

`mthreads_allocator_pending_pods{reason}` counts them by their main reason (the most frequent
one of the last FailedScheduling message, the allocator's fixed set of reasons);
`mthreads_allocator_pending_pod_created_timestamp_seconds{namespace,pod,reason}` has one series
per pending pod (bounded by the pods that wait), for the alert on pods that wait too long and
the dashboard's table. Computed on each scrape: a pod bound or deleted has no series.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..scheduling import reasons
from ..scheduling.pod_status import scheduled_condition
from .card_views import copy_of

WAITING = "NotTriedYet"  # no decision recorded on the pod yet
NO_NODES = "NoNodes"
OTHER = "Other"
KNOWN = frozenset(reasons.ALL) | {reasons.INVALID_REQUEST}

_FIRST = re.compile(r"^0/\d+ nodes are available: \d+ ([^,]+?)[,.]")  # reasons.summary()


def main_reason(pod: dict) -> str:
    """The first (most frequent) reason of the pod's PodScheduled=False message."""
    c = scheduled_condition(pod)
    message = (c.get("message") or "") if c and c.get("status") == "False" else ""
    if not message:
        return WAITING
    if message.startswith(reasons.INVALID_REQUEST):
        return reasons.INVALID_REQUEST
    m = _FIRST.search(message)
    if m is None:
        return NO_NODES if re.match(r"0/\d+ nodes are available\.$", message) else OTHER
    return m.group(1) if m.group(1) in KNOWN else OTHER


def _created(pod: dict) -> float | None:
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


def pending_families(pods: Iterable[dict]) -> list[GaugeMetricFamily]:
    count = GaugeMetricFamily("mthreads_allocator_pending_pods",
                              "Pods waiting for the allocator, by main reason", labels=["reason"])
    since = GaugeMetricFamily("mthreads_allocator_pending_pod_created_timestamp_seconds",
                              "Creation time of each pending pod, Unix seconds",
                              labels=["namespace", "pod", "reason"])
    by_reason: dict[str, int] = {}
    for p in pods:
        reason = main_reason(p)
        by_reason[reason] = by_reason.get(reason, 0) + 1
        created = _created(p)
        if created is not None:
            meta = p["metadata"]
            since.add_metric([meta.get("namespace", ""), meta.get("name", ""), reason], created)
    for reason, n in sorted(by_reason.items()):
        count.add_metric([reason], n)
    return [count, since]


class PendingCollector(Collector):
    def __init__(self, pods: Callable[[], Iterable[dict]]):
        self.pods = pods

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from pending_families(copy_of(self.pods))

    def describe(self):
        return []
