"""`cards what-if FILE` with a spread constraint of today (`minDomains`, which a 1.20 API server
prunes from the pods it stores, but not from a file) against the live cluster's pods: the
answer kube-scheduler of today gives (filtering_test.go: "pods spread across nodes as 2/2/1,
maxSkew is 2, and the number of domains < minDomains, then the third node fits")."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.builders import sched_pod, slice_, spread_constraint
from tests.cli.test_cards_command import explain
from tests.harness.kube import ADMIN
from tests.harness.schema import valid_at
from tests.metrics.cluster import create
from webhook.scheduling.reasons import SPREAD

HOST = "kubernetes.io/hostname"


@pytest.mark.cluster
@pytest.mark.parametrize("min_domains, fits", [(4, {2}), (2, {0, 1, 2}), (None, {0, 1, 2})])
def test_what_if_counts_min_domains_against_the_live_pods(kube_cluster, admin, fleet, namespace,
                                                         tmp_path, min_domains, fits):
    nodes = fleet(1, 96, count=3)
    app = {"app": f"spread-{fleet.tag}"}
    for node, count in zip(nodes, (2, 2, 1)):  # bound as they are created: no scheduler needed
        for _ in range(count):
            p = sched_pod(node=node, phase="Running")
            p["metadata"]["labels"] = dict(app)
            create(admin, namespace, p)
    doc = valid_at({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "spread", "namespace": namespace, "labels": dict(app)},
                    "spec": {"nodeSelector": fleet.selector, "containers": [slice_(8, name="c")],
                             "topologySpreadConstraints": [spread_constraint(
                                 2, HOST, {"matchLabels": app}, min_domains=min_domains)]}})
    path = tmp_path / "spread.yaml"
    path.write_text(yaml.safe_dump(doc))

    out = explain("what-if", str(path), "-o", "json", kubeconfig=str(kube_cluster.kubeconfig(ADMIN)))
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    got = {n["node"]: n["reason"] for n in answer["nodes"] if n["node"] in nodes}
    assert got == {node: None if i in fits else SPREAD for i, node in enumerate(nodes)}
    assert answer["fits"] is True and answer["bindTo"]["node"] in {nodes[i] for i in fits}
