"""HAMi's metric families from plain data: names, label sets, units (bytes), no stale series."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import bound_slice, mt_node, slice_
from tests.builders import sched_pod as pod
from tests.harness.invariants import ALLOCATED
from webhook.metrics.card_views import card_views
from webhook.metrics.hami_metrics import HamiCollector
from webhook.model.config import MthreadsConfig
from webhook.scheduling.bound import BoundPods, bound_pod
from webhook.scheduling.inventory import node_cards
from webhook.scheduling.resources import node_allocatable
from webhook.scheduling.state import NodeInfo

MIB = 1024 * 1024
CARD_LABELS = {"node", "device_uuid", "device_index", "device_type", "zone"}
CONTAINER_LABELS = {"namespace", "node", "pod", "container_index", "device_uuid", "zone"}


def info(node: dict) -> NodeInfo:
    return NodeInfo(node["metadata"]["name"], node, node_cards(node, MthreadsConfig()),
                    node_allocatable(node))


def scrape(nodes: list[NodeInfo], pods: BoundPods) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(HamiCollector(lambda: (nodes, pods.snapshot())))
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text) if f.samples}


def values(samples, **labels) -> list[float]:
    return [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]


@pytest.fixture
def fleet():
    nodes = [info(mt_node("s4", cards=2, units=96)), info(mt_node("s5", cards=1, units=160))]
    pods = BoundPods()
    pods.seen(bound_slice("a", "s4", "s4-mthreads-0,Mthreads,16384,8:;"))
    # two containers of one pod on one card, init container first
    pods.seen(bound_slice("b", "s4", ";s4-mthreads-0,Mthreads,4096,2:;s4-mthreads-0,Mthreads,1024,0:;"))
    pods.seen(bound_slice("c", "s5", "s5-mthreads-0,Mthreads,81920,16:;"))
    return nodes, pods


def test_card_families_have_hamis_names_labels_and_units(fleet):
    m = scrape(*fleet)
    assert set(m) >= {"hami_gpu_memory_limit_bytes", "hami_gpu_memory_allocated_bytes",
                      "hami_gpu_core_limit_ratio", "hami_gpu_core_allocated_ratio",
                      "hami_gpu_shared_count", "hami_node_gpu_overview",
                      "hami_node_gpu_memory_allocated_ratio", "hami_vgpu_memory_allocated_bytes",
                      "hami_vgpu_core_allocated_ratio"}
    for name in ("hami_gpu_memory_limit_bytes", "hami_gpu_core_limit_ratio", "hami_gpu_shared_count",
                 "hami_gpu_core_allocated_ratio", "hami_node_gpu_memory_allocated_ratio"):
        assert {frozenset(s.labels) for s in m[name]} == {frozenset(CARD_LABELS)}, name
    assert set(m["hami_gpu_memory_allocated_bytes"][0].labels) == CARD_LABELS | {"device_cores"}
    assert set(m["hami_node_gpu_overview"][0].labels) == \
        CARD_LABELS | {"device_cores", "device_memory_limit"}
    card0 = dict(node="s4", device_uuid="s4-mthreads-0", device_index="0", device_type="Mthreads",
                 zone="vGPU")
    assert values(m["hami_gpu_memory_limit_bytes"], **card0) == [96 * 512 * MIB]
    assert values(m["hami_gpu_memory_allocated_bytes"], **card0, device_cores="16") == \
        [(16384 + 4096 + 1024) * MIB]
    assert values(m["hami_gpu_core_limit_ratio"], **card0) == [16]
    assert values(m["hami_gpu_core_allocated_ratio"], **card0) == [10]
    assert values(m["hami_gpu_shared_count"], **card0) == [3]  # containers, as HAMi counts
    assert values(m["hami_node_gpu_memory_allocated_ratio"], **card0) == [21504 / 49152]
    assert values(m["hami_node_gpu_overview"], **card0, device_memory_limit="49152") == \
        [21504 * MIB]
    idle = dict(node="s4", device_uuid="s4-mthreads-1")
    assert values(m["hami_gpu_memory_allocated_bytes"], **idle) == [0]
    assert values(m["hami_gpu_shared_count"], **idle) == [0]
    assert values(m["hami_node_gpu_memory_allocated_ratio"], node="s5") == [1.0]


def test_container_families_per_container_and_card(fleet):
    m = scrape(*fleet)
    mem = m["hami_vgpu_memory_allocated_bytes"]
    assert {frozenset(s.labels) for s in mem} == {frozenset(CONTAINER_LABELS)}
    assert values(mem, namespace="team", pod="b", container_index="1", node="s4",
                  device_uuid="s4-mthreads-0") == [4096 * MIB]
    assert values(mem, pod="b", container_index="2") == [1024 * MIB]
    assert values(mem, pod="b", container_index="0") == []  # the init container holds nothing
    assert values(m["hami_vgpu_core_allocated_ratio"], pod="a", container_index="0") == [8]


def test_a_pod_gone_leaves_no_series(fleet):
    nodes, pods = fleet
    a = bound_slice("a", "s4", "s4-mthreads-0,Mthreads,16384,8:;")
    pods.gone(a["metadata"]["uid"])  # another uid: nothing changes
    assert values(scrape(nodes, pods)["hami_vgpu_memory_allocated_bytes"], pod="a")
    for p in pods.snapshot():
        if p.name in ("a", "b"):
            pods.gone(p.uid)
    m = scrape(nodes, pods)
    assert values(m["hami_vgpu_memory_allocated_bytes"], pod="a") == []
    assert values(m["hami_vgpu_memory_allocated_bytes"], pod="b") == []
    assert values(m["hami_gpu_memory_allocated_bytes"], device_uuid="s4-mthreads-0") == [0]
    assert values(m["hami_gpu_shared_count"], device_uuid="s4-mthreads-0") == [0]
    pods.clear()
    assert "hami_vgpu_memory_allocated_bytes" not in scrape(nodes, pods)


def test_a_node_gone_leaves_no_card_series(fleet):
    nodes, pods = fleet
    m = scrape(nodes[1:], pods)
    assert values(m["hami_gpu_memory_limit_bytes"], node="s4") == []


@pytest.mark.parametrize("text, expect", [
    # garbled, naming a card: that card counts as fully used, no container series
    ("s4-mthreads-1,Mthreads,lots,8:;", {"s4-mthreads-1": (49152, 16)}),
    # garbled, naming none: every card of the node counts as fully used
    ("nonsense", {"s4-mthreads-0": (49152, 16), "s4-mthreads-1": (49152, 16)}),
])
def test_garbled_allocation_counts_as_full_like_the_allocator(text, expect):
    held = bound_pod(bound_slice("g", "s4", text))
    views = {v.card.id: (v.memory_used_mib, v.cores_used)
             for v in card_views([("s4", node_cards(mt_node("s4"), MthreadsConfig()))], [held])}
    assert {c: u for c, u in views.items() if u != (0, 0)} == expect
    pods = BoundPods()
    pods.seen(bound_slice("g", "s4", text))
    assert "hami_vgpu_memory_allocated_bytes" not in scrape([info(mt_node("s4"))], pods)


@pytest.mark.parametrize("p", [
    pod(slice_(2), name="pending"),  # not bound
    pod(slice_(2), name="plain", node="s4"),  # bound, no allocation annotation
])
def test_pods_without_cards_are_not_held(p):
    assert bound_pod(p) is None
    pods = BoundPods()
    pods.seen(p)
    assert pods.snapshot() == []


def test_a_pod_seen_again_without_annotation_is_dropped():
    pods = BoundPods()
    p = bound_slice("a", "s4", "s4-mthreads-0,Mthreads,1024,1:;")
    pods.seen(p)
    del p["metadata"]["annotations"][ALLOCATED]
    pods.seen(p)
    assert pods.snapshot() == []


def test_the_card_limit_and_the_cordoned_cards_of_each_node():
    """Beside HAMi's count of containers on a card, its limit; and per node the cards
    cordoned, 0 again once the annotation is gone."""
    s4 = mt_node("s4", cards=3, units=96, annotations={
        "hami.io/device-cordon": "s4-mthreads-0,s4-mthreads-2", "mthreads.com/max-instances-per-card": "4"})
    pods = BoundPods()
    pods.seen(bound_slice("b", "s4", "s4-mthreads-1,Mthreads,1024,0:;s4-mthreads-1,Mthreads,1024,0:;"))
    m = scrape([info(s4), info(mt_node("s5", cards=1, units=160))], pods)
    limits = {s.labels["device_uuid"]: s.value for s in m["mthreads_card_containers_limit"]}
    assert limits == {"s4-mthreads-0": 4, "s4-mthreads-1": 4, "s4-mthreads-2": 4, "s5-mthreads-0": 16}
    assert values(m["hami_gpu_shared_count"], device_uuid="s4-mthreads-1") == [2]
    assert {s.labels["node"]: s.value for s in m["mthreads_node_cards_cordoned"]} == {"s4": 2, "s5": 0}
    s4["metadata"]["annotations"] = {}
    m = scrape([info(s4)], pods)
    assert {s.labels["node"]: s.value for s in m["mthreads_node_cards_cordoned"]} == {"s4": 0}
