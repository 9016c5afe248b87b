"""kube-scheduler with the extender, against the test API server: a pod that ends (its status
written through pods/status, as its kubelet writes it) frees its card for the next, and a node's
lowered allocatable bounds what the extender's filter lets through."""

from __future__ import annotations

import pytest

from tests.builders import sched_pod as pod
from tests.builders import slice_, whole
from tests.extender.test_scheduler import create
from tests.harness.invariants import check, check_allocatable
from tests.harness.kube import (
    bound_pod,
    end_pod,
    list_pods,
    mthreads_resources,
    read_node,
    refused,
    set_node_resources,
)
from tests.harness.wait import wait_for

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_pod_that_ends_frees_its_card_for_the_next(stack, admin, fleet, namespace, phase):
    node, = fleet(1, 96)
    first = create(admin, namespace, pod(whole(1, 96, name="a"), name="first"), fleet.selector)
    wait_for(lambda: bound_pod(admin, namespace, first), 60, what="first bound")
    nxt = create(admin, namespace, pod(whole(1, 96, name="a"), name="next"), fleet.selector)
    c = wait_for(lambda: refused(admin, namespace, nxt), 60, what="next unschedulable")
    assert "ExclusiveDeviceAllocateConflict" in c["message"]
    end_pod(admin, namespace, first, phase)
    p = wait_for(lambda: bound_pod(admin, namespace, nxt), 90, what="next bound once first ended")
    assert p["spec"]["nodeName"] == node
    assert check(list_pods(admin, namespace), {f"{node}-mthreads-0": 96 * 512})[f"{node}-mthreads-0"][2] == 1


def test_lowered_allocatable_bounds_the_filter(stack, admin, fleet, namespace):
    node, = fleet(2, 96)
    full = mthreads_resources(2, 96)
    set_node_resources(admin, node, allocatable=mthreads_resources(1, 96))  # one card unhealthy
    names = [create(admin, namespace, pod(slice_(64, 4, name="a"), name=f"p{i}"), fleet.selector)
             for i in range(2)]
    wait_for(lambda: all(bound_pod(admin, namespace, n) or refused(admin, namespace, n) for n in names),
             60, what="both pods bound or unschedulable")
    placed = [n for n in names if bound_pod(admin, namespace, n)]
    assert len(placed) == 1
    waiting, = set(names) - set(placed)
    assert "Insufficient mthreads.com/sgpu-memory" in refused(admin, namespace, waiting)["message"]
    check_allocatable(list_pods(admin, namespace), [read_node(admin, node)])
    set_node_resources(admin, node, allocatable=full)
    wait_for(lambda: bound_pod(admin, namespace, waiting), 90, what="the second bound once restored")
