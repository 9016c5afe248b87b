"""What a caller of the extender's verbs can make it do, on the test API server (issue 32): the
extender process as the chart runs it, driven with forged bodies over its loopback port. It
decides and writes for the pods the API server holds, nothing else; its pages port answers no
verb."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import NamedTuple

import pytest

from tests.builders import plain, sched_pod, slice_, whole
from tests.extender.test_scheduler import create
from tests.harness.allocator import ALLOCATOR_USER
from tests.harness.extender import Process
from tests.harness.invariants import ALLOCATED
from tests.harness.kube import free_ports, read_pod
from tests.harness.wait import wait_for
from webhook.scheduling import reasons

pytestmark = pytest.mark.cluster


class Urls(NamedTuple):
    verbs: str  # the loopback listener: filter, prioritize, preempt, bind
    pages: str  # --metrics-bind: /metrics, /healthz, /readyz only


@pytest.fixture(scope="module")
def extender(kube_cluster, admin, tmp_path_factory):
    """The URLs of a started extender; stopped by PID at the end."""
    workdir = tmp_path_factory.mktemp("trust")
    config = workdir / "config.yaml"
    config.write_text("devices:\n  mthreads:\n    memoryPerCard: [96, 160]\n")
    verbs_port, pages_port = free_ports(2)
    proc = Process([sys.executable, "-m", "webhook.cli", "extender", "--config", str(config),
                    "--kubeconfig", str(kube_cluster.kubeconfig(ALLOCATOR_USER)),
                    "--bind", f"127.0.0.1:{verbs_port}", "--metrics-bind", f"127.0.0.1:{pages_port}"],
                   workdir / "extender.log", f"http://127.0.0.1:{pages_port}/readyz").start()
    try:
        wait_for(proc.healthy, 60, what="extender /readyz on its pages port")
        yield Urls(f"http://127.0.0.1:{verbs_port}", f"http://127.0.0.1:{pages_port}")
    finally:
        code = proc.stop()
        print(f"--- extender.log (tail) ---\n{proc.tail(30)}")
        assert code == 0


def call(url: str, verb: str, body: dict) -> tuple[int, dict | str]:
    request = urllib.request.Request(f"{url}/{verb}", json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def real(admin, namespace, p, selector) -> dict:
    """Create `p` on the API server; the pod as it holds it."""
    name = create(admin, namespace, p, selector)
    return read_pod(admin, namespace, name)


def bind_body(p: dict, node: str, uid: str | None = None) -> dict:
    m = p["metadata"]
    return {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": uid or m["uid"],
            "Node": node}


def forged(p: dict, containers: list[dict]) -> dict:
    out = json.loads(json.dumps(p))
    out["spec"]["containers"] = containers
    return out


def test_a_lying_filter_body_ends_with_the_real_pods_allocation(extender, admin, fleet, namespace):
    url, _ = extender
    node, = fleet(2, 96)
    p = real(admin, namespace, sched_pod(slice_(2), name="small"), fleet.selector)
    # the review's case: a pod of one 2-unit slice, a body saying two whole cards
    status, answer = call(url, "filter", {"Pod": forged(p, [whole(2, 96)]), "NodeNames": [node]})
    assert status == 200 and answer["NodeNames"] == [node], answer
    assert call(url, "bind", bind_body(p, node)) == (200, {"Error": ""})
    ann = read_pod(admin, namespace, "small")["metadata"]["annotations"]
    assert ann[ALLOCATED] == f"{node}-mthreads-0,Mthreads,1024,0:;"


def test_made_up_uids_reserve_nothing(extender, admin, fleet, namespace):
    url, _ = extender
    node, = fleet(2, 96)
    template = sched_pod(whole(1, 96), name="ghost", namespace=namespace)
    for i in range(4):  # each used to hold a card for 30 s
        status, answer = call(url, "filter", {"Pod": template, "NodeNames": [node]})
        assert status == 200 and answer["Error"].endswith("not found"), answer
    p = real(admin, namespace, sched_pod(whole(2, 96), name="both-cards"), fleet.selector)
    status, answer = call(url, "filter", {"Pod": p, "NodeNames": [node]})
    assert answer["NodeNames"] == [node], answer
    status, answer = call(url, "filter", {"Pod": p, "NodeNames": [node]})  # one reservation per pod
    assert answer["NodeNames"] == [node], answer
    # a real uid under another pod's name is not that pod
    other = real(admin, namespace, sched_pod(slice_(2), name="other"), fleet.selector)
    assert call(url, "bind", bind_body(other, node, uid=p["metadata"]["uid"]))[1]["Error"].endswith(
        f"uid {p['metadata']['uid']} is gone")


def test_a_bind_is_refused_for_another_schedulers_pod_and_a_node_it_may_not_use(
        extender, admin, fleet, namespace):
    url, _ = extender
    node, = fleet(1, 96)
    tainted, = fleet(1, 96, taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])
    theirs = real(admin, namespace, sched_pod(plain(), name="theirs",
                                              spec={"schedulerName": "default-scheduler"}),
                  fleet.selector)
    status, answer = call(url, "bind", bind_body(theirs, node))
    assert answer["Error"].endswith("waits for scheduler 'default-scheduler', not 'hami-scheduler'")
    ours = real(admin, namespace, sched_pod(slice_(8, 2), name="ours"), fleet.selector)
    status, answer = call(url, "bind", bind_body(ours, tainted))
    assert answer == {"Error": f"node {tainted}: {reasons.TAINTED}"}
    for name in ("theirs", "ours"):
        assert not read_pod(admin, namespace, name)["spec"].get("nodeName")


def test_the_pages_port_answers_no_verb(extender):
    _, pages = extender
    status, text = call(pages, "bind", {"PodName": "a", "PodNamespace": "b", "PodUID": "c",
                                        "Node": "d"})
    assert status == 404 and "not served on this port" in text
    with urllib.request.urlopen(f"{pages}/metrics", timeout=10) as r:
        assert r.status == 200
