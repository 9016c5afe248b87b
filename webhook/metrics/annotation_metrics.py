"""`mthreads_node_annotations_ignored_total{annotation}`: the Warning events told about node
annotations the allocator or the extender ignored (scheduling/node_annotations.py), one per
change of what a node's annotation had ignored, per annotation key. Every key the project reads
has a series from the start, so an alert on its increase sees the first one."""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

NAME = "mthreads_node_annotations_ignored"  # prometheus_client adds _total


class IgnoredAnnotationsCollector(Collector):
    """`counts()`: the warnings told per annotation key (IgnoredEntries.counts)."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]):
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(NAME, "Node annotations ignored (a bad limit, bad cordon "
                                           "entries), counted once per change as the Warning "
                                           "event on the node tells them", labels=["annotation"])
        for key, n in sorted(self.counts().items()):
            family.add_metric([key], n)
        yield family

    def describe(self) -> list[CounterMetricFamily]:
        return []
