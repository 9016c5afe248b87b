"""The extender overlay: the extender is a container of kube-scheduler's pod whose verbs only
that kube-scheduler reaches (loopback, no Service); it builds, kube-scheduler 1.20 accepts its
configuration, and the test API server accepts every object (server-side dry run)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.harness.kube import ADMIN
from tests.harness.kubectl import KUBECTL, kubectl

OVERLAY = Path(__file__).resolve().parents[2] / "manifests" / "extender"


@pytest.fixture(scope="module")
def built() -> list[dict]:
    proc = subprocess.run([KUBECTL, "kustomize", str(OVERLAY)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def find(built, kind, name_prefix):
    return [d for d in built if d["kind"] == kind and d["metadata"]["name"].startswith(name_prefix)]


def containers(deploy):
    return {c["name"]: c for c in deploy["spec"]["template"]["spec"]["containers"]}


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_extender_is_a_container_of_kube_schedulers_pod_on_loopback(built):
    assert not find(built, "Deployment", "mthreads-allocator")
    assert not find(built, "Deployment", "mthreads-extender")
    dep, = find(built, "Deployment", "hami-scheduler")
    pod = dep["spec"]["template"]
    assert list(containers(dep)) == ["kube-scheduler", "extender"]
    ext = containers(dep)["extender"]
    assert ext["args"][0] == "extender"
    assert [a for a in ext["args"] if a.startswith("--bind=")] == ["--bind=127.0.0.1:8888"]
    assert "--metrics-bind=0.0.0.0:9090" in ext["args"]
    assert [p["containerPort"] for p in ext["ports"]] == [9090]
    # the identity allowed to annotate is the pod's ServiceAccount
    assert pod["spec"]["serviceAccountName"] == "mthreads-scheduler"
    cm, = find(built, "ConfigMap", "mthreads-webhook-config")
    assert yaml.safe_load(cm["data"]["config.yaml"])["allocator"]["user"] == \
        "system:serviceaccount:kube-system:mthreads-scheduler"
    config_mount, = [m for m in ext["volumeMounts"] if m["mountPath"] == "/etc/mthreads-webhook/config"]
    volume, = [v for v in pod["spec"]["volumes"] if v["name"] == config_mount["name"]]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    # no Service leads to the scheduler's pods (the webhook's is the only one, and not theirs)
    services = [d for d in built if d["kind"] == "Service"]
    assert [s["metadata"]["name"] for s in services] == ["mthreads-webhook"]
    for svc in services:
        assert not matches(svc["spec"]["selector"], pod["metadata"]["labels"])


def test_scheduler_configuration(built):
    cm, = find(built, "ConfigMap", "mthreads-scheduler-config")
    conf = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert conf["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert [p["schedulerName"] for p in conf["profiles"]] == ["hami-scheduler"]
    ext, = conf["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888"  # its own pod's extender, on loopback
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"], ext["bindVerb"]) == \
        ("filter", "prioritize", "preempt", "bind")
    assert ext["nodeCacheCapable"] is True and ext["weight"] > 0
    assert {(r["name"], r["ignoredByScheduler"]) for r in ext["managedResources"]} == {
        ("mthreads.com/vgpu", True), ("mthreads.com/sgpu-memory", True), ("mthreads.com/sgpu-core", True)}
    dep, = find(built, "Deployment", "hami-scheduler")
    mount, = [m for m in containers(dep)["kube-scheduler"]["volumeMounts"]
              if m["mountPath"] == "/etc/mthreads-scheduler"]
    vol, = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]


@pytest.mark.cluster
def test_kube_scheduler_1_20_accepts_the_configuration(built, kube_cluster, tmp_path):
    cm, = find(built, "ConfigMap", "mthreads-scheduler-config")
    conf = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    conf["clientConnection"] = {"kubeconfig": str(kube_cluster.kubeconfig(ADMIN))}
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(conf))
    out = tmp_path / "written.yaml"
    proc = subprocess.run([str(kube_cluster.kube_scheduler_path), f"--config={path}",
                           f"--write-config-to={out}", "--port=0", "--secure-port=0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = yaml.safe_load(out.read_text())
    assert written["extenders"][0]["nodeCacheCapable"] is True
    assert written["percentageOfNodesToScore"] == 0  # kube-scheduler's adaptive node sample
    assert written["profiles"][0]["schedulerName"] == "hami-scheduler"


@pytest.mark.cluster
def test_server_side_dry_run(kube_cluster):
    proc = kubectl(kube_cluster, ADMIN, "apply", "-k", str(OVERLAY), "--dry-run=server")
    assert proc.returncode == 0, proc.stderr
    # no Deployment or Service of the extender's own: only its ClusterRole and binding
    assert re.findall(r"^(\S+)/mthreads-extender ", proc.stdout, re.M) == [
        "clusterrole.rbac.authorization.k8s.io", "clusterrolebinding.rbac.authorization.k8s.io"], proc.stdout
    assert re.findall(r"^service/(\S+) ", proc.stdout, re.M) == ["mthreads-webhook"], proc.stdout
    # created, or configured in place when an earlier test applied the allocator mode's (one
    # selector in both modes, so switching modes is an update)
    assert re.search(r"^deployment\.apps/hami-scheduler (created|configured|unchanged) \(server dry run\)$",
                     proc.stdout, re.M), proc.stdout
