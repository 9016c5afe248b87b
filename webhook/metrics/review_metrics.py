"""The webhook's Prometheus metrics.

Each app gets its own registry (tests build many apps in one process). With
several gunicorn workers the values live in files under PROMETHEUS_MULTIPROC_DIR,
which `serve` sets before the workers start, and a scrape sums every worker's.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from .cert_expiry import CertificateExpiry

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class WebhookMetrics:
    def __init__(self, not_after=None) -> None:
        self.registry = CollectorRegistry()
        self.expiry = CertificateExpiry(not_after)  # read on scrape, not kept in worker files
        self.registry.register(self.expiry)
        self.requests = Counter(
            "mthreads_webhook_requests", "Admission requests by endpoint and result "
            "(allowed, patched, denied, bad_request, error).",
            ["endpoint", "result"], registry=self.registry)
        self.latency = Histogram(
            "mthreads_webhook_request_duration_seconds", "Time to answer an admission request.",
            ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.denials = Counter(
            "mthreads_webhook_denials", "Denied pods by the SPEC 3 rule they broke.",
            ["endpoint", "rule"], registry=self.registry)

    def scrape(self) -> bytes:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            registry.register(self.expiry)
            return generate_latest(registry)
        return generate_latest(self.registry)
