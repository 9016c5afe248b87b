"""The CSI attach limits in the allocator, as a real process against a real kube-apiserver
(1.20 serves CSINodes): a pod whose CSI volume would pass its node's CSINode count waits with
kube-scheduler's reason, and binds once the pod holding the attached volume is gone. (A 1.20
API server keeps a CSINode's drivers immutable; a CSINode that changes is a unit test's:
tests/scheduling/test_volumes.py.)"""

from __future__ import annotations

import json

import kubernetes.client as k
import pytest
import yaml

from tests.allocator.test_cluster import create
from tests.builders import CSI_DRIVER, csi_volume, csinode, slice_
from tests.builders import sched_pod as pod
from tests.cli.test_cards_command import explain as cards
from tests.harness.kube import ADMIN, bound_pod
from tests.harness.wait import wait_for
from tests.metrics.cluster import wait_unschedulable

pytestmark = pytest.mark.cluster

MAX = "node(s) exceed max volume count"


def csi_pod(name, fleet, claim):
    return pod(slice_(8, 2, name="a"), name=name, spec={
        "nodeSelector": dict(fleet.selector),
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]})


def bound_claim(namespace, name, volume) -> dict:
    """A claim bound to `volume`, as the PV controller leaves it."""
    return {"metadata": {"name": name, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "", "volumeName": volume}}


def test_a_pod_over_its_nodes_csi_limit_waits_with_the_reason_and_binds_when_room_is_made(
        kube_cluster, admin, fleet, namespace, start_allocator, tmp_path):
    (node,) = fleet(2, 96, count=1)
    core, storage = k.CoreV1Api(admin), k.StorageV1Api(admin)
    volumes = [f"{namespace}-v{i}" for i in range(2)]
    for i, v in enumerate(volumes):
        pv = csi_volume(v, claim=(namespace, f"data-{i}"))
        pv["spec"]["storageClassName"] = ""
        core.create_persistent_volume(pv)
        core.create_namespaced_persistent_volume_claim(namespace, bound_claim(namespace, f"data-{i}", v))
    storage.create_csi_node(csinode(node, {CSI_DRIVER: 1}))
    try:
        start_allocator()
        create(admin, namespace, csi_pod("first", fleet, "data-0"))
        assert wait_for(lambda: bound_pod(admin, namespace, "first"), 30)["spec"]["nodeName"] == node
        create(admin, namespace, csi_pod("second", fleet, "data-1"))
        message = wait_unschedulable(admin, namespace, "second", 30)["message"]
        assert f"1 {MAX}" in message, message
        assert not bound_pod(admin, namespace, "second")
        # `cards explain` of it, and `cards what-if` of a pod in a file naming the same claim
        # (never created), read the CSINode too and say the same
        kubeconfig = str(kube_cluster.kubeconfig(ADMIN))
        explained = cards("explain", f"{namespace}/second", "-o", "json", kubeconfig=kubeconfig)
        assert [n["reason"] for n in json.loads(explained.stdout)["nodes"]] == [MAX], explained.stdout
        spec = tmp_path / "third.yaml"
        third = csi_pod("third", fleet, "data-1")
        third["metadata"]["namespace"] = namespace
        spec.write_text(yaml.safe_dump(third))
        what_if = cards("what-if", str(spec), "-o", "json", kubeconfig=kubeconfig)
        assert [n["reason"] for n in json.loads(what_if.stdout)["nodes"]] == [MAX], what_if.stdout
        # the first pod gone, its volume is detached: the second binds without a restart
        core.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
        assert wait_for(lambda: bound_pod(admin, namespace, "second"), 30)["spec"]["nodeName"] == node
    finally:
        storage.delete_csi_node(node)
        for v in volumes:
            core.delete_persistent_volume(v)
