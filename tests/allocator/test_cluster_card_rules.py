"""A cordoned card and a card's limit of containers, with the allocator as a real process
against the real API server: the node annotations as an operator writes them with kubectl."""

from __future__ import annotations

import kubernetes.client as k
import pytest

from tests.builders import sched_pod as pod
from tests.builders import slice_
from tests.harness.kube import bound_pod, list_pods
from tests.harness.wait import wait_for
from tests.metrics.cluster import create, wait_bound, wait_unschedulable

pytestmark = pytest.mark.cluster

CORDON, LIMIT = "hami.io/device-cordon", "mthreads.com/max-instances-per-card"
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"


def annotate(admin, node: str, annotations: dict) -> None:
    """What `kubectl annotate node` writes (None removes the key)."""
    k.CoreV1Api(admin).patch_node(node, {"metadata": {"annotations": annotations}})


def card_of(p: dict) -> str:
    return p["metadata"]["annotations"][ALLOCATED].split(",")[0]


def seen_cordoned(alloc, node: str, cards: int) -> None:
    """Until the allocator's cache shows the node's cordon (its metric): the node and pod
    watches are two streams, so a pod made next could otherwise be decided first."""
    wait_for(lambda: alloc.metric(f'mthreads_node_cards_cordoned{{node="{node}"}}') == cards, 30,
             what=f"the allocator seeing {cards} card(s) of {node} cordoned")


def node_warnings(admin, node: str) -> list | None:
    """The node's InvalidCardAnnotation Warning events; None while there is none."""
    found = [e for e in k.CoreV1Api(admin).list_namespaced_event("default").items
             if e.involved_object.kind == "Node" and e.involved_object.name == node
             and e.reason == "InvalidCardAnnotation"]
    return found or None


def pinned(fleet, *containers, name):
    return pod(*containers, name=name, spec={"nodeSelector": fleet.selector})


def bound_among(admin, namespace: str, names: list[str]) -> list[dict]:
    return [p for p in (bound_pod(admin, namespace, n) for n in names) if p]


def test_a_cordoned_card_takes_nothing_new_keeps_its_pods_and_takes_again_when_uncordoned(
        admin, fleet, namespace, start_allocator):
    node, = fleet(2, 96)
    card0, card1 = f"{node}-mthreads-0", f"{node}-mthreads-1"
    alloc = start_allocator()
    first = [create(admin, namespace, pinned(fleet, slice_(32, 4, name="c"), name=f"first-{i}"))
             for i in range(2)]
    assert {card_of(wait_bound(admin, namespace, n)) for n in first} == {card0, card1}  # spread
    annotate(admin, node, {CORDON: card0})
    seen_cordoned(alloc, node, 1)
    # three more: card 1 has room for two of them; none goes to the cordoned card
    later = [create(admin, namespace, pinned(fleet, slice_(32, 4, name="c"), name=f"later-{i}"))
             for i in range(3)]
    wait_for(lambda: len(bound_among(admin, namespace, later)) == 2, 60, what="two later pods bound")
    assert {card_of(p) for p in bound_among(admin, namespace, later)} == {card1}
    waiting, = [n for n in later if not bound_pod(admin, namespace, n)]
    assert "1 CardInsufficientMemory" in wait_unschedulable(admin, namespace, waiting)["message"]
    annotate(admin, node, {CORDON: f"{card0},{card1}"})  # every card: the reason says so
    wait_for(lambda: "1 CardCordoned" in wait_unschedulable(admin, namespace, waiting)["message"],
             60, what="the waiting pod's reason CardCordoned")
    for n in first + [p["metadata"]["name"] for p in bound_among(admin, namespace, later)]:
        p = bound_pod(admin, namespace, n)  # the pods already there stay
        assert p is not None and not p["metadata"].get("deletionTimestamp")
    annotate(admin, node, {CORDON: None})  # uncordoned: the waiting pod goes to card 0 at once
    assert card_of(wait_bound(admin, namespace, waiting, timeout=30)) == card0


def test_a_malformed_cordon_is_told_once_on_the_node_and_its_good_entries_count(
        admin, fleet, namespace, start_allocator):
    node, = fleet(2, 96)
    alloc = start_allocator()
    annotate(admin, node, {CORDON: f"{node}-mthreads-0,,other-mthreads-1"})
    seen_cordoned(alloc, node, 1)
    p = wait_bound(admin, namespace, create(admin, namespace, pinned(fleet, slice_(8, 2, name="c"),
                                                                        name="p")))
    assert card_of(p) == f"{node}-mthreads-1"  # the valid entry is honoured

    (event,) = wait_for(lambda: node_warnings(admin, node), 30, what="the Warning event on the node")
    assert event.type == "Warning" and event.source.component == "hami-scheduler"
    assert event.message == ("hami.io/device-cordon: ignored '' (an empty item), 'other-mthreads-1' "
                             f"(not a card of {node}: <node>-mthreads-<index>)")
    annotate(admin, node, {"unrelated": "x"})  # the node changes, the cordon does not
    create(admin, namespace, pinned(fleet, slice_(8, 2, name="c"), name="q"))
    wait_bound(admin, namespace, "q")
    assert len(node_warnings(admin, node)) == 1  # once per change


def test_memory_only_slices_stop_at_the_card_s_limit(admin, fleet, namespace, start_allocator):
    """20 slices of 2 units and no cores on a one-card S4000 (room for 48 by memory): 16 bind,
    the maxInstancesPerCard default, and the rest wait with CardTimeSlicingExhausted."""
    node, = fleet(1, 96)
    alloc = start_allocator()
    names = [create(admin, namespace, pinned(fleet, slice_(2, name="c"), name=f"s{i:02d}"))
             for i in range(20)]
    wait_for(lambda: sum(bool(bound_pod(admin, namespace, n)) for n in names) >= 16, 60,
             what="16 slices bound")
    waiting = [n for n in names if not bound_pod(admin, namespace, n)]
    assert len(waiting) == 4
    for n in waiting:
        assert "1 CardTimeSlicingExhausted" in wait_unschedulable(admin, namespace, n)["message"]
    held = [p for p in list_pods(admin, namespace) if p["spec"].get("nodeName") == node]
    assert len(held) == 16 and {card_of(p) for p in held} == {f"{node}-mthreads-0"}
    assert sum(int(p["metadata"]["annotations"][ALLOCATED].split(",")[2]) for p in held) == 16 * 1024
    card = f"{node}-mthreads-0"
    labels = f'device_index="0",device_type="Mthreads",device_uuid="{card}",node="{node}"'
    wait_for(lambda: alloc.metric(f'hami_gpu_shared_count{{{labels},zone="vGPU"}}') == 16,
             30, what="the metric of the containers on the card")  # (labels sorted, as exposed)
    assert alloc.metric(f'mthreads_card_containers_limit{{device_index="0",device_uuid="{card}",'
                        f'node="{node}"}}') == 16
    # The node says 4: nothing is evicted, and a container that leaves frees no instance.
    annotate(admin, node, {LIMIT: "4"})
    wait_for(lambda: alloc.metric(f'mthreads_card_containers_limit{{device_index="0",device_uuid='
                                  f'"{card}",node="{node}"}}') == 4, 30, what="the limit of 4 seen")
    refused = 'mthreads_allocator_failures_total{reason="CardTimeSlicingExhausted"}'
    before = alloc.metric(refused)
    k.CoreV1Api(admin).delete_namespaced_pod(held[0]["metadata"]["name"], namespace,
                                             grace_period_seconds=0)
    wait_for(lambda: alloc.metric(refused) >= before + len(waiting), 90,
             what="the waiting pods decided again after the delete")
    on_node = [p for p in list_pods(admin, namespace) if p["spec"].get("nodeName") == node]
    assert len(on_node) == 15
    annotate(admin, node, {LIMIT: None})  # back to maxInstancesPerCard: one more, and no more
    wait_for(lambda: sum(bool(bound_pod(admin, namespace, n)) for n in waiting) == 1, 60,
             what="one waiting slice bound")
    assert len([p for p in list_pods(admin, namespace) if p["spec"].get("nodeName") == node]) == 16


def test_a_limit_of_5000_digits_is_told_and_counted_and_the_allocator_goes_on(
        admin, fleet, namespace, start_allocator):
    """Issue 46, finding 7: int() of the annotation raised ValueError and the allocator
    crash-looped. The node keeps the config's limit, the node gets a Warning event naming the
    key, and the counter of ignored annotations counts it."""
    node, = fleet(1, 96)
    annotate(admin, node, {LIMIT: "9" * 5000})
    alloc = start_allocator()
    p = wait_bound(admin, namespace, create(admin, namespace, pinned(fleet, slice_(8, 2, name="c"),
                                                                        name="p")))
    assert card_of(p) == f"{node}-mthreads-0"

    (event,) = wait_for(lambda: node_warnings(admin, node), 30, what="the Warning event on the node")
    assert event.message.startswith(f"{LIMIT}: ignored '999") and event.message.endswith(
        "(5000 characters) (not a whole number from 1 to 16); the limit is maxInstancesPerCard, 16")
    counter = f'mthreads_node_annotations_ignored_total{{annotation="{LIMIT}"}}'
    wait_for(lambda: alloc.metric(counter) == 1, 30, what="the counter of ignored annotations")
    assert alloc.metric(f'mthreads_card_containers_limit{{device_index="0",'
                        f'device_uuid="{node}-mthreads-0",node="{node}"}}') == 16
    assert alloc.running() and "Traceback" not in alloc.log()
