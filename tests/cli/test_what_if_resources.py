"""`cards what-if FILE` with a sidecar and with pod-level resources (fields a 1.20 API server
prunes from the pods it stores, but not from a file) against the live cluster's pods: the node
kube-scheduler of today gives (upstream's PodRequests: a sidecar adds to the app containers, a
regular init container counts with the sidecars before it, pod-level requests replace the
containers' sum). 1.20's sum (the largest init container, or the app containers) would let
each of these pods onto the busy node too."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.builders import plain, requesting, sched_pod, slice_
from tests.cli.test_cards_command import explain
from tests.harness.kube import ADMIN
from tests.harness.schema import valid_at
from tests.metrics.cluster import create
from webhook.scheduling.reasons import INSUFFICIENT_CPU

R = requesting

# a node of 4 cpus with 2 taken by a bound pod, beside an idle one: the pod needs 3 or 4 cpus
# today, 2 or fewer by 1.20's sum
PODS = [
    ("a sidecar adds to the app containers", [], [R("s", "2", sidecar=True)], None),
    ("a regular init container counts with the sidecar before it", [],
     [R("s", "1", sidecar=True), R("i", "2")], None),
    ("pod-level requests replace the containers' sum", [], [], {"requests": {"cpu": "3"}}),
]


@pytest.mark.cluster
@pytest.mark.parametrize("apps, init, pod_level", [p[1:] for p in PODS], ids=[p[0] for p in PODS])
def test_what_if_counts_todays_requests_against_the_live_pods(kube_cluster, admin, fleet, namespace,
                                                              tmp_path, apps, init, pod_level):
    busy, idle = fleet(1, 96, count=2, cpu="4")
    create(admin, namespace, sched_pod(plain(cpu="2"), node=busy, phase="Running"))
    spec = {"nodeSelector": fleet.selector, "containers": [slice_(8, name="c", cpu="1"), *apps]}
    if init:
        spec["initContainers"] = init
    if pod_level:
        spec["resources"] = pod_level
    doc = valid_at({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "today", "namespace": namespace}, "spec": spec})
    path = tmp_path / "today.yaml"
    path.write_text(yaml.safe_dump(doc))

    out = explain("what-if", str(path), "-o", "json", kubeconfig=str(kube_cluster.kubeconfig(ADMIN)))
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    got = {n["node"]: n["reason"] for n in answer["nodes"] if n["node"] in (busy, idle)}
    assert got == {busy: INSUFFICIENT_CPU, idle: None}
    assert answer["fits"] is True and answer["bindTo"]["node"] == idle


@pytest.mark.cluster
def test_what_if_names_a_pod_level_resources_field_of_the_wrong_shape(kube_cluster, admin, fleet,
                                                                    namespace, tmp_path):
    nodes = fleet(1, 96, count=1)
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": namespace},
           "spec": {"nodeSelector": fleet.selector, "containers": [slice_(8, name="c")],
                    "resources": ["cpu"]}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))

    out = explain("what-if", str(path), "-o", "json", kubeconfig=str(kube_cluster.kubeconfig(ADMIN)))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    answer = json.loads(out.stdout)
    assert answer["fits"] is False
    assert {n["reason"] for n in answer["nodes"] if n["node"] in nodes} == \
        {"spec.resources is not a mapping: a list"}
