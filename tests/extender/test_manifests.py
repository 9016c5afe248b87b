"""The extender overlay: it builds, kube-scheduler 1.20 accepts its configuration, and the
test API server accepts every object (server-side dry run)."""

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


def test_overlay_replaces_the_allocator(built):
    assert not find(built, "Deployment", "mthreads-allocator")
    ext, = find(built, "Deployment", "mthreads-extender")
    assert ext["spec"]["replicas"] == 1 and ext["spec"]["strategy"]["type"] == "Recreate"
    pod = ext["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mthreads-allocator"  # the identity allowed to annotate
    assert pod["containers"][0]["args"][0] == "extender"
    cm = find(built, "ConfigMap", "mthreads-webhook-config")[0]["metadata"]["name"]
    assert pod["volumes"][0]["configMap"]["name"] == cm
    svc, = find(built, "Service", "mthreads-extender")
    assert svc["spec"]["ports"][0]["port"] == 8888


def test_scheduler_configuration(built):
    cm, = find(built, "ConfigMap", "mthreads-scheduler-config")
    conf = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert conf["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert [p["schedulerName"] for p in conf["profiles"]] == ["hami-scheduler"]
    ext, = conf["extenders"]
    assert ext["urlPrefix"] == "http://mthreads-extender.kube-system.svc:8888"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"], ext["bindVerb"]) == \
        ("filter", "prioritize", "preempt", "bind")
    assert ext["nodeCacheCapable"] is True and ext["weight"] > 0
    assert {(r["name"], r["ignoredByScheduler"]) for r in ext["managedResources"]} == {
        ("mthreads.com/vgpu", True), ("mthreads.com/sgpu-memory", True), ("mthreads.com/sgpu-core", True)}
    dep, = find(built, "Deployment", "hami-scheduler")
    vol = dep["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    assert vol == cm["metadata"]["name"]


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
    assert "deployment.apps/mthreads-extender created (server dry run)" in proc.stdout
    # created, or configured in place when an earlier test applied the allocator mode's (one
    # selector in both modes, so switching modes is an update)
    assert re.search(r"^deployment\.apps/hami-scheduler (created|configured|unchanged) \(server dry run\)$",
                     proc.stdout, re.M), proc.stdout
