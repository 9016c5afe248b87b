"""The chart rendered with `helm template`: values, schema, certificates and Kubernetes versions.

A newer cluster than the test API server (1.20) is checked by rendering for it and validating
every object against that version's strict schemas (kubernetes-validate); a missing schema
means the version removed that API, and fails.
"""

from __future__ import annotations

import base64

import kubernetes_validate
import pytest
import yaml

from tests.chart.helm import CHART, EXAMPLES, config_of, helm, one, render

NEWER = [f"1.{minor}.0" for minor in range(25, 35)]
MODES = {
    "allocator": [],
    "extender": ["--set", "mode=extender"],
    "cert-manager": ["--set", "certificates.mode=certManager"],
    "network-policy": ["--set", "webhook.networkPolicy.enabled=true",
                       "--set", "webhook.networkPolicy.apiServerCIDRs={10.0.0.1/32,192.0.2.0/24}"],
}
API_VERSIONS_1_20 = {"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1beta1",
                     "admissionregistration.k8s.io/v1", "networking.k8s.io/v1"}


def test_helm_lint_is_clean():
    out = helm("lint", str(CHART), "--strict")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("version", NEWER)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_object_passes_the_strict_schemas_of_its_version(version, mode):
    for doc in render(*MODES[mode], kube_version=version):
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue  # cert-manager's CRDs, not Kubernetes'
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{version} has no {doc['apiVersion']} {doc['kind']} (removed API)")
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{version} {doc['kind']}/{doc['metadata']['name']}: {e.message}")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_1_20_render_uses_only_what_1_20_serves(mode):
    for doc in render(*MODES[mode]):
        if not doc["apiVersion"].startswith("cert-manager.io/"):
            assert doc["apiVersion"] in API_VERSIONS_1_20, (doc["kind"], doc["apiVersion"])


@pytest.mark.parametrize("version, expected, insecure_port_flag", [
    ("1.20.2", "v1beta1", True), ("1.21.0", "v1beta1", True), ("1.22.0", "v1beta2", True),
    ("1.23.0", "v1beta2", False), ("1.24.0", "v1beta2", False), ("1.25.0", "v1", False),
    ("1.34.0", "v1", False)])
def test_kube_scheduler_configuration_follows_the_version(version, expected, insecure_port_flag):
    docs = render("--set", "mode=extender", kube_version=version)
    conf = yaml.safe_load(one(docs, "ConfigMap", "mthreads-scheduler-config")["data"]["scheduler-config.yaml"])
    assert conf["apiVersion"] == f"kubescheduler.config.k8s.io/{expected}"
    assert [p["schedulerName"] for p in conf["profiles"]] == ["hami-scheduler"]
    assert conf["percentageOfNodesToScore"] == 0  # kube-scheduler's adaptive node sample
    (container,) = one(docs, "Deployment", "hami-scheduler")["spec"]["template"]["spec"]["containers"]
    assert ("--port=0" in container["command"]) is insecure_port_flag
    assert container["image"] == f"registry.k8s.io/kube-scheduler:v{version}"  # the cluster's, by default


def test_the_node_sample_is_a_value():
    docs = render("--set", "mode=extender", "--set", "scheduler.kubeScheduler.percentageOfNodesToScore=100")
    conf = yaml.safe_load(one(docs, "ConfigMap", "mthreads-scheduler-config")["data"]["scheduler-config.yaml"])
    assert conf["percentageOfNodesToScore"] == 100


@pytest.mark.parametrize("version, expected", [("1.20.2", "policy/v1beta1"), ("1.21.0", "policy/v1"),
                                               ("1.34.0", "policy/v1")])
def test_pdb_api_version(version, expected):
    assert one(render(kube_version=version), "PodDisruptionBudget", "mthreads-webhook")["apiVersion"] == expected


# --- values ---------------------------------------------------------------------------------

BAD = {  # --set value -> what the error names
    "devices.mthreads.memoryPerCard=null": "missing property 'memoryPerCard'",
    "devices.mthreads.memoryPerCard={1}": "'/devices/mthreads/memoryPerCard/0': minimum: got 1, want 2",
    "devices.mthreads.memoryPerCard=1": "'/devices/mthreads/memoryPerCard': minimum: got 1, want 2",
    "devices.mthreads.memoryPerCard={big}": "'/devices/mthreads/memoryPerCard/0': got string, want integer",
    "mode=both": "'/mode': value must be one of 'allocator', 'extender'",
    "allocator.gpuPolicy=random": "'/allocator/gpuPolicy': value must be one of 'binpack', 'spread'",
    "devices.mthreads.enabled=maybe": "'/devices/mthreads/enabled': got string, want boolean",
    "devices.mthreads.memoryPerCards={160}": "additional properties 'memoryPerCards' not allowed",
    "certificates.mode=vault": "'/certificates/mode': value must be one of",
    "webhook.networkPolicy.enabled=true": "'/webhook/networkPolicy/apiServerCIDRs': minItems: got 0, want 1",
    "webhook.failurePolicy=Maybe": "'/webhook/failurePolicy'",
    "scheduler.kubeScheduler.percentageOfNodesToScore=101":
        "'/scheduler/kubeScheduler/percentageOfNodesToScore': maximum: got 101, want 100",
    "scheduler.kubeScheduler.percentageOfNodesToScore=all":
        "'/scheduler/kubeScheduler/percentageOfNodesToScore': got string, want integer",
}


@pytest.mark.parametrize("value", sorted(BAD))
def test_bad_values_are_refused_naming_the_value(value):
    out = helm("template", "hami", str(CHART), "--set", value)
    assert out.returncode != 0
    assert BAD[value] in out.stderr, out.stderr


def test_an_empty_memory_per_card_list_is_refused(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("devices:\n  mthreads:\n    memoryPerCard: []\n")
    out = helm("template", "hami", str(CHART), "-f", str(values))
    assert out.returncode != 0
    assert "'/devices/mthreads/memoryPerCard': minItems: got 0, want 1" in out.stderr


def test_the_config_file_is_the_values_at_the_same_paths():
    assert config_of(render()) == {
        "schedulerName": "hami-scheduler", "forceOverwriteDefaultScheduler": True,
        "devices": {"mthreads": {"enabled": True, "memoryPerCard": [96],
                                 "resourceCountName": "mthreads.com/vgpu",
                                 "resourceMemoryName": "mthreads.com/sgpu-memory",
                                 "resourceCoreName": "mthreads.com/sgpu-core"}},
        "allocator": {"user": "system:serviceaccount:kube-system:mthreads-allocator", "extraWriters": [],
                      "nodePolicy": "binpack", "gpuPolicy": "spread"}}
    custom = config_of(render("--set", "schedulerName=gpu-sched", "--set", "forceOverwriteDefaultScheduler=false",
                              "--set", "devices.mthreads.enabled=false", "--set", "allocator.nodePolicy=spread",
                              "--set", "allocator.extraWriters={system:node:x}",
                              "--set", "devices.mthreads.resourceCoreName=example.com/core"))
    assert custom["schedulerName"] == "gpu-sched" and custom["forceOverwriteDefaultScheduler"] is False
    assert custom["devices"]["mthreads"]["enabled"] is False
    assert custom["devices"]["mthreads"]["resourceCoreName"] == "example.com/core"
    assert custom["allocator"]["nodePolicy"] == "spread"
    assert custom["allocator"]["extraWriters"] == ["system:node:x"]


def test_the_allocator_user_follows_the_release_namespace():
    docs = render(namespace="gpu-system")
    assert config_of(docs)["allocator"]["user"] == "system:serviceaccount:gpu-system:mthreads-allocator"
    assert one(docs, "ClusterRoleBinding", "mthreads-allocator")["subjects"][0]["namespace"] == "gpu-system"


@pytest.mark.parametrize("values, capacities", [
    ([], [96]), (["-f", str(EXAMPLES / "values-s5000.yaml")], [160]),
    (["-f", str(EXAMPLES / "values-mixed.yaml")], [96, 160])])
def test_fleet_values_files(values, capacities):
    assert config_of(render(*values))["devices"]["mthreads"]["memoryPerCard"] == capacities


def checksums(docs):
    """Pod template annotations of the Deployments that mount the config file."""
    return {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]
            for d in docs if d["kind"] == "Deployment"
            and {"name": "mthreads-webhook-config"} in [v.get("configMap") for v in d["spec"]["template"]["spec"]["volumes"]]}


@pytest.mark.parametrize("mode", ["allocator", "extender"])
def test_a_config_change_rolls_every_pod_that_reads_it(mode):
    before = checksums(render("--set", f"mode={mode}"))
    after = checksums(render("--set", f"mode={mode}", "-f", str(EXAMPLES / "values-s5000.yaml")))
    assert set(before) == set(after) == {"allocator": {"mthreads-webhook", "hami-scheduler"},
                                         "extender": {"mthreads-webhook", "mthreads-extender"}}[mode]
    for name in before:
        assert before[name] != after[name], f"{name} would keep running the old config"


def test_the_scheduler_deployment_keeps_its_selector_across_modes():
    """A Deployment's selector cannot change: `helm upgrade --set mode=extender` (or back)
    replaces the allocator's hami-scheduler with kube-scheduler's in place."""
    selectors = {mode: one(render("--set", f"mode={mode}"), "Deployment", "hami-scheduler")["spec"]["selector"]
                 for mode in ("allocator", "extender")}
    assert selectors["allocator"] == selectors["extender"]


def test_the_scheduler_deployment_is_named_as_the_document_restarts_it():
    for mode in ("allocator", "extender"):
        deploy = one(render("--set", f"mode={mode}"), "Deployment", "hami-scheduler")
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert container["name"] == {"allocator": "allocator", "extender": "kube-scheduler"}[mode]


# --- certificates ---------------------------------------------------------------------------

def ca_bundles(docs):
    return [hook["clientConfig"].get("caBundle")
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for hook in one(docs, kind, "mthreads-webhook")["webhooks"]]


def test_helm_generated_certificate_fills_every_ca_bundle():
    from cryptography import x509
    docs = render()
    secret = one(docs, "Secret", "mthreads-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(ca_bundles(docs)) == {secret["data"]["ca.crt"]}
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "mthreads-webhook.kube-system.svc" in names


def test_cert_manager_mode():
    docs = render("--set", "certificates.mode=certManager")
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert ca_bundles(docs) == [None] * 4  # the injector writes them
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(docs, kind, "mthreads-webhook")["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "kube-system/mthreads-webhook"
    assert one(docs, "Certificate", "mthreads-webhook")["spec"]["secretName"] == "mthreads-webhook-tls"


def test_existing_secret_mode():
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    docs = render("--set", "certificates.mode=secret", "--set", "certificates.secretName=my-tls",
                  "--set-string", f"certificates.caBundle={pem}")
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert set(ca_bundles(docs)) == {base64.b64encode(pem.encode()).decode()}
    volumes = one(docs, "Deployment", "mthreads-webhook")["spec"]["template"]["spec"]["volumes"]
    assert {"secretName": "my-tls", "defaultMode": 0o440} in [v.get("secret") for v in volumes]
    assert ca_bundles(render("--set", "certificates.mode=secret")) == [None] * 4


# --- pods -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["allocator", "extender"])
def test_every_pod_is_locked_down(mode):
    for deploy in (d for d in render("--set", f"mode={mode}") if d["kind"] == "Deployment"):
        spec = deploy["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
            for m in c["volumeMounts"]:  # writable only where an emptyDir is mounted
                assert m.get("readOnly") is True or "emptyDir" in volumes[m["name"]], (deploy["metadata"]["name"], m)
            if c["name"] != "kube-scheduler":
                assert c["image"] == "mthreads-webhook:0.1.0"


def test_image_values():
    docs = render("--set", "image.repository=registry.example/mthreads-webhook", "--set", "image.tag=0.2.0")
    images = {c["image"] for d in docs if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example/mthreads-webhook:0.2.0"}


def test_network_policy_admits_only_the_api_server_to_the_webhook_port():
    assert not [d for d in render() if d["kind"] == "NetworkPolicy"]
    policy = one(render(*MODES["network-policy"]), "NetworkPolicy", "mthreads-webhook")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "192.0.2.0/24"}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "webhook"


# --- monitoring -----------------------------------------------------------------------------

MONITORING = CHART / "files" / "monitoring"


def test_the_dashboard_configmap_carries_the_dashboard_file_for_grafanas_sidecar():
    cm = one(render(), "ConfigMap", "hami-mthreads-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["mthreads-gpu-sharing.json"] == (MONITORING / "dashboard.json").read_text().rstrip("\n")
    assert not [d for d in render("--set", "monitoring.dashboard.enabled=false")
                if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-mthreads-dashboard"]


@pytest.mark.parametrize("mode, placer, component, port", [
    ("allocator", "allocator", "scheduler", "metrics"), ("extender", "extender", "extender", "http")])
def test_operator_objects_follow_the_rules_file_and_select_the_chart_pods(mode, placer, component, port):
    assert not [d for d in render() if d["apiVersion"].startswith("monitoring.coreos.com/")]
    docs = render("--set", f"mode={mode}", "--set", "monitoring.prometheusRule.enabled=true",
                  "--set", "monitoring.serviceMonitor.enabled=true")
    rule = one(docs, "PrometheusRule", "hami-mthreads")
    assert rule["spec"] == yaml.safe_load((MONITORING / "rules.yaml").read_text())
    assert "{{ $labels.pod }}" in yaml.safe_dump(rule["spec"])  # Prometheus' templates untouched

    monitor = one(docs, "ServiceMonitor", "hami-mthreads-webhook")["spec"]
    service = one(docs, "Service", "mthreads-webhook")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert monitor["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"] == "mthreads-webhook-tls"

    pods = one(docs, "PodMonitor", f"hami-mthreads-{placer}")["spec"]
    template = next(d for d in docs if d["kind"] == "Deployment" and
                    d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == component)
    assert pods["selector"]["matchLabels"].items() <= template["spec"]["template"]["metadata"]["labels"].items()
    ports = [p["name"] for c in template["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
    assert pods["podMetricsEndpoints"][0]["port"] == port and port in ports
