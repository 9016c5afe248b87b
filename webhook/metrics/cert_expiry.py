"""The serving certificate's notAfter as a gauge, for the alert that fires 14 days before it."""

from __future__ import annotations

import datetime as dt
from typing import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAME = "mthreads_webhook_certificate_expiry_timestamp_seconds"


class CertificateExpiry(Collector):
    """Reads `not_after()` on each scrape, so a rotated certificate shows at once."""

    def __init__(self, not_after: Callable[[], dt.datetime | None] | None):
        self.not_after = not_after

    def collect(self) -> Iterator[GaugeMetricFamily]:
        when = self.not_after() if self.not_after else None
        if when is None:
            return  # no TLS served by this app (tests' Flask client): no series
        g = GaugeMetricFamily(NAME, "notAfter of the serving certificate, Unix time in seconds")
        g.add_metric([], when.timestamp())
        yield g

    def describe(self):
        return []
