"""Two allocator processes: only the Lease holder binds; the standby takes over when the leader
is SIGKILLed (after the 15 s lease runs out) or at once when it is stopped with SIGTERM."""

from __future__ import annotations

import time

import pytest

from tests.builders import sched_pod as pod
from tests.builders import slice_
from tests.harness.kube import bound_pod
from tests.harness.wait import wait_for

from .test_cluster import create

pytestmark = pytest.mark.cluster


def test_only_the_holder_binds_and_standby_takes_over(admin, fleet, namespace, start_allocator):
    fleet(4, 96)
    a = start_allocator("a")
    a.wait_leading()
    b = start_allocator("b")
    b.wait_healthy()
    for i in range(6):
        create(admin, namespace, pod(slice_(4, 1, name="a"), name=f"x{i}"))
    for i in range(6):
        wait_for(lambda i=i: bound_pod(admin, namespace, f"x{i}"), 30, what=f"x{i} bound")
    allocated = "mthreads_allocator_pods_allocated_total"
    assert a.metric(allocated) == 6 and b.metric(allocated) == 0
    a.kill()
    killed = time.monotonic()
    create(admin, namespace, pod(slice_(4, 1, name="a"), name="after-kill"))
    wait_for(lambda: bound_pod(admin, namespace, "after-kill"), 30, interval=0.1, what="takeover")
    takeover = time.monotonic() - killed
    print(f"takeover after SIGKILL: {takeover:.1f}s")
    assert 10 < takeover < 22  # never before the dead leader's lease could have run out
    assert b.metric(allocated) >= 1
    c = start_allocator("c")
    c.wait_healthy()
    stopped = time.monotonic()
    assert b.stop() == 0
    create(admin, namespace, pod(slice_(4, 1, name="a"), name="after-term"))
    wait_for(lambda: bound_pod(admin, namespace, "after-term"), 15, interval=0.1, what="handover")
    handover = time.monotonic() - stopped
    print(f"handover after SIGTERM: {handover:.1f}s")
    assert handover < 6
