"""The allocator as a real process against a real kube-apiserver (no webhook registered:
pods are created in the form the webhook mutates them into)."""

from __future__ import annotations

import json
import time
import urllib.request

import kubernetes.client as k
import pytest

from tests.builders import sched_pod as pod
from tests.builders import slice_, whole
from tests.harness.invariants import check as check_capacity
from tests.harness.kube import bound_pod, list_pods, read_pod
from tests.harness.wait import wait_for

pytestmark = pytest.mark.cluster


def create(admin, ns, p) -> dict:
    p = json.loads(json.dumps(p))
    p["metadata"].pop("uid", None)
    p["metadata"]["namespace"] = ns
    p.pop("status", None)
    for c in p["spec"]["containers"] + p["spec"].get("initContainers", []):
        c.setdefault("image", "busybox")
    return k.CoreV1Api(admin).create_namespaced_pod(ns, p, _preload_content=False) and p


def test_examples_land_where_spec_says(admin, fleet, namespace, start_allocator):
    s4, = fleet(3, 96)
    s5, = fleet(2, 160)
    alloc = start_allocator()
    create(admin, namespace, pod(slice_(96, 8, name="a"), name="p96"))
    create(admin, namespace, pod(slice_(128, name="a"), name="p128"))
    create(admin, namespace, pod(slice_(160, 16, name="a"), name="p160"))
    create(admin, namespace, pod(slice_(32, 8, name="a"), slice_(16, 4, name="b"), name="two"))
    got = {n: wait_for(lambda n=n: bound_pod(admin, namespace, n), 30, what=f"{n} bound")
           for n in ("p96", "p128", "p160", "two")}
    assert got["p96"]["spec"]["nodeName"] == s4
    assert got["p128"]["spec"]["nodeName"] == s5
    assert got["p160"]["spec"]["nodeName"] == s5
    ann = got["p96"]["metadata"]["annotations"]
    card = ann["hami.io/mthreads-vgpu-devices-allocated"].split(",")[0]
    assert ann["hami.io/mthreads-vgpu-devices-allocated"] == f"{card},Mthreads,49152,8:;"
    assert ann["mthreads.com/gpu-index"] == card.rsplit("-", 1)[1]
    assert ann["mthreads.com/predicate-node"] == ann["hami.io/vgpu-node"] == s4
    assert ann["hami.io/bind-phase"] == "allocating"
    assert len(ann["mthreads.com/predicate-time"]) >= 19 and ann["mthreads.com/predicate-time"].isdigit()
    assert abs(int(ann["hami.io/bind-time"]) - time.time()) < 120
    assert ann["hami.io/vgpu-time"] == ann["hami.io/bind-time"]
    two = got["two"]["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"]
    cards = {e.split(",")[0] for e in two.replace(";", ":").split(":") if e}
    assert len(cards) == 1, two  # both slices of the pod on one card
    # an exclusive pod takes an idle card only
    create(admin, namespace, pod(whole(1, 96, name="a"), name="ex"))
    ex = wait_for(lambda: bound_pod(admin, namespace, "ex"), 30, what="ex bound")
    pods = list_pods(admin, namespace)
    caps = {f"{s4}-mthreads-{i}": 49152 for i in range(3)} | {f"{s5}-mthreads-{i}": 81920 for i in range(2)}
    totals = check_capacity(pods, caps)
    ex_card = ex["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"].split(",")[0]
    assert totals[ex_card][2] == 1
    metrics = urllib.request.urlopen(alloc.metrics_url + "/metrics", timeout=5).read().decode()
    assert "mthreads_allocator_pods_allocated_total 5.0" in metrics
    assert "mthreads_allocator_leader 1.0" in metrics
    assert urllib.request.urlopen(alloc.metrics_url + "/healthz", timeout=5).status == 200
    assert alloc.stop() == 0


def test_unschedulable_then_bound_when_freed(admin, fleet, namespace, start_allocator):
    node, = fleet(1, 96)
    start_allocator()
    create(admin, namespace, pod(whole(1, 96, name="a"), name="first"))
    wait_for(lambda: bound_pod(admin, namespace, "first"), 30, what="first bound")
    create(admin, namespace, pod(slice_(8, 2, name="a"), name="waits"))

    def condition():
        p = read_pod(admin, namespace, "waits")
        for c in p["status"].get("conditions") or ():
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return c
    c = wait_for(condition, 30, what="PodScheduled=False")
    assert c["reason"] == "Unschedulable"
    # the other tests' nodes may exist too; this test's node is held exclusively
    assert "ExclusiveDeviceAllocateConflict" in c["message"] and c["message"].startswith("0/")
    events = wait_for(lambda: [e for e in k.CoreV1Api(admin).list_namespaced_event(namespace).items
                               if e.reason == "FailedScheduling" and e.involved_object.name == "waits"],
                      15, what="FailedScheduling event")
    assert events[0].type == "Warning" and events[0].source.component == "hami-scheduler"
    assert events[0].message == c["message"]
    k.CoreV1Api(admin).delete_namespaced_pod("first", namespace, grace_period_seconds=0)
    p = wait_for(lambda: bound_pod(admin, namespace, "waits"), 30, what="waits bound after delete")
    assert p["spec"]["nodeName"] == node


def test_deleting_a_pod_frees_its_share(admin, fleet, namespace, start_allocator):
    node, = fleet(1, 96)
    start_allocator()
    for i in range(3):
        create(admin, namespace, pod(slice_(32, 4, name="a"), name=f"s{i}"))
    for i in range(3):
        wait_for(lambda i=i: bound_pod(admin, namespace, f"s{i}"), 30, what=f"s{i} bound")
    create(admin, namespace, pod(slice_(32, 4, name="a"), name="s3"))
    time.sleep(2)
    assert not bound_pod(admin, namespace, "s3")
    k.CoreV1Api(admin).delete_namespaced_pod("s1", namespace, grace_period_seconds=0)
    wait_for(lambda: bound_pod(admin, namespace, "s3"), 30, what="s3 bound after delete")


def test_a_refused_binding_gives_its_cards_back(admin, kube_cluster, fleet, namespace, tmp_path):
    """The share is assumed when the write is sent; a refused write must hand it back, or the
    pod (which needs the node's only card whole) would never fit again."""
    from tests.harness.allocator import TEST_ROLE, AllocatorProcess
    from tests.harness.kube import ALICE, ensure_namespace
    rbac = k.RbacAuthorizationV1Api(admin)
    role = rbac.read_cluster_role(TEST_ROLE)
    no_binding = [r for r in role.rules if "pods/binding" not in r.resources]
    name = "alloc-tests-without-binding"
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": no_binding})
    subject = [{"kind": "User", "name": ALICE}]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "roleRef": ref, "subjects": subject})
    lease_ns = "mthreads-refused"
    ensure_namespace(admin, lease_ns)
    node, = fleet(1, 96)
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  mthreads:\n    memoryPerCard: [96, 160]\n")
    alloc = AllocatorProcess(kube_cluster.kubeconfig(ALICE), lease_ns, tmp_path / "alice.log",
                             config).start()
    try:
        create(admin, namespace, pod(whole(1, 96, name="a"), name="whole"))
        wait_for(lambda: (alloc.metric("mthreads_allocator_bind_seconds_count") or 0) >= 2, 30,
                 what="two bindings written and refused")
        assert alloc.metric("mthreads_allocator_pods_allocated_total") == 0
        assert not bound_pod(admin, namespace, "whole")
        binder_role = {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}
        rbac.create_namespaced_role(namespace, {"metadata": {"name": "bind"}, "rules": [binder_role]})
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "bind"}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bind"}})
        p = wait_for(lambda: bound_pod(admin, namespace, "whole"), 30, what="bound once allowed")
        assert p["spec"]["nodeName"] == node
        card = f"{node}-mthreads-0"
        totals = check_capacity(list_pods(admin, namespace), {card: 49152})
        assert totals[card][2] == 1
    finally:
        alloc.stop(timeout=10)
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        print(f"--- alice.log (tail) ---\n{alloc.tail(20)}")
