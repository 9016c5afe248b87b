"""Static checks of the plain manifests rendered from the chart (manifests/base, overlays, ...)
and of the examples; the chart itself is tested in tests/chart."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from hack.render_manifests import render_all
from tests.harness.kubectl import KUBECTL

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
EXAMPLES = MANIFESTS / "examples" / "mthreads"

# API versions a Kubernetes 1.20 API server serves (plus cert-manager's CRDs).
API_VERSIONS_1_20 = {
    "v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1beta1",
    "admissionregistration.k8s.io/v1", "coordination.k8s.io/v1",
}
FLEETS = {"base": [96], "overlays/s4000": [96], "overlays/s5000": [160],
          "overlays/mixed": [96, 160], "cert-manager": [96]}
IGNORE = {"hami.io/webhook": "ignore"}


def build(directory):
    proc = subprocess.run([KUBECTL, "kustomize", str(directory)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def selector_matches(selector, labels):
    """Label selector semantics as the API server applies them (enough for In/NotIn/Exists)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


@pytest.fixture(scope="module", params=sorted(FLEETS))
def built(request):
    return request.param, build(MANIFESTS / request.param)


# --- builds -----------------------------------------------------------------------------------

def test_every_build_uses_1_20_api_versions(built):
    name, docs = built
    for d in docs:
        if d["apiVersion"].startswith("cert-manager.io/"):
            assert name == "cert-manager"
            continue
        assert d["apiVersion"] in API_VERSIONS_1_20, f"{d['kind']} uses {d['apiVersion']}"
    pdb = one(docs, "PodDisruptionBudget", "mthreads-webhook")
    assert pdb["apiVersion"] == "policy/v1beta1" and pdb["spec"]["minAvailable"] == 1


def test_everything_namespaced_is_in_kube_system(built):
    _, docs = built
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for d in docs:
        if d["kind"] not in cluster_scoped:
            assert d["metadata"].get("namespace") == "kube-system", d["metadata"]["name"]


def test_manifests_are_rendered_from_the_chart():
    """No object is kept by hand in two places: every file is the chart's render."""
    rendered = render_all()
    on_disk = {str(p.relative_to(MANIFESTS)) for d in {Path(r).parent for r in rendered}
               for p in (MANIFESTS / d).iterdir()}
    assert on_disk == set(rendered), "files beside the rendered ones: " + ", ".join(sorted(on_disk - set(rendered)))
    stale = [rel for rel, text in rendered.items() if (MANIFESTS / rel).read_text() != text]
    assert not stale, f"stale, run `make manifests`: {stale}"


# --- config -----------------------------------------------------------------------------------

def test_config_map_has_the_fleet_capacity_and_spec_shape(built):
    name, docs = built
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "mthreads-webhook-config"]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["devices"]["mthreads"]["memoryPerCard"] == FLEETS[name]
    assert set(config) == {"schedulerName", "forceOverwriteDefaultScheduler", "devices", "allocator"}
    assert set(config["devices"]) == {"mthreads"}
    assert set(config["devices"]["mthreads"]) == {
        "enabled", "memoryPerCard", "resourceCountName", "resourceMemoryName", "resourceCoreName",
        "maxInstancesPerCard"}
    assert config["devices"]["mthreads"]["maxInstancesPerCard"] == 16
    assert config["allocator"] == {
        "user": "system:serviceaccount:kube-system:mthreads-allocator", "extraWriters": [],
        "nodePolicy": "binpack", "gpuPolicy": "spread"}
    assert config["schedulerName"] == "hami-scheduler"
    assert config["forceOverwriteDefaultScheduler"] is True
    # Both Deployments mount this ConfigMap (and roll when it changes: tests/chart).
    for deploy in by_kind(docs, "Deployment"):
        names = [v["configMap"]["name"] for v in deploy["spec"]["template"]["spec"]["volumes"]
                 if "configMap" in v]
        assert names == [cm["metadata"]["name"]]


# --- webhook configurations ---------------------------------------------------------------------

def check_common(hook, path):
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert hook["matchPolicy"] == "Equivalent"
    assert 1 <= hook["timeoutSeconds"] <= 10
    service = hook["clientConfig"]["service"]
    assert service == {"name": "mthreads-webhook", "namespace": "kube-system", "path": path, "port": 443}
    assert "url" not in hook["clientConfig"]
    for rule in hook["rules"]:
        assert rule["apiGroups"] == [""] and rule["apiVersions"] == ["v1"]
        assert rule["scope"] == "Namespaced"
    assert not selector_matches(hook["namespaceSelector"], IGNORE), "labelled namespaces must be left out"
    assert selector_matches(hook["namespaceSelector"], {})


def test_mutating_webhook(built):
    _, docs = built
    (hook,) = one(docs, "MutatingWebhookConfiguration", "mthreads-webhook")["webhooks"]
    check_common(hook, "/mutate")
    assert covered(hook) == {("pods", "CREATE")}
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["failurePolicy"] == "Fail"
    assert not selector_matches(hook["objectSelector"], IGNORE)
    assert selector_matches(hook["objectSelector"], {"app": "x"})


# What the validating webhooks review, and the failurePolicy for an object that is not opted
# out and for one labelled hami.io/webhook=ignore. The subresources write a pod's annotations
# too (docs/deploy.md, "Subresources"); they sit on every kubelet's and scheduler's path, so
# they fail open, and labels must not skip them: a Binding's labels are its author's.
COVERAGE = {
    ("pods", "CREATE"): ("Fail", "Ignore"),
    ("pods", "UPDATE"): ("Fail", "Ignore"),
    ("pods/ephemeralcontainers", "UPDATE"): ("Fail", "Ignore"),  # a debug container: rule 8
    ("pods/status", "UPDATE"): ("Ignore", "Ignore"),
    ("pods/binding", "CREATE"): ("Ignore", "Ignore"),
    ("bindings", "CREATE"): ("Ignore", "Ignore"),  # the legacy path to the same write
}


def covered(hook):
    return {(r, op) for rule in hook["rules"] for r in rule["resources"] for op in rule["operations"]}


def test_validating_webhooks_cover_every_pod_once(built):
    _, docs = built
    hooks = one(docs, "ValidatingWebhookConfiguration", "mthreads-webhook")["webhooks"]
    assert len({h["name"] for h in hooks}) == len(hooks)
    for hook in hooks:
        check_common(hook, "/validate")
    assert set().union(*map(covered, hooks)) == set(COVERAGE)  # and nothing else (no DELETE, exec)
    # Each request is reviewed exactly once whatever the labels: a plain pod fail-closed, an
    # opted-out pod still checked but fail-open; a subresource fail-open for every label set.
    for (resource, op), (plain, opted_out) in COVERAGE.items():
        for labels, policy in (({}, plain), ({"app": "x"}, plain), (IGNORE, opted_out)):
            matching = [h for h in hooks if (resource, op) in covered(h)
                        and selector_matches(h.get("objectSelector"), labels)]
            assert [h["failurePolicy"] for h in matching] == [policy], (resource, op, labels)
            if resource not in ("pods", "pods/ephemeralcontainers"):  # a hung webhook stalls
                # kubelets' status updates and the scheduler's bindings this long
                assert matching[0]["timeoutSeconds"] <= 3


def test_webhook_and_allocator_pods_are_never_blocked_by_the_webhook(built):
    _, docs = built
    hooks = (one(docs, "MutatingWebhookConfiguration", "mthreads-webhook")["webhooks"]
             + one(docs, "ValidatingWebhookConfiguration", "mthreads-webhook")["webhooks"])
    for deploy in by_kind(docs, "Deployment"):
        labels = deploy["spec"]["template"]["metadata"]["labels"]
        assert labels.get("hami.io/webhook") == "ignore"
        for hook in hooks:
            if selector_matches(hook.get("objectSelector"), labels):
                assert hook["failurePolicy"] == "Ignore"


@pytest.mark.parametrize("directory", [*sorted(FLEETS), "extender"])
def test_what_binds_with_annotations_runs_as_a_writer(directory):
    """The allocator and the extender write SPEC 4's annotations in a Binding, which the
    webhook refuses from anyone but allocator.user and allocator.extraWriters (rule 10)."""
    docs = build(MANIFESTS / directory)
    (cm,) = [d for d in by_kind(docs, "ConfigMap")
             if d["metadata"]["name"].startswith("mthreads-webhook-config")]
    allocator = yaml.safe_load(cm["data"]["config.yaml"])["allocator"]
    writers = {allocator["user"], *allocator["extraWriters"]}
    binders = [d for d in by_kind(docs, "Deployment")
               if {c["name"] for c in d["spec"]["template"]["spec"]["containers"]} & {"allocator", "extender"}]
    assert len(binders) == 1, [d["metadata"]["name"] for d in binders]  # one of the two, never both
    for deploy in binders:
        account = deploy["spec"]["template"]["spec"]["serviceAccountName"]
        assert f"system:serviceaccount:{deploy['metadata']['namespace']}:{account}" in writers


def test_cert_manager_wiring():
    docs = build(MANIFESTS / "cert-manager")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(docs, kind, "mthreads-webhook")["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "kube-system/mthreads-webhook"
    cert = one(docs, "Certificate", "mthreads-webhook")["spec"]
    assert cert["secretName"] == "mthreads-webhook-tls"
    svc = "mthreads-webhook"
    assert set(cert["dnsNames"]) >= {svc, f"{svc}.kube-system", f"{svc}.kube-system.svc",
                                      f"{svc}.kube-system.svc.cluster.local"}
    assert cert["issuerRef"]["name"] == "mthreads-webhook-ca"
    assert one(docs, "Certificate", "mthreads-webhook-ca")["spec"]["isCA"] is True
    assert "ca" in one(docs, "Issuer", "mthreads-webhook-ca")["spec"]
    # The base has no caBundle; the injector owns it.
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(docs, kind, "mthreads-webhook")["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]


# --- RBAC -------------------------------------------------------------------------------------

def rule_set(rules):
    out = set()
    for r in rules:
        for group in r.get("apiGroups", []):
            for res in r["resources"]:
                for verb in r["verbs"]:
                    out.add((group, res, verb, tuple(r.get("resourceNames", []))))
    return out


def test_allocator_rbac_is_exactly_what_it_needs():
    """What the allocator calls (webhook/kube/: informer, binder, reporter, leader), and no more:
    it never writes a pod itself, only a Binding and the PodScheduled condition."""
    docs = build(MANIFESTS / "base")
    cluster = rule_set(one(docs, "ClusterRole", "mthreads-allocator")["rules"])
    expected = {("", "pods", v, ()) for v in ("get", "list", "watch")}
    expected |= {("", "pods/binding", "create", ())}
    expected |= {("", "pods/status", "patch", ())}
    expected |= {("", "nodes", v, ()) for v in ("get", "list", "watch")}
    expected |= {(group, kind, v, ()) for v in ("list", "watch") for group, kind in (
        ("", "persistentvolumeclaims"), ("", "persistentvolumes"), ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "csinodes"),
        ("", "namespaces"))}  # namespaces: their labels, for affinity terms' namespaceSelector
    expected |= {("", "events", v, ()) for v in ("create", "patch")}
    assert cluster == expected
    role = one(docs, "Role", "mthreads-allocator-leader-election")
    assert role["metadata"]["namespace"] == "kube-system"
    assert rule_set(role["rules"]) == {
        ("coordination.k8s.io", "leases", "create", ()),
        ("coordination.k8s.io", "leases", "get", ("mthreads-allocator",)),
        ("coordination.k8s.io", "leases", "update", ("mthreads-allocator",)),
    }
    for binding, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        b = one(docs, binding, "mthreads-allocator" if role_kind == "ClusterRole"
                else "mthreads-allocator-leader-election")
        assert b["roleRef"]["kind"] == role_kind
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "mthreads-allocator",
                                  "namespace": "kube-system"}]


def test_no_wildcards_and_nothing_for_the_webhook_account(built):
    _, docs = built
    for d in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        for r in d["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in r.get(field, []), f"{d['metadata']['name']}: * in {field}"
    for d in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
        for s in d.get("subjects", []):
            assert s.get("name") != "mthreads-webhook", f"{d['metadata']['name']} binds the webhook"
    sa = one(docs, "ServiceAccount", "mthreads-webhook")
    assert sa.get("automountServiceAccountToken") is False


def test_extender_rbac_adds_only_the_requeue_and_the_namespaces_watch_to_kube_schedulers_roles():
    docs = build(MANIFESTS / "extender")
    assert {d["metadata"]["name"] for d in by_kind(docs, "ServiceAccount")} == {"mthreads-webhook", "mthreads-scheduler"}
    assert [d["metadata"]["name"] for d in by_kind(docs, "ClusterRole")] == ["mthreads-extender"]
    assert rule_set(one(docs, "ClusterRole", "mthreads-extender")["rules"]) == {
        ("", "pods/status", "patch", ()), ("", "namespaces", "list", ()), ("", "namespaces", "watch", ())}
    for b in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "mthreads-scheduler", "namespace": "kube-system"}]
    assert {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")} == {
        "system:kube-scheduler", "system:volume-scheduler", "mthreads-extender"}


# --- workloads --------------------------------------------------------------------------------

def hardened(pod_spec, container):
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] == 10001
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]) == {"requests", "limits"}
    assert container["image"] == "mthreads-webhook:0.1.0"


def test_webhook_deployment_and_service():
    docs = build(MANIFESTS / "base")
    deploy = one(docs, "Deployment", "mthreads-webhook")
    assert deploy["spec"]["replicas"] == 2
    spec = deploy["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    hardened(spec, c)
    assert c["args"][0] == "serve"
    term = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert get["port"] in (8443, "https")
    assert {"name": "https", "containerPort": 8443, "protocol": "TCP"} in c["ports"]
    (tls,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "mthreads-webhook-tls"
    mounts = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    assert len(mounts) == 1 and "subPath" not in mounts[0], "mount the Secret as a directory"
    assert f"--cert-file={mounts[0]['mountPath']}/tls.crt" in c["args"]
    assert f"--key-file={mounts[0]['mountPath']}/tls.key" in c["args"]
    svc = one(docs, "Service", "mthreads-webhook")
    assert svc["spec"]["ports"][0]["port"] == 443
    assert svc["spec"]["ports"][0]["targetPort"] in (8443, "https")
    assert selector_matches({"matchLabels": svc["spec"]["selector"]},
                            deploy["spec"]["template"]["metadata"]["labels"])


def test_allocator_deployment():
    docs = build(MANIFESTS / "base")
    deploy = one(docs, "Deployment", "hami-scheduler")  # HAMi's name: the document restarts it
    assert deploy["spec"]["replicas"] == 2
    spec = deploy["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "mthreads-allocator"
    (c,) = spec["containers"]
    hardened(spec, c)
    assert c["args"][0] == "allocate"
    assert any(a.startswith("--config=") for a in c["args"])
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["ports"][0]["containerPort"] == 9090


# --- examples ---------------------------------------------------------------------------------

VALID = {  # file -> per container (vgpu, sgpu-memory, sgpu-core)
    "gpushare-pod-default.yaml": [(1, 32, 8)],
    "exclusive-card.yaml": [(1, None, None)],
    "two-whole-cards.yaml": [(2, None, None)],
    "s5000-64gib-slice.yaml": [(1, 128, 8)],
    "two-slices-one-card.yaml": [(1, 32, 4), (1, 32, 4)],
}
INVALID = {"memory-3.yaml": "rule 2", "slice-over-two-cards.yaml": "rule 4",
           "memory-without-count.yaml": "rule 4"}


def load_pod(path):
    (pod,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert "namespace" not in pod["metadata"], "examples are applied with -n"
    return pod


def asks(pod):
    out = []
    for c in pod["spec"]["containers"]:
        limits = c.get("resources", {}).get("limits", {})
        out.append(tuple(limits.get(f"mthreads.com/{r}") for r in ("vgpu", "sgpu-memory", "sgpu-core")))
    return out


def test_example_files_are_the_expected_set():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(VALID)
    assert sorted(p.name for p in (EXAMPLES / "invalid").glob("*.yaml")) == sorted(INVALID)


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_examples(name):
    pod = load_pod(EXAMPLES / name)
    assert asks(pod) == VALID[name]
    assert pod["spec"]["restartPolicy"] == "OnFailure"


def test_seed_example_is_the_documented_pod():
    pod = load_pod(EXAMPLES / "gpushare-pod-default.yaml")
    assert pod["metadata"]["name"] == "gpushare-pod-default"
    (c,) = pod["spec"]["containers"]
    assert (c["name"], c["command"], c["args"]) == ("gpushare-pod-1", ["sleep"], ["100000"])


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_examples_say_why(name):
    path = EXAMPLES / "invalid" / name
    load_pod(path)
    comments = " ".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "DENIED" in comments and INVALID[name] in comments


def test_install_certs_script_is_valid_bash():
    script = ROOT / "hack" / "install-certs.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
