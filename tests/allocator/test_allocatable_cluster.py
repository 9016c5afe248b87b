"""The allocator against the real API server with fake nodes whose capacity and allocatable
change as a device plugin's kubelet changes them: unhealthy cards, a plugin restarting,
capacity growing and shrinking under load, pods that end. Checked with the independent
invariant checker (tests/harness/invariants.py), cards and allocatable."""

from __future__ import annotations

import random

import kubernetes.client as k
import pytest

from tests.allocator.test_cluster import create
from tests.builders import sched_pod as pod
from tests.builders import slice_, whole
from tests.harness.invariants import S4000_MIB, check, check_allocatable
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

VGPU, MEM, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"


def unschedulable(admin, ns, name) -> str | None:
    """The PodScheduled=False message, once the allocator has written one."""
    c = refused(admin, ns, name)
    return c and c["message"]


def caps(node: str, cards: int) -> dict[str, int]:  # S4000 cards
    return {f"{node}-mthreads-{i}": S4000_MIB for i in range(cards)}


def change_seen(alloc, node: str, lines_before: int) -> bool:
    """The allocator has applied a change of the node's cards or allocatable (it logs each)."""
    return alloc.log().count(f"node {node}: now ") > lines_before


def on(fleet, *containers, name):
    return pod(*containers, name=name, spec={"nodeSelector": fleet.selector})


@pytest.mark.parametrize("resource, lowered, container, fit, total", [
    (MEM, {MEM: "96"}, lambda: slice_(32, name="a"), 3, 5),
    (CORE, {CORE: "16"}, lambda: slice_(8, 8, name="a"), 2, 4),
    (VGPU, {VGPU: "2"}, lambda: slice_(8, 2, name="a"), 2, 4),
])
def test_lowered_allocatable_bounds_each_resource_until_restored(
        admin, fleet, namespace, start_allocator, resource, lowered, container, fit, total):
    """Two cards, one reported unhealthy: the cards would take all the pods, allocatable
    takes `fit`; the rest wait with kube-scheduler's reason and bind once it is restored."""
    node, = fleet(2, 96)
    full = mthreads_resources(2, 96, count=8)  # this node's plugin lists the count too
    set_node_resources(admin, node, capacity=full, allocatable={**full, **lowered})
    start_allocator()
    names = [create(admin, namespace, on(fleet, container(), name=f"p{i}"))["metadata"]["name"]
             for i in range(total)]
    wait_for(lambda: all(bound_pod(admin, namespace, n) or unschedulable(admin, namespace, n)
                         for n in names), 60, what="every pod bound or reported")
    placed = [n for n in names if bound_pod(admin, namespace, n)]
    assert len(placed) == fit
    for n in set(names) - set(placed):
        assert f"1 Insufficient {resource}" in unschedulable(admin, namespace, n)
    pods = list_pods(admin, namespace)
    assert check_allocatable(pods, [read_node(admin, node)])[node][resource] == int(lowered[resource])
    check(pods, caps(node, 2))
    set_node_resources(admin, node, allocatable=full)  # the card is healthy again
    wait_for(lambda: all(bound_pod(admin, namespace, n) for n in names), 60,
             what="the waiting pods bound once allocatable is restored")
    pods = list_pods(admin, namespace)
    check_allocatable(pods, [read_node(admin, node)])
    check(pods, caps(node, 2))


def test_a_card_failing_under_running_pods_then_the_plugin_restarting(
        admin, fleet, namespace, start_allocator):
    node, = fleet(2, 96)
    alloc = start_allocator()
    running = [create(admin, namespace, on(fleet, slice_(32, 4, name="a"), name=f"r{i}"))["metadata"]["name"]
               for i in range(4)]
    for n in running:
        wait_for(lambda n=n: bound_pod(admin, namespace, n), 30, what=f"{n} bound")
    # a card fails under them: 128 units bound, 96 allocatable. Nothing is evicted, nothing new binds.
    seen = alloc.log().count(f"node {node}: now ")
    set_node_resources(admin, node, allocatable=mthreads_resources(1, 96))
    wait_for(lambda: change_seen(alloc, node, seen), 30, what="the allocator seeing the card fail")
    create(admin, namespace, on(fleet, slice_(8, name="a"), name="late"))
    message = wait_for(lambda: unschedulable(admin, namespace, "late"), 30, what="late reported")
    assert f"1 Insufficient {MEM}" in message
    assert all(bound_pod(admin, namespace, n)["spec"]["nodeName"] == node for n in running)
    check_allocatable(list_pods(admin, namespace), [read_node(admin, node)], bound_before=set(running))
    end_pod(admin, namespace, running[0])  # 96 bound: still no room for 8 more
    end_pod(admin, namespace, running[1])  # 64 bound: room
    wait_for(lambda: bound_pod(admin, namespace, "late"), 30, what="late bound once pods ended")
    check_allocatable(list_pods(admin, namespace), [read_node(admin, node)], bound_before=set(running))
    # the device plugin restarts: it reports nothing, then everything again
    seen = alloc.log().count(f"node {node}: now ")
    zero = {MEM: "0", CORE: "0"}
    set_node_resources(admin, node, capacity=zero, allocatable=zero)
    wait_for(lambda: change_seen(alloc, node, seen), 30, what="the allocator seeing no cards")
    create(admin, namespace, on(fleet, slice_(8, name="a"), name="after"))
    message = wait_for(lambda: unschedulable(admin, namespace, "after"), 30, what="after reported")
    assert "1 NodeInsufficientDevice" in message
    full = mthreads_resources(2, 96)
    set_node_resources(admin, node, capacity=full, allocatable=full)
    wait_for(lambda: bound_pod(admin, namespace, "after"), 30,
             what="after bound once the plugin reports its cards, without a restart")
    assert alloc.running()
    pods = list_pods(admin, namespace)
    check_allocatable(pods, [read_node(admin, node)])
    check(pods, caps(node, 2))


def test_a_node_whose_capacity_is_not_whole_cards_is_named(admin, fleet, namespace, start_allocator):
    node, = fleet(2, 96)
    alloc = start_allocator()
    set_node_resources(admin, node, capacity={CORE: "40"}, allocatable={CORE: "40"})
    why = f"{CORE}=40 is not a multiple of 16"
    wait_for(lambda: f"node {node}: {why}" in alloc.log(), 30, what="the node named in the log")
    create(admin, namespace, on(fleet, slice_(8, name="a"), name="p"))
    message = wait_for(lambda: unschedulable(admin, namespace, "p"), 30, what="p reported")
    assert f"1 NodeCardsInconsistent ({node}: {why})" in message
    set_node_resources(admin, node, capacity={CORE: "32"}, allocatable={CORE: "32"})
    wait_for(lambda: bound_pod(admin, namespace, "p"), 30, what="p bound once the capacity reads as cards")


def test_capacity_growing_and_shrinking_under_load(admin, fleet, namespace, start_allocator):
    """Six changes of the node's cards and allocatable (grown, shrunk under bound pods, some
    cards unhealthy), each with a few pods created and a few ending. After each: no card
    over-committed, and a node that took a pod under its present allocatable is within it."""
    rng = random.Random(13)
    node, = fleet(2, 96)
    alloc = start_allocator()
    steps = [(4, 0), (1, 0), (4, 1), (3, 0), (2, 2), (4, 0)]  # (cards, of them unhealthy)
    create(admin, namespace, on(fleet, slice_(2, name="a"), name="probe"))
    wait_for(lambda: bound_pod(admin, namespace, "probe"), 30, what="the allocator deciding (listed)")
    made = 0
    for cards, down in steps:
        seen = alloc.log().count(f"node {node}: now ")
        set_node_resources(admin, node, capacity=mthreads_resources(cards, 96),
                           allocatable=mthreads_resources(cards - down, 96))
        wait_for(lambda: change_seen(alloc, node, seen), 30, what=f"the allocator seeing {cards} cards")
        pods = list_pods(admin, namespace)
        before = {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}
        running = sorted(p["metadata"]["name"] for p in pods
                         if p["spec"].get("nodeName") and p["status"].get("phase") == "Pending")
        for n in rng.sample(running, min(2, len(running))):
            end_pod(admin, namespace, n, rng.choice(["Succeeded", "Failed"]))
        names = []
        for _ in range(4):
            c = rng.choice([lambda: slice_(rng.choice([8, 16, 32, 64]), rng.choice([None, 2, 4, 8]), name="a"),
                            lambda: whole(1, 96, name="a")])()
            names.append(create(admin, namespace, on(fleet, c, name=f"l{made}"))["metadata"]["name"])
            made += 1
        wait_for(lambda: all(bound_pod(admin, namespace, n) or unschedulable(admin, namespace, n)
                             for n in names), 60, what="the step's pods bound or reported")
        pods = list_pods(admin, namespace)
        check(pods, caps(node, 4))
        check_allocatable(pods, [read_node(admin, node)], bound_before=before)
        waiting = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        for n in waiting:  # the next change is made with no pod waiting
            k.CoreV1Api(admin).delete_namespaced_pod(n, namespace, grace_period_seconds=0)
        wait_for(lambda: all(p["spec"].get("nodeName") for p in list_pods(admin, namespace)), 30,
                 what="the waiting pods gone")
    assert made == 24 and alloc.running()  # bounded: six steps of four pods


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_pod_that_ends_frees_its_card_for_the_next(admin, fleet, namespace, start_allocator, phase):
    node, = fleet(1, 96)
    start_allocator()
    create(admin, namespace, on(fleet, whole(1, 96, name="a"), name="first"))
    wait_for(lambda: bound_pod(admin, namespace, "first"), 30, what="first bound")
    create(admin, namespace, on(fleet, whole(1, 96, name="a"), name="next"))
    message = wait_for(lambda: unschedulable(admin, namespace, "next"), 30, what="next reported")
    assert "1 ExclusiveDeviceAllocateConflict" in message
    end_pod(admin, namespace, "first", phase)  # as the kubelet writes it: pods/status
    p = wait_for(lambda: bound_pod(admin, namespace, "next"), 30, what="next bound once first ended")
    assert p["spec"]["nodeName"] == node
    pods = list_pods(admin, namespace)
    assert check(pods, caps(node, 1))[f"{node}-mthreads-0"][2] == 1
    check_allocatable(pods, [read_node(admin, node)])
