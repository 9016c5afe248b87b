"""The chart rendered with `helm template`: values, schema, certificates and Kubernetes versions.

A newer cluster than the test API server (1.20) is checked by rendering for it and validating
every object against that version's strict schemas (kubernetes-validate); a missing schema
means the version removed that API, and fails.
"""

from __future__ import annotations

import base64
import json

import kubernetes_validate
import pytest
import yaml

from tests.chart.helm import CHART, EXAMPLES, config_of, helm, one, render, selector_matches

NEWER = [f"1.{minor}.0" for minor in range(25, 38)]
MODES = {
    "allocator": [],
    "extender": ["--set", "mode=extender"],
    "cert-manager": ["--set", "certificates.mode=certManager"],
    "network-policy": ["--set", "webhook.networkPolicy.enabled=true",
                       "--set", "webhook.networkPolicy.apiServerCIDRs={10.0.0.1/32,192.0.2.0/24}",
                       "--set", "scheduler.networkPolicy.enabled=true",
                       "--set-json", 'scheduler.networkPolicy.metricsFrom=[{"namespaceSelector": {"matchLabels": '
                       '{"kubernetes.io/metadata.name": "monitoring"}}, "podSelector": {"matchLabels": '
                       '{"app.kubernetes.io/name": "prometheus"}}}, {"ipBlock": {"cidr": "10.1.0.0/16"}}]'],
    "extender-network-policy": ["--set", "mode=extender", "--set", "scheduler.networkPolicy.enabled=true",
                                "--set", "webhook.exemptNamespaces={kube-system,cert-manager}",
                                "--set", "webhook.namespaceSelector.matchLabels.gpu=yes"],
}
API_VERSIONS_1_20 = {"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1beta1",
                     "admissionregistration.k8s.io/v1", "networking.k8s.io/v1"}


def containers(deploy: dict) -> dict[str, dict]:
    """A Deployment's containers by name, in their order."""
    return {c["name"]: c for c in deploy["spec"]["template"]["spec"]["containers"]}


def scheduler_config(docs: list[dict]) -> dict:
    return yaml.safe_load(one(docs, "ConfigMap", "mthreads-scheduler-config")["data"]["scheduler-config.yaml"])


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
    container = containers(one(docs, "Deployment", "hami-scheduler"))["kube-scheduler"]
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
    "devices.mthreads.maxInstancesPerCard=0": "'/devices/mthreads/maxInstancesPerCard': minimum: got 0, want 1",
    "devices.mthreads.maxInstancesPerCard=17": "'/devices/mthreads/maxInstancesPerCard': maximum: got 17, want 16",
    "certificates.mode=vault": "'/certificates/mode': value must be one of",
    "webhook.networkPolicy.enabled=true": "'/webhook/networkPolicy/apiServerCIDRs': minItems: got 0, want 1",
    "webhook.failurePolicy=Maybe": "'/webhook/failurePolicy'",
    "scheduler.kubeScheduler.percentageOfNodesToScore=101":
        "'/scheduler/kubeScheduler/percentageOfNodesToScore': maximum: got 101, want 100",
    "scheduler.kubeScheduler.percentageOfNodesToScore=all":
        "'/scheduler/kubeScheduler/percentageOfNodesToScore': got string, want integer",
    "webhook.exemptNamespaces={Kube_System}": "'/webhook/exemptNamespaces/0'",
    "webhook.exemptNamespaces=kube-system": "'/webhook/exemptNamespaces': got string, want array",
    "webhook.namespaceSelector.matchExpressions[0].key=team": "'/webhook/namespaceSelector/matchExpressions/0'",
    "webhook.namespaceSelector.matchNames={a}": "additional properties 'matchNames' not allowed",
    "scheduler.networkPolicy.enabled=yes": "'/scheduler/networkPolicy/enabled': got string, want boolean",
    "scheduler.networkPolicy.metricsFrom[0].nodeSelector.x=y": "additional properties 'nodeSelector' not allowed",
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
                                 "resourceCoreName": "mthreads.com/sgpu-core",
                                 "maxInstancesPerCard": 16}},
        "allocator": {"user": "system:serviceaccount:kube-system:mthreads-allocator", "extraWriters": [],
                      "nodePolicy": "binpack", "gpuPolicy": "spread"}}
    custom = config_of(render("--set", "schedulerName=gpu-sched", "--set", "forceOverwriteDefaultScheduler=false",
                              "--set", "devices.mthreads.enabled=false", "--set", "allocator.nodePolicy=spread",
                              "--set", "allocator.extraWriters={system:node:x}",
                              "--set", "devices.mthreads.resourceCoreName=example.com/core",
                              "--set", "devices.mthreads.maxInstancesPerCard=4"))
    assert custom["schedulerName"] == "gpu-sched" and custom["forceOverwriteDefaultScheduler"] is False
    assert custom["devices"]["mthreads"]["enabled"] is False
    assert custom["devices"]["mthreads"]["resourceCoreName"] == "example.com/core"
    assert custom["devices"]["mthreads"]["maxInstancesPerCard"] == 4
    assert custom["allocator"]["nodePolicy"] == "spread"
    assert custom["allocator"]["extraWriters"] == ["system:node:x"]


def test_the_allocator_user_follows_the_release_namespace():
    docs = render(namespace="gpu-system")
    assert config_of(docs)["allocator"]["user"] == "system:serviceaccount:gpu-system:mthreads-allocator"
    assert one(docs, "ClusterRoleBinding", "mthreads-allocator")["subjects"][0]["namespace"] == "gpu-system"


@pytest.mark.parametrize("mode, account", [("allocator", "mthreads-allocator"), ("extender", "mthreads-scheduler")])
def test_the_allocator_user_is_the_account_of_the_pods_that_bind(mode, account):
    """Rule 10 lets only allocator.user write the allocation annotations: the chart fills in the
    ServiceAccount of the container that binds (the allocator, or the extender, which runs in
    kube-scheduler's pod), so the Binding it posts is let through and nobody else's is."""
    docs = render("--set", f"mode={mode}", namespace="gpu-system")
    user = config_of(docs)["allocator"]["user"]
    assert user == f"system:serviceaccount:gpu-system:{account}"
    deploy = one(docs, "Deployment", "hami-scheduler")
    assert {"allocator": "allocator", "extender": "extender"}[mode] in containers(deploy)
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == account
    # a value given is kept as given
    given = render("--set", f"mode={mode}", "--set", "allocator.user=system:serviceaccount:x:y")
    assert config_of(given)["allocator"]["user"] == "system:serviceaccount:x:y"


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
    assert set(before) == set(after) == {"mthreads-webhook", "hami-scheduler"}
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
        assert list(containers(deploy)) == {"allocator": ["allocator"], "extender": ["kube-scheduler", "extender"]}[mode]


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


def test_a_metrics_peer_is_either_an_address_block_or_selectors(tmp_path):
    """NetworkPolicy refuses a peer with an ipBlock and a selector; the chart does at once."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"scheduler": {"networkPolicy": {"enabled": True, "metricsFrom": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {"matchLabels": {"app": "prometheus"}}}]}}}))
    out = helm("template", "hami", str(CHART), "-f", str(values))
    assert out.returncode != 0
    assert "'/scheduler/networkPolicy/metricsFrom/0': maxProperties: got 2, want 1" in out.stderr


@pytest.mark.parametrize("mode", ["allocator", "extender"])
def test_the_scheduler_network_policy_admits_only_the_scrapers_to_the_metrics_port(mode):
    assert not [d for d in render("--set", f"mode={mode}") if d["kind"] == "NetworkPolicy"]
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
             {"ipBlock": {"cidr": "10.1.0.0/16"}}]
    docs = render("--set", f"mode={mode}", "--set", "scheduler.networkPolicy.enabled=true",
                  "--set-json", f"scheduler.networkPolicy.metricsFrom={json.dumps(peers)}")
    policy = one(docs, "NetworkPolicy", "hami-scheduler")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]  # one rule: these peers, this port, nothing else
    assert rule["from"] == peers
    assert rule["ports"] == [{"protocol": "TCP", "port": 9090}]
    deploy = one(docs, "Deployment", "hami-scheduler")
    assert selector_matches(policy["podSelector"], deploy["spec"]["template"]["metadata"]["labels"])
    # the port admitted is the one that serves /metrics, and the only port of the pod's own
    metrics = [p for c in containers(deploy).values() for p in c.get("ports", []) if p["name"] == "metrics"]
    assert metrics == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    # the webhook's pods are not this policy's (they have their own)
    webhook = one(docs, "Deployment", "mthreads-webhook")["spec"]["template"]["metadata"]["labels"]
    assert not selector_matches(policy["podSelector"], webhook)


def test_the_scheduler_network_policy_without_scrapers_admits_nothing():
    policy = one(render("--set", "mode=extender", "--set", "scheduler.networkPolicy.enabled=true"),
                 "NetworkPolicy", "hami-scheduler")["spec"]
    assert policy["policyTypes"] == ["Ingress"] and policy["ingress"] == []


# --- extender mode: the verbs reachable by kube-scheduler alone -----------------------------------

@pytest.mark.parametrize("version", ["1.20.2", "1.25.0", "1.34.0"])
def test_the_extender_is_reachable_by_its_kube_scheduler_alone(version):
    """The extender is a container of kube-scheduler's pod: its verbs listen on the pod's
    loopback, kube-scheduler calls them there, and nothing routes to them from outside."""
    docs = render("--set", "mode=extender", kube_version=version)
    deploy = one(docs, "Deployment", "hami-scheduler")
    pod = deploy["spec"]["template"]
    assert list(containers(deploy)) == ["kube-scheduler", "extender"]
    extender = containers(deploy)["extender"]
    assert extender["args"][0] == "extender"
    binds = [a for a in extender["args"] if a.startswith("--bind=")]
    assert binds == ["--bind=127.0.0.1:8888"]  # the verbs: loopback only
    assert "--metrics-bind=0.0.0.0:9090" in extender["args"]  # GET /metrics, /healthz, /readyz only
    assert [p["containerPort"] for p in extender["ports"]] == [9090]
    for probe in ("readinessProbe", "livenessProbe"):  # probes never touch the verbs' port
        assert extender[probe]["httpGet"]["port"] == "metrics"
    assert pod["spec"].get("hostNetwork") is not True  # loopback is the pod's own

    ext, = scheduler_config(docs)["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888"
    assert ext["enableHTTPS"] is False  # plain HTTP is fine on the pod's loopback

    # no Service, Ingress or other Deployment leads to the extender
    assert not [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mthreads-extender"]
    assert not [d for d in docs if d["kind"] == "Ingress"]
    for service in (d for d in docs if d["kind"] == "Service"):
        assert service["metadata"]["name"] == "mthreads-webhook"
        assert not selector_matches({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"])
        assert 8888 not in [p.get("targetPort") for p in service["spec"]["ports"]]
    assert not list(ports_named(docs, 8888)), "the verbs' port is declared to the network"


def ports_named(node, number):
    """Every port field (port, containerPort, targetPort, hostPort) of `node` that is `number`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("port", "containerPort", "targetPort", "hostPort") and value == number:
                yield key
            yield from ports_named(value, number)
    elif isinstance(node, list):
        for item in node:
            yield from ports_named(item, number)


def test_each_scheduler_replica_runs_its_own_extender():
    deploy = one(render("--set", "mode=extender", "--set", "scheduler.replicas=3"), "Deployment", "hami-scheduler")
    assert deploy["spec"]["replicas"] == 3 and "extender" in containers(deploy)
    conf = scheduler_config(render("--set", "mode=extender"))
    assert conf["leaderElection"]["leaderElect"] is True  # only the leader schedules, so calls its extender


# --- RBAC per mode ----------------------------------------------------------------------------

ROLE_KINDS = ("ClusterRole", "Role")


def grants(docs: list[dict]) -> dict[str, set[tuple]]:
    """Every right of each ServiceAccount the chart makes ("namespace/name"), through the
    bindings it renders: (where, apiGroup, resource, verb, resource names) for each rule of a
    role of the chart's, or (where, role name) for a role it binds but leaves to Kubernetes
    (the built-in ones); `where` is the binding's namespace, "*" for a ClusterRoleBinding."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d["rules"]
             for d in docs if d["kind"] in ROLE_KINDS}
    accounts: dict[str, set[tuple]] = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": set()
                                       for d in docs if d["kind"] == "ServiceAccount"}
    bound = set()
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        where = binding["metadata"]["namespace"] if binding["kind"] == "RoleBinding" else "*"
        ref = binding["roleRef"]
        role = (ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])
        bound.add(role)
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", binding["metadata"]["name"]
            account = f"{subject['namespace']}/{subject['name']}"
            assert account in accounts, f"{binding['metadata']['name']} binds {account}, not the chart's"
            if role not in roles:
                accounts[account].add((where, ref["name"]))
                continue
            accounts[account] |= {(where, group, resource, verb, tuple(rule.get("resourceNames", [])))
                                  for rule in roles[role] for group in rule["apiGroups"]
                                  for resource in rule["resources"] for verb in rule["verbs"]}
    assert set(roles) <= bound, f"roles bound to nobody: {set(roles) - bound}"
    return accounts


LEASES = "coordination.k8s.io"
NS = "gpu-system"  # the release's namespace, not kube-system: the Leases' roles must follow it
ALLOCATOR_GRANTS = {
    f"{NS}/mthreads-webhook": set(),  # it only answers AdmissionReviews
    f"{NS}/mthreads-allocator": {
        ("*", "", "pods", "get", ()), ("*", "", "pods", "list", ()), ("*", "", "pods", "watch", ()),  # no write
        ("*", "", "pods/binding", "create", ()),
        ("*", "", "pods/status", "patch", ()),  # PodScheduled=False
        ("*", "", "nodes", "get", ()), ("*", "", "nodes", "list", ()), ("*", "", "nodes", "watch", ()),
        ("*", "", "persistentvolumeclaims", "list", ()), ("*", "", "persistentvolumeclaims", "watch", ()),
        ("*", "", "persistentvolumes", "list", ()), ("*", "", "persistentvolumes", "watch", ()),
        ("*", "storage.k8s.io", "storageclasses", "list", ()),
        ("*", "storage.k8s.io", "storageclasses", "watch", ()),
        ("*", "", "namespaces", "list", ()), ("*", "", "namespaces", "watch", ()),  # their labels
        ("*", "storage.k8s.io", "csinodes", "list", ()), ("*", "storage.k8s.io", "csinodes", "watch", ()),
        ("*", "", "events", "create", ()), ("*", "", "events", "patch", ()),
        (NS, LEASES, "leases", "create", ()), (NS, LEASES, "leases", "get", ("mthreads-allocator",)),
        (NS, LEASES, "leases", "update", ("mthreads-allocator",))},
}
EXTENDER_GRANTS = {  # no allocator identity at all
    f"{NS}/mthreads-webhook": set(),
    # kube-scheduler and its extender container: one pod, one ServiceAccount
    f"{NS}/mthreads-scheduler": {
        ("*", "system:kube-scheduler"), ("*", "system:volume-scheduler"),
        ("kube-system", "extension-apiserver-authentication-reader"),  # its authenticated /healthz
        ("*", "", "pods/status", "patch", ()),  # the extender's requeue; never a patch of pods
        ("*", "", "namespaces", "list", ()), ("*", "", "namespaces", "watch", ()),  # their labels
        (NS, LEASES, "leases", "create", ()), (NS, LEASES, "leases", "get", ("mthreads-scheduler",)),
        (NS, LEASES, "leases", "update", ("mthreads-scheduler",))},
}
GRANTS = {mode: EXTENDER_GRANTS if mode.startswith("extender") else ALLOCATOR_GRANTS for mode in MODES}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_mode_grants_each_account_exactly_what_its_code_calls(mode):
    """Every (where, apiGroup, resource, verb) of every ServiceAccount, per mode: one right
    more, one account more or one binding of an account not the chart's fails."""
    assert grants(render(*MODES[mode], namespace=NS)) == GRANTS[mode]


def test_extender_mode_leaves_no_trace_of_the_allocators_identity():
    docs = render("--set", "mode=extender", namespace=NS)
    assert "mthreads-allocator" not in yaml.safe_dump_all(
        [d for d in docs if d["kind"] in ("ServiceAccount", *ROLE_KINDS, "ClusterRoleBinding", "RoleBinding",
                                          "Deployment")])


# --- which namespaces the webhook sees ------------------------------------------------------------

def webhook_entries(docs: list[dict]) -> list[dict]:
    return [hook for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for hook in one(docs, kind, "mthreads-webhook")["webhooks"]]


def namespace(name: str, **labels: str) -> dict:
    """A namespace's labels as a 1.21+ API server stores them."""
    return {"kubernetes.io/metadata.name": name, **labels}


@pytest.mark.parametrize("version", ["1.21.0", "1.25.0", "1.34.0"])
def test_from_1_21_namespaces_are_exempt_by_their_immutable_name(version):
    docs = render(kube_version=version, namespace="gpu-system")
    entries = webhook_entries(docs)
    assert len(entries) == 4
    for hook in entries:  # every entry, the fail-open one included
        selector = hook["namespaceSelector"]
        assert selector == {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                  "values": ["kube-system", "gpu-system"]}]}
        assert not selector_matches(selector, namespace("kube-system"))
        assert not selector_matches(selector, namespace("gpu-system"))  # the release's own
        assert selector_matches(selector, namespace("team"))
        # the label anyone who may label a namespace can set no longer opts out
        assert selector_matches(selector, namespace("team", **{"hami.io/webhook": "ignore"}))


BY_NAME = [f"1.{minor}.0" for minor in range(21, 38)]  # namespaces exempt by their name
# Each entry's failurePolicy from 1.21 and on 1.20. The subresource entry fails open on every
# version: every kubelet's status report and every binding passes it (docs/deploy.md).
FAILURE_POLICIES = {
    "mutate.mthreads.hami.io": ("Fail", "Fail"),
    "validate.mthreads.hami.io": ("Fail", "Fail"),
    "validate-opted-out.mthreads.hami.io": ("Fail", "Ignore"),
    "validate-subresources.mthreads.hami.io": ("Ignore", "Ignore"),
}


def reviewing(entries: list[dict], namespace_labels: dict, pod_labels: dict) -> dict[str, str]:
    """Name -> failurePolicy of the entries that review the creation of a pod with these labels
    in a namespace with these."""
    return {hook["name"]: hook["failurePolicy"] for hook in entries
            if any("pods" in rule["resources"] and "CREATE" in rule["operations"] for rule in hook["rules"])
            and selector_matches(hook["namespaceSelector"], namespace_labels)
            and selector_matches(hook.get("objectSelector"), pod_labels)}


@pytest.mark.parametrize("version", ["1.20.2", *BY_NAME])
def test_from_1_21_the_pod_entries_fail_closed_and_never_on_the_charts_own_pods(version):
    """From 1.21 the release's namespace is exempt by name, so the entry for pods labelled
    hami.io/webhook=ignore fails closed like the others: an outage admits no pod unchecked,
    opted out or not. The chart's own pods (the webhook's among them) are in that namespace
    and meet no fail-closed entry, so they start while no webhook replica answers (else the
    install would wait on itself). On 1.20 that namespace may carry no label (Install, step 1):
    the opted-out entry stays Ignore there, which is what lets those pods start."""
    by_name = version != "1.20.2"
    as_server_labels = namespace if by_name else (lambda name: {})  # no name label on 1.20
    for mode in ("allocator", "extender"):
        docs = render("--set", f"mode={mode}", kube_version=version, namespace="gpu-system")
        entries = webhook_entries(docs)
        assert {hook["name"]: hook["failurePolicy"] for hook in entries} == \
            {name: policies[0 if by_name else 1] for name, policies in FAILURE_POLICIES.items()}
        # a tenant's pod is reviewed at its creation, and fail-closed unless 1.20 and opted out
        tenant = as_server_labels("team")
        assert reviewing(entries, tenant, {"app": "x"}) == \
            {"mutate.mthreads.hami.io": "Fail", "validate.mthreads.hami.io": "Fail"}
        assert reviewing(entries, tenant, {"hami.io/webhook": "ignore"}) == \
            {"validate-opted-out.mthreads.hami.io": "Fail" if by_name else "Ignore"}
        own = [d for d in docs if d["kind"] == "Deployment"]
        assert {d["metadata"]["name"] for d in own} == {"mthreads-webhook", "hami-scheduler"}
        for deploy in own:
            labels = deploy["spec"]["template"]["metadata"]["labels"]
            seen = reviewing(entries, as_server_labels(deploy["metadata"]["namespace"]), labels)
            assert "Fail" not in seen.values(), (mode, deploy["metadata"]["name"], seen)
            if by_name:  # not reviewed at all: the webhook's code is not even asked
                assert seen == {}, (mode, deploy["metadata"]["name"], seen)


def test_the_exempt_namespaces_are_a_value_and_the_selector_narrows():
    docs = render("--set", "webhook.exemptNamespaces={kube-system,cert-manager}",
                  "--set", "webhook.namespaceSelector.matchLabels.gpu=yes", kube_version="1.25.0")
    for hook in webhook_entries(docs):
        selector = hook["namespaceSelector"]
        assert selector["matchExpressions"][0]["values"] == ["kube-system", "cert-manager"]
        assert not selector_matches(selector, namespace("cert-manager", gpu="yes"))
        assert not selector_matches(selector, namespace("team"))  # narrowed: only gpu=yes
        assert selector_matches(selector, namespace("team", gpu="yes"))
    # the release's namespace is added once, whether listed or not
    for values, ns, exempt in ((["--set-json", "webhook.exemptNamespaces=[]"], "gpu-system", ["gpu-system"]),
                               ([], "kube-system", ["kube-system"])):
        docs = render(*values, kube_version="1.25.0", namespace=ns)
        assert webhook_entries(docs)[0]["namespaceSelector"]["matchExpressions"][0]["values"] == exempt


def test_on_1_20_the_label_is_the_opt_out():
    """1.20 namespaces carry no kubernetes.io/metadata.name (a label there is the namespace
    creator's to set, so the name would be forgeable): the hami.io/webhook=ignore label stays."""
    for hook in webhook_entries(render(kube_version="1.20.2")):
        selector = hook["namespaceSelector"]
        assert selector == {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn",
                                                  "values": ["ignore"]}]}
        assert not selector_matches(selector, {"hami.io/webhook": "ignore"})
        assert selector_matches(selector, {})
        # a forged name label exempts nothing on 1.20
        assert selector_matches(selector, {"kubernetes.io/metadata.name": "kube-system"})


# --- monitoring -----------------------------------------------------------------------------

MONITORING = CHART / "files" / "monitoring"


def test_the_dashboard_configmap_carries_the_dashboard_file_for_grafanas_sidecar():
    cm = one(render(), "ConfigMap", "hami-mthreads-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["mthreads-gpu-sharing.json"] == (MONITORING / "dashboard.json").read_text().rstrip("\n")
    assert not [d for d in render("--set", "monitoring.dashboard.enabled=false")
                if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-mthreads-dashboard"]


@pytest.mark.parametrize("mode, placer, component, port", [
    ("allocator", "allocator", "scheduler", "metrics"), ("extender", "extender", "scheduler", "metrics")])
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
