"""No pod stops the extender (issue 46, finding 2), with kube-scheduler on the real API
server: a bound pod that raises while indexed in the extender's first list and in its watch,
and a pending pod whose /filter raises, among ordinary pods that still bind. The raising
object is a pod asking `ephemeral-storage: "1e1000000"` (decimal.Overflow in today's quantity
parser: the pod watch's list raised, its informer ended and the extender never became
ready; a filter answered 500 with a traceback). Once the parsers are fixed that pod no longer
raises and the test checks only that it is harmless (tests/extender/test_failures.py makes
pods raise whatever the parsers do)."""

from __future__ import annotations

import urllib.request

import pytest

from tests.allocator.test_cluster_boundary import HUGE, asking, errors
from tests.builders import sched_pod as pod
from tests.builders import slice_
from tests.extender.test_scheduler import create
from tests.harness.allocator import ALLOCATOR_USER
from tests.harness.extender import start_stack
from tests.harness.kube import ADMIN, bound_pod, warning_events
from tests.harness.wait import wait_for

pytestmark = pytest.mark.cluster


def test_a_huge_quantity_stops_no_verb_and_no_watch(kube_cluster, admin, fleet, namespace, tmp_path):
    # The huge pods bound to `node` fill its ephemeral storage: kube-scheduler 1.20, and the
    # allocator with it, then refuse any pod there (it compares the requested sum with the
    # allocatable even for a pod asking none), so the ordinary pods bind on `spare`.
    node, spare = fleet(2, 96, count=2)
    sel = fleet.selector
    create(admin, namespace, asking(pod(slice_(8, 2, name="a"), name="listed-bound", node=node),
                                    HUGE), sel)
    extender, scheduler = start_stack(kube_cluster, tmp_path, ALLOCATOR_USER, ADMIN)
    try:
        wait_for(scheduler.healthy, 60, what="kube-scheduler /healthz")
        create(admin, namespace, asking(pod(slice_(8, 2, name="a"), name="watched-bound",
                                            node=node), HUGE), sel)
        create(admin, namespace, asking(pod(slice_(8, 2, name="a"), name="pending"), HUGE), sel)
        names = [create(admin, namespace, pod(slice_(8, 2, name="a"), name=f"ok-{i}"), sel)
                 for i in range(3)]
        for name in names:
            wait_for(lambda name=name: bound_pod(admin, namespace, name), 30, what=f"{name} bound")
        assert extender.running() and extender.healthy()
        log = extender.log()
        assert "Traceback" not in log
        page = urllib.request.urlopen(extender.health_url.replace("/readyz", "/metrics"),
                                      timeout=5).read().decode()
        counted = errors(page)
        if counted.get("index") or counted.get("filter"):  # today's parser: each told of
            for name, reason in (("listed-bound", "IndexingError"),
                                 ("watched-bound", "IndexingError"), ("pending", "SchedulingError")):
                wait_for(lambda name=name: warning_events(admin, namespace, name), 10,
                         what=f"the event on {name}")
                # (beside kube-scheduler's FailedScheduling, which quotes the filter's error)
                told = warning_events(admin, namespace, name)
                assert [r for r, _ in told if r != "FailedScheduling"] == [reason]
                assert f"pod {namespace}/{name} (uid " in log
            assert bound_pod(admin, namespace, "pending") is None
            assert any("Overflow" in m for r, m in told if r == "FailedScheduling")
    finally:
        scheduler.stop()
        extender.stop()
        print(f"--- extender (tail) ---\n{extender.tail(30)}")
