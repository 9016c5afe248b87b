"""The extender's cache against the test API server: it counts the bound pods' shares, knows
the pods waiting for its scheduler, and follows them from binding to deletion
(docs/extender.md, "Reservations")."""

from __future__ import annotations

from functools import partial

import kubernetes.client as k
import pytest

from tests.builders import binding, sched_pod, slice_
from tests.extender.messages import CONFIG
from tests.extender.test_scheduler import create
from tests.harness.allocator import ALLOCATOR_USER
from tests.harness.wait import wait_for
from webhook.extender.cache import Cache
from webhook.kube.api import Api
from webhook.kube.informer import Informer
from webhook.model import annotations as keys

pytestmark = pytest.mark.cluster


@pytest.fixture
def cache(kube_cluster, admin):
    """The extender's cache, fed by its watches as the extender's identity; stopped afterwards."""
    api = Api.from_kubeconfig(str(kube_cluster.kubeconfig(ALLOCATOR_USER)))
    c = Cache(CONFIG)
    informers = [Informer(api, kind, path, selector, partial(c.apply, kind)).start()
                 for kind, path, selector in c.watched()]
    try:
        assert c.wait_ready(30), "the cache never listed"
        yield c
    finally:
        for i in informers:
            i.stop()


def bind(admin, ns: str, name: str, node: str) -> None:
    body = binding(name, {keys.ALLOCATED: f"{node}-mthreads-0,Mthreads,8192,4:;"}, node)
    body["metadata"]["namespace"] = ns
    k.CoreV1Api(admin).create_namespaced_binding(ns, body, _preload_content=False)


def uid(admin, ns: str, name: str) -> str:
    return k.CoreV1Api(admin).read_namespaced_pod(name, ns).metadata.uid


def test_the_watch_shows_a_pod_once_bound_and_forgets_it_when_deleted(cache, admin, fleet, namespace):
    node, = fleet(1, 96)
    waiting = create(admin, namespace, sched_pod(slice_(16, 4), name="waiting"), fleet.selector)
    placed = create(admin, namespace, sched_pod(slice_(16, 4), name="placed"), fleet.selector)
    bind(admin, namespace, placed, node)
    placed_uid, waiting_uid = uid(admin, namespace, placed), uid(admin, namespace, waiting)
    wait_for(lambda: cache.core.share(placed_uid) is not None, 30, what="the bound pod in the cache")
    card = cache.core.card(f"{node}-mthreads-0")
    assert (card.memory_mib, card.cores) == (8192, 4)
    assert cache.core.share(waiting_uid) is None  # never counted while it waits
    assert cache.waiting_pod(namespace, waiting, waiting_uid) is not None  # but known to wait
    bind(admin, namespace, waiting, node)
    wait_for(lambda: cache.core.share(waiting_uid) is not None, 30, what="the pod bound later in the cache")
    assert cache.core.card(f"{node}-mthreads-0").memory_mib == 16384
    wait_for(lambda: cache.waiting_pod(namespace, waiting, waiting_uid) is None, 30,
             what="the bound pod gone from the waiting ones")
    k.CoreV1Api(admin).delete_namespaced_pod(placed, namespace, grace_period_seconds=0)
    wait_for(lambda: cache.core.share(placed_uid) is None, 30, what="the deleted pod gone from the cache")
    assert cache.core.card(f"{node}-mthreads-0").memory_mib == 8192


def test_the_watch_follows_a_namespace_relabelled(cache, admin, namespace):
    """The Namespaces watch keeps each namespace's labels (an affinity term's namespaceSelector
    reads them): a label set, then changed, is in the cache's state the next decision reads."""
    labels = lambda: cache.core.read(lambda state: dict(state.namespaces.get(namespace) or {}))  # noqa: E731
    wait_for(lambda: namespace in cache.core.read(lambda state: state.namespaces), 10,
             what=f"namespace {namespace} listed")
    core = k.CoreV1Api(admin)
    core.patch_namespace(namespace, {"metadata": {"labels": {"team": "blue"}}})
    wait_for(lambda: labels().get("team") == "blue", 10, what=f"{namespace} labelled team=blue")
    core.patch_namespace(namespace, {"metadata": {"labels": {"team": "red"}}})
    wait_for(lambda: labels().get("team") == "red", 10, what=f"{namespace} relabelled team=red")
