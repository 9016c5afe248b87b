"""A real Prometheus on 127.0.0.1 scrapes a live allocator and a live webhook (registered with
the test API server for one namespace) while pods are placed, denied and left pending: every
PromQL expression of the dashboard returns data, and the rules load."""

from __future__ import annotations

import json

import kubernetes.client as k
import pytest
import yaml

from tests.builders import slice_
from tests.harness.kube import ADMIN
from tests.harness.kubectl import kubectl
from tests.harness.registration import REPO_ROOT, wait_until_called, webhook_configurations
from tests.harness.wait import wait_for
from tests.harness.webhook import WebhookProcess
from webhook.metrics.pending_metrics import KNOWN

from .cluster import create, pod, wait_bound, wait_unschedulable
from .prometheus import MONITORING, PrometheusProcess

pytestmark = pytest.mark.cluster

MIXED_CONFIG = REPO_ROOT / "manifests" / "overlays" / "mixed" / "config.yaml"
SCOPE = "mthreads-observe-test"  # namespace label the test's webhook configurations select


def dashboard_queries() -> list[str]:
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", ())]
    # Grafana's variables, as Grafana fills them in: all nodes, a rate window of 4 scrapes
    return [e.replace("$__rate_interval", "1m").replace("$node", ".*") for e in exprs]


@pytest.fixture
def webhook_for(kube_cluster, tmp_path):
    """The real webhook, registered for one namespace only (other tests' pods never see it)."""
    made = []

    def register(ns: str) -> WebhookProcess:
        server = WebhookProcess(tmp_path / "webhook", config=str(MIXED_CONFIG)).start()
        made.append(server)
        docs = webhook_configurations(server.url, server.ca)
        for doc in docs:
            doc["metadata"]["name"] = f"{SCOPE}-{ns}"
            for hook in doc["webhooks"]:
                hook["namespaceSelector"] = {"matchLabels": {SCOPE: ns}}
        applied = kubectl(kube_cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert applied.returncode == 0, applied.stderr
        made.append(f"{SCOPE}-{ns}")
        return server

    yield register
    for m in made:
        if isinstance(m, str):
            kubectl(kube_cluster, ADMIN, "delete",
                    "mutatingwebhookconfiguration,validatingwebhookconfiguration", m, "--ignore-not-found")
    for m in made:
        if not isinstance(m, str):
            m.stop()


def test_dashboard_queries_return_data(admin, kube_cluster, fleet, namespace, start_allocator,
                                       webhook_for, tmp_path):
    k.CoreV1Api(admin).patch_namespace(namespace, {"metadata": {"labels": {SCOPE: namespace}}})
    s4, = fleet(2, 96)
    s5, = fleet(1, 160)
    alloc = start_allocator()
    server = webhook_for(namespace)
    alloc_target = alloc.metrics_url.removeprefix("http://")
    prom = PrometheusProcess(tmp_path, {
        "allocator": {"static_configs": [{"targets": [alloc_target]}]},
        "webhook": {"scheme": "https", "tls_config": {"ca_file": server.ca},
                    "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]},
    }).start()
    try:
        wait_for(prom.ready, 60, what="prometheus ready", alive=prom)
        alloc.wait_healthy()
        # as users write them, through the API server and the webhook: placed, denied, and
        # one that fits nowhere (the only S5000 card is taken whole); the webhook sets the
        # scheduler name
        user = pod(slice_(32, 8, name="train"), name="slice")
        user["spec"].pop("schedulerName")
        probe = json.loads(json.dumps(user))
        probe["metadata"] = {"name": "probe", "namespace": namespace}
        probe.pop("status")
        wait_until_called(kube_cluster, namespace, json.dumps(probe))
        create(admin, namespace, user)
        for name in ("whole-s5000", "second-s5000"):
            p = pod(slice_(160, 16, name="c"), name=name)
            p["spec"].pop("schedulerName")
            create(admin, namespace, p)
            if name == "whole-s5000":
                # bound before the second comes: two pods created in the same second would be
                # decided in name order (kube-scheduler's queue order: priority, age, name)
                first = wait_bound(admin, namespace, "whole-s5000")
        bad = pod(slice_(3, name="c"), name="denied")
        with pytest.raises(k.ApiException) as denied:
            create(admin, namespace, bad)
        assert "sgpu-memory=3 is not valid" in denied.value.body
        assert first["spec"]["nodeName"] == s5 and wait_bound(admin, namespace, "slice")["spec"]["nodeName"] == s4
        wait_unschedulable(admin, namespace, "second-s5000")

        missing = {}

        def all_answer():
            missing.clear()
            for q in dashboard_queries():
                if not prom.query(q):
                    missing[q] = "no data"
            return not missing
        try:
            wait_for(all_answer, 90, interval=1, what="every dashboard query to return data")
        except AssertionError:
            raise AssertionError(f"queries without data: {json.dumps(missing, indent=1)}") from None
        nodes = prom.api("label/node/values", **{"match[]": "hami_gpu_memory_limit_bytes"})["data"]
        assert {s4, s5} <= set(nodes)  # the dashboard's node variable
        # the values Prometheus holds are the allocator's: the S5000 card is full
        full = prom.query(f'hami_node_gpu_memory_allocated_ratio{{node="{s5}"}}')
        assert [float(r["value"][1]) for r in full] == [1.0]
        pending = prom.query('mthreads_allocator_pending_pod_created_timestamp_seconds'
                             f'{{namespace="{namespace}"}}')
        assert [r["metric"]["pod"] for r in pending] == ["second-s5000"], pending
        assert pending[0]["metric"]["reason"] in KNOWN  # a reason the allocator gave
        days = float(prom.query(dashboard_queries()[-1])[0]["value"][1])
        assert 300 < days <= 366  # `certs` makes a serving certificate for 365 days
        rules = prom.api("rules")["data"]["groups"]
        assert {r["name"] for g in rules for r in g["rules"]} == _alert_names()
        assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    finally:
        prom.stop()


def _alert_names() -> set[str]:
    doc = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"]}

