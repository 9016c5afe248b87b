"""`cards what-if FILE` on the real API server with a pod of today's form: required
anti-affinity whose namespaceSelector picks the live pods of labelled namespaces, and whose
matchLabelKeys the API server would merge (kube-scheduler of today's answer). A 1.20 API server
prunes both fields from the pods it stores; what-if reads them from the file, so the answer
shows here."""

from __future__ import annotations

import json
import uuid

import kubernetes.client as k
import pytest
import yaml

from tests.builders import plain, sched_pod
from tests.cli.test_cards_command import explain
from tests.harness.kube import ADMIN, ensure_namespace
from tests.harness.schema import valid_at
from tests.metrics.cluster import create

pytestmark = pytest.mark.cluster
HOST = "kubernetes.io/hostname"
ANTI = "node(s) didn't match pod anti-affinity rules"


@pytest.fixture
def labelled(admin):
    """Two namespaces of this test, labelled team=blue-<tag> and team=red-<tag>; deleted after."""
    tag = uuid.uuid4().hex[:6]
    core = k.CoreV1Api(admin)
    made = {}
    for team in ("blue", "red"):
        name = f"{team}-{tag}"
        ensure_namespace(admin, name)
        core.patch_namespace(name, {"metadata": {"labels": {"team": f"{team}-{tag}"}}})
        made[team] = name
    made["tag"] = tag
    yield made
    for team in ("blue", "red"):
        core.delete_namespace(made[team])


def what_if(tmp_path, kubeconfig: str, pod: dict) -> dict:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    out = explain("what-if", str(path), "-o", "json", kubeconfig=kubeconfig)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def reasons(doc: dict) -> dict[str, str | None]:
    return {n["node"]: n["reason"] for n in doc["nodes"]}


def test_what_if_applies_the_namespace_selector_and_match_label_keys_of_today(
        kube_cluster, admin, fleet, namespace, labelled, tmp_path):
    n0, n1, n2 = fleet(1, 96, count=3)
    tag = labelled["tag"]
    app = f"web-{tag}"
    for ns, node, labels in ((labelled["blue"], n0, {"app": app, "rev": "1"}),
                             (labelled["red"], n1, {"app": app, "rev": "1"}),
                             (labelled["blue"], n2, {"app": app, "rev": "2"})):
        p = sched_pod(plain(), namespace=ns, node=node)
        p["metadata"]["labels"] = labels
        create(admin, ns, p)
    kubeconfig = str(kube_cluster.kubeconfig(ADMIN))
    incoming = valid_at({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "anti", "namespace": namespace, "labels": {"app": app, "rev": "1"}},
        "spec": {"nodeSelector": fleet.selector, "containers": [plain(name="c")], "affinity": {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST,
                "namespaceSelector": {"matchLabels": {"team": f"blue-{tag}"}}}]}}}})
    # the blue namespace's pods repel it; the red one's and its own namespace's do not
    doc = what_if(tmp_path, kubeconfig, incoming)
    assert reasons(doc) == {n0: ANTI, n1: None, n2: ANTI}, doc["nodes"]
    assert doc["fits"] is True and doc["bindTo"]["node"] == n1

    # matchLabelKeys [rev]: merged as rev In (1), so n2's pod (rev 2) repels it no more
    term = incoming["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["matchLabelKeys"] = ["rev"]
    assert reasons(what_if(tmp_path, kubeconfig, valid_at(incoming))) == {n0: ANTI, n1: None, n2: None}

    # the red namespace relabelled blue: its pod repels it too, on the next answer
    k.CoreV1Api(admin).patch_namespace(labelled["red"], {"metadata": {"labels": {"team": f"blue-{tag}"}}})
    assert reasons(what_if(tmp_path, kubeconfig, incoming)) == {n0: ANTI, n1: ANTI, n2: None}
    assert doc["pod"] == f"{namespace}/anti"


def test_what_if_of_a_term_of_the_wrong_shape_names_the_field(kube_cluster, admin, namespace, tmp_path):
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": namespace},
           "spec": {"containers": [plain(name="c")], "affinity": {"podAntiAffinity": {
               "requiredDuringSchedulingIgnoredDuringExecution": [{
                   "labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOST,
                   "matchLabelKeys": "app"}]}}}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    out = explain("what-if", str(path), kubeconfig=str(kube_cluster.kubeconfig(ADMIN)))
    flat = " ".join(out.stdout.split()) + out.stderr
    assert "Traceback" not in flat
    assert "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].matchLabelKeys" \
        in flat.replace(" ", ""), flat
