"""The pending pods' gauges: the main reason read from the allocator's own message."""

from __future__ import annotations

import pytest

from tests.builders import sched_pod as pod
from tests.builders import slice_
from webhook.metrics.pending_metrics import NO_NODES, OTHER, WAITING, main_reason, pending_families
from webhook.scheduling import reasons


def waiting(message: str | None, name: str = "p", created: str = "2026-01-01T00:00:00Z") -> dict:
    p = pod(slice_(2), name=name, namespace="ns")
    p["metadata"]["creationTimestamp"] = created
    if message is not None:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                      "reason": "Unschedulable", "message": message}]
    return p


@pytest.mark.parametrize("message, reason", [
    (reasons.summary(3, {reasons.INSUFFICIENT_CARD_MEMORY: 2, reasons.UNSCHEDULABLE: 1}),
     reasons.INSUFFICIENT_CARD_MEMORY),
    (reasons.summary(3, {reasons.AFFINITY: 3}), reasons.AFFINITY),
    (reasons.summary(2, {reasons.INSUFFICIENT_CPU: 1, reasons.TYPE_MISMATCH: 1}),
     reasons.TYPE_MISMATCH),  # a tie: alphabetical, as the message lists them
    (reasons.summary(0, {}), NO_NODES),
    (f"{reasons.INVALID_REQUEST}: the pod breaks admission rule 4: ...", reasons.INVALID_REQUEST),
    ("something another scheduler wrote", OTHER),
    (None, WAITING),
])
def test_main_reason(message, reason):
    assert main_reason(waiting(message)) == reason


def test_families_count_by_reason_and_date_each_pod():
    full = reasons.summary(1, {reasons.INSUFFICIENT_CARD_MEMORY: 1})
    count, since = pending_families([waiting(full, "a"), waiting(full, "b"), waiting(None, "c")])
    assert {s.labels["reason"]: s.value for s in count.samples} == \
        {reasons.INSUFFICIENT_CARD_MEMORY: 2, WAITING: 1}
    assert {(s.labels["pod"], s.labels["reason"]): s.value for s in since.samples} == {
        ("a", reasons.INSUFFICIENT_CARD_MEMORY): 1767225600.0,
        ("b", reasons.INSUFFICIENT_CARD_MEMORY): 1767225600.0, ("c", WAITING): 1767225600.0}
    assert [f.samples for f in pending_families([])] == [[], []]
