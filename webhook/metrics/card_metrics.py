"""The cards' own rules as metrics, beside HAMi's families (hami_metrics.py) and from the same
view: each card's limit of containers (its count is HAMi's `hami_gpu_shared_count`), and how
many cards of each node are cordoned.

Computed on each scrape, as HAMi's families are: a node whose cordon is lifted reads 0 at
once, a node that is gone has no series.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.core import GaugeMetricFamily

from .card_views import CardView


def card_rule_families(views: Iterable[CardView]) -> list[GaugeMetricFamily]:
    limit = GaugeMetricFamily(
        "mthreads_card_containers_limit",
        "Containers that may share this card at most (maxInstancesPerCard, or the node's "
        "mthreads.com/max-instances-per-card); hami_gpu_shared_count is how many do",
        labels=["node", "device_uuid", "device_index"])
    cordoned = GaugeMetricFamily(
        "mthreads_node_cards_cordoned",
        "Cards of the node named in its hami.io/device-cordon annotation (they take no new pod)",
        labels=["node"])
    per_node: dict[str, int] = {}
    for v in views:
        limit.add_metric([v.node, v.card.id, str(v.card.index)], v.max_instances)
        per_node[v.node] = per_node.get(v.node, 0) + v.cordoned
    for node, n in sorted(per_node.items()):
        cordoned.add_metric([node], n)
    return [limit, cordoned]
