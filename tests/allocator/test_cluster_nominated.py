"""A nominated pod on a real kube-apiserver (1.20 serves `status.nominatedNodeName`): a pod of
high priority that a preemption nominated for a node, set through the pods/status subresource
as kube-scheduler sets it, holds the node's card against a lower-priority pod of the allocator,
in the allocator's decision and in `cards what-if FILE`; cleared, the pod binds at once."""

from __future__ import annotations

import json

import kubernetes.client as k
import pytest
import yaml

from tests.builders import sched_pod as pod
from tests.builders import slice_
from tests.cli.test_cards_command import explain
from tests.harness.kube import ADMIN
from tests.metrics.cluster import create, wait_bound, wait_unschedulable

pytestmark = pytest.mark.cluster


def test_a_nominated_pod_holds_its_node_against_a_lower_priority_pod(
        kube_cluster, admin, fleet, namespace, start_allocator, priorities, tmp_path):
    node, = fleet(1, 96)
    core = k.CoreV1Api(admin)
    start_allocator()
    # the preemptor: waits for a scheduler that is not running here, nominated for the node
    nominee = pod(slice_(64, 4, name="c"), name="nominee")
    nominee["spec"].update({"schedulerName": "default-scheduler", "nodeSelector": fleet.selector,
                            "priorityClassName": priorities["high"]})
    create(admin, namespace, nominee)
    core.patch_namespaced_pod_status("nominee", namespace, {"status": {"nominatedNodeName": node}})
    assert core.read_namespaced_pod("nominee", namespace).status.nominated_node_name == node

    low = pod(slice_(64, 4, name="c"), name="low")
    low["spec"].update({"nodeSelector": fleet.selector, "priorityClassName": priorities["low"]})
    create(admin, namespace, low)
    message = wait_unschedulable(admin, namespace, "low")["message"]
    assert "1 CardInsufficientMemory" in message, message  # without it: 96 units free, it fits

    # `cards what-if` of the same pod in a file, against the live state, says the same
    spec = tmp_path / "low.yaml"
    spec.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "low-too", "namespace": namespace},
        "spec": {"priorityClassName": priorities["low"], "nodeSelector": fleet.selector,
                 "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {
                     "mthreads.com/vgpu": 1, "mthreads.com/sgpu-memory": 64,
                     "mthreads.com/sgpu-core": 4}}}]}}))
    kubeconfig = str(kube_cluster.kubeconfig(ADMIN))
    what_if = json.loads(explain("what-if", str(spec), "-o", "json", kubeconfig=kubeconfig).stdout)
    assert what_if["fits"] is False
    assert [n["reason"] for n in what_if["nodes"] if n["node"] == node] == ["CardInsufficientMemory"]

    # the nomination cleared (as kube-scheduler clears it): the card is free, the pod binds
    core.patch_namespaced_pod_status("nominee", namespace, {"status": {"nominatedNodeName": None}})
    assert wait_bound(admin, namespace, "low", 30)["spec"]["nodeName"] == node
