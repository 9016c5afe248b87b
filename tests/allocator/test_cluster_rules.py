"""kube-scheduler's rules in the allocator, as a real process against a real kube-apiserver:
anti-affinity, host ports, claims bound to local volumes, a claim that appears later (the
allocator's watches of claims and volumes), a WaitForFirstConsumer claim kept pending."""

from __future__ import annotations

import kubernetes.client as k
import pytest

from tests.allocator.test_cluster import create
from tests.builders import sched_pod as pod
from tests.builders import slice_
from tests.harness.kube import bound_pod
from tests.harness.wait import wait_for
from tests.metrics.cluster import wait_unschedulable

pytestmark = pytest.mark.cluster

HOST = "kubernetes.io/hostname"


def gpu_pod(name, fleet, labels=None, **spec):
    p = pod(slice_(8, 2, name="a"), name=name, spec={"nodeSelector": dict(fleet.selector), **spec})
    p["metadata"]["labels"] = labels or {}
    return p


def unschedulable_message(admin, ns, name) -> str:
    return wait_unschedulable(admin, ns, name, 30)["message"]


def test_anti_affinity_and_host_ports_spread_pods_over_nodes(admin, fleet, namespace, start_allocator):
    nodes = fleet(4, 96, count=3)
    start_allocator()
    anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "infer"}}, "topologyKey": HOST}]}}}
    for i in range(4):
        create(admin, namespace, gpu_pod(f"infer-{i}", fleet, {"app": "infer"}, **anti))
    placed = {}
    for i in range(3):
        placed[i] = wait_for(lambda i=i: bound_pod(admin, namespace, f"infer-{i}"), 30)["spec"]["nodeName"]
    assert sorted(placed.values()) == sorted(nodes)  # one replica a node, though one card would hold all
    message = unschedulable_message(admin, namespace, "infer-3")
    assert "3 node(s) didn't match pod anti-affinity rules" in message
    # host ports: a second pod asking for the same port goes to another node
    ported = [{"name": "a", "image": "busybox", "ports": [{"containerPort": 8080, "hostPort": 8080}],
               "resources": slice_(8, 2)["resources"]}]
    first = gpu_pod("port-a", fleet)
    first["spec"]["containers"] = ported
    create(admin, namespace, first)
    a = wait_for(lambda: bound_pod(admin, namespace, "port-a"), 30)["spec"]["nodeName"]
    second = gpu_pod("port-b", fleet)
    second["spec"]["containers"] = ported
    create(admin, namespace, second)
    b = wait_for(lambda: bound_pod(admin, namespace, "port-b"), 30)["spec"]["nodeName"]
    assert a != b


def test_claims_pin_the_pod_to_its_volume_and_a_missing_claim_waits_for_it(
        admin, fleet, namespace, start_allocator):
    n0, n1 = fleet(2, 96, count=2)
    core, storage = k.CoreV1Api(admin), k.StorageV1Api(admin)
    start_allocator()
    volume = f"{namespace}-weights"
    core.create_persistent_volume({
        "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "local": {"path": "/mnt/weights"}, "storageClassName": "",
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": HOST, "operator": "In", "values": [n1]}]}]}}}})
    try:
        volumes = [{"name": "w", "persistentVolumeClaim": {"claimName": "weights"}}]
        create(admin, namespace, gpu_pod("reader", fleet, volumes=volumes))
        assert 'persistentvolumeclaim "weights" not found' in unschedulable_message(admin, namespace, "reader")
        # the claim, bound to the volume (as the PV controller leaves it): the pod follows it to n1
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": "weights", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "", "volumeName": volume}})
        assert wait_for(lambda: bound_pod(admin, namespace, "reader"), 30)["spec"]["nodeName"] == n1

        # a WaitForFirstConsumer claim: kept pending, the reason names the mode that places it
        cls = f"{namespace}-local"
        storage.create_storage_class({"metadata": {"name": cls}, "provisioner": "example.com/local",
                                      "volumeBindingMode": "WaitForFirstConsumer"})
        try:
            core.create_namespaced_persistent_volume_claim(namespace, {
                "metadata": {"name": "scratch"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                         "storageClassName": cls}})
            create(admin, namespace, gpu_pod("late", fleet, volumes=[
                {"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}]))
            message = unschedulable_message(admin, namespace, "late")
            assert "WaitForFirstConsumer" in message and "mode=extender" in message
            assert not bound_pod(admin, namespace, "late")
        finally:
            storage.delete_storage_class(cls)
    finally:
        core.delete_persistent_volume(volume)


def test_a_pod_asking_past_int64_is_refused_as_kube_scheduler_refuses_it_and_the_next_binds(
        admin, fleet, namespace, start_allocator):
    """Issue 46, finding 1: the API server stores ephemeral-storage "1e1000000" as "10e999999";
    reading it raised decimal.Overflow and killed the allocator's decision thread (both replicas
    crash-looped on it). It now counts 2^63-1 bytes, as Quantity.Value saturates: no node has
    room, and the pod says so; the pods after it are decided as before."""
    fleet(2, 96)
    alloc = start_allocator()
    huge = gpu_pod("huge", fleet)
    huge["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "1e1000000"
    create(admin, namespace, huge)
    stored = k.CoreV1Api(admin).read_namespaced_pod("huge", namespace).spec.containers[0]
    assert stored.resources.requests["ephemeral-storage"] == "10e999999"
    assert "1 Insufficient ephemeral-storage" in unschedulable_message(admin, namespace, "huge")
    create(admin, namespace, gpu_pod("next", fleet))
    wait_for(lambda: bound_pod(admin, namespace, "next"), 30, what="the next pod bound")
    assert alloc.running() and alloc.healthy() and "Traceback" not in alloc.log()
