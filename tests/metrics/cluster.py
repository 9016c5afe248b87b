"""Helpers for the cluster tests of tests/metrics: pods through the API server, scrapes."""

from __future__ import annotations

import json
import urllib.request

import kubernetes.client as k
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import sched_pod as pod
from tests.harness.kube import bound_pod, refused
from tests.harness.wait import wait_for


def create(admin, ns: str, p: dict) -> str:
    """Create a pod from tests.builders' form; returns its name."""
    p = json.loads(json.dumps(p))
    p["metadata"].pop("uid", None)
    p["metadata"]["namespace"] = ns
    p.pop("status", None)
    k.CoreV1Api(admin).create_namespaced_pod(ns, p, _preload_content=False)
    return p["metadata"]["name"]


def wait_bound(admin, ns: str, name: str, timeout: float = 60) -> dict:
    return wait_for(lambda: bound_pod(admin, ns, name), timeout, what=f"{ns}/{name} bound")


def wait_unschedulable(admin, ns: str, name: str, timeout: float = 60) -> dict:
    """The pod's PodScheduled condition once it says Unschedulable."""
    def told():
        c = refused(admin, ns, name)
        return c if c and c.get("reason") == "Unschedulable" else None
    return wait_for(told, timeout, what=f"{ns}/{name} Unschedulable")


def scrape(url: str) -> dict[str, list]:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def samples(scraped: dict, name: str, **labels) -> list:
    return [s for s in scraped.get(name, ()) if all(s.labels.get(a) == b for a, b in labels.items())]


__all__ = ["create", "pod", "samples", "scrape", "wait_bound", "wait_unschedulable"]
