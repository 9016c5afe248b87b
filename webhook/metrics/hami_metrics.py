"""HAMi's scheduler metrics, under HAMi's names, labels and units (its cmd/scheduler/metrics.go).

HAMi-WebUI and HAMi's Grafana dashboards read these names. As in HAMi: memory in bytes,
cores in the card's own units (16 core groups per Mthreads card, so the limit is 16),
`device_type` "Mthreads" (HAMi's type for these cards), and the constant label
`zone="vGPU"` that HAMi's registry adds to every one of them.

Computed on each scrape from the current view, so a pod that ends or is deleted leaves no
series behind.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..model.cards import CORES_PER_CARD, VENDOR
from ..scheduling.bound import UNREADABLE, BoundPod
from .card_metrics import card_rule_families
from .card_views import CardView, card_views

ZONE = "vGPU"
MIB = 1024 * 1024

CARD = ["node", "device_uuid", "device_index", "device_type"]
CONTAINER = ["namespace", "node", "pod", "container_index", "device_uuid"]


def _family(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels + ["zone"])


def hami_families(views: Iterable[CardView], pods: Iterable[BoundPod]) -> list[GaugeMetricFamily]:
    mem_limit = _family("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", CARD)
    core_limit = _family("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", CARD)
    mem_alloc = _family("hami_gpu_memory_allocated_bytes", "Device memory allocated for a certain GPU",
                        ["node", "device_uuid", "device_index", "device_cores", "device_type"])
    shared = _family("hami_gpu_shared_count", "Number of containers sharing this GPU", CARD)
    core_alloc = _family("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU",
                         CARD)
    overview = _family("hami_node_gpu_overview", "GPU overview on a certain node",
                       ["node", "device_uuid", "device_index", "device_cores",
                        "device_memory_limit", "device_type"])
    mem_ratio = _family("hami_node_gpu_memory_allocated_ratio",
                        "GPU Memory Allocated Percentage on a certain GPU", CARD)
    for v in views:
        c = v.card
        card = [v.node, c.id, str(c.index), VENDOR, ZONE]
        with_cores = [v.node, c.id, str(c.index), str(CORES_PER_CARD), VENDOR, ZONE]
        mem_limit.add_metric(card, c.memory_mib * MIB)
        core_limit.add_metric(card, CORES_PER_CARD)
        mem_alloc.add_metric(with_cores, v.memory_used_mib * MIB)
        shared.add_metric(card, v.containers)
        core_alloc.add_metric(card, v.cores_used)
        overview.add_metric([v.node, c.id, str(c.index), str(CORES_PER_CARD), str(c.memory_mib),
                             VENDOR, ZONE], v.memory_used_mib * MIB)
        mem_ratio.add_metric(card, v.memory_used_mib / c.memory_mib)

    vmem = _family("hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container",
                   CONTAINER)
    vcore = _family("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container",
                    CONTAINER)
    for p in pods:
        for h in p.holdings:
            if h.container == UNREADABLE:
                continue  # a garbled annotation tells no container (HAMi skips such entries too)
            labels = [p.namespace, p.node, p.name, str(h.container), h.card, ZONE]
            vmem.add_metric(labels, h.memory_mib * MIB)
            vcore.add_metric(labels, h.cores)
    return [mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio, vmem, vcore]


class HamiCollector(Collector):
    """HAMi's families and the cards' own rules (card_metrics.py). Registers on a
    prometheus_client registry; `snapshot()` gives (the nodes: objects with
    `.name` and `.cards`, the allocator's NodeInfo; the bound pods' cards) as of one moment
    (the scheduler cache's `snapshot`)."""

    def __init__(self, snapshot: Callable[[], tuple[Iterable, Iterable[BoundPod]]]):
        self.snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        nodes, pods = self.snapshot()
        pods = list(pods)
        views = card_views([(n.name, n.cards) for n in nodes], pods)
        yield from hami_families(views, pods)
        yield from card_rule_families(views)  # ours, from the same view

    def describe(self):
        return []  # the families are made on each scrape; nothing to check at registration


def metrics_page(snapshot: Callable[[], tuple[Iterable, Iterable[BoundPod]]],
                 *others: Collector, registry=None) -> Callable[[], tuple]:
    """A view for GET /metrics with HAMi's families and `others` (for the extender, whose app
    has no registry of its own), beside what `registry` holds already (None: nothing)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.exposition import CONTENT_TYPE_LATEST
    registry = registry or CollectorRegistry()
    registry.register(HamiCollector(snapshot))
    for collector in others:
        registry.register(collector)
    return lambda: (generate_latest(registry), 200, {"Content-Type": CONTENT_TYPE_LATEST})
