"""The user's document, verbatim, with real helm on a real API server (1.20).

One API server of this module's own (a cluster-wide fail-closed webhook must not reach the
session's), started with --enable-aggregator-routing so that the API server dials the chart's
Service at its endpoint address. The webhook is served inside a network namespace this module
makes (Endpoints refuse loopback), with the config and certificate the chart installed: the
user's example pod, applied as a normal user, is mutated by the chart's configurations.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import urllib3
import yaml

from tests.builders import sched_pod, slice_
from tests.chart.helm import CHART, EXAMPLES, REPO_ROOT, config_of, helm, one, render
from tests.harness.kube import ADMIN, ALICE, FakeFleet, LocalCluster, bound_pod, free_ports
from tests.harness.kubectl import kubectl
from tests.harness.process import LoggedProcess
from tests.harness.service_account import service_account_kubeconfig
from tests.harness.wait import wait_for

pytestmark = pytest.mark.cluster

NS = "kube-system"
CONFIGS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
POD = REPO_ROOT / "manifests" / "examples" / "mthreads" / "gpushare-pod-default.yaml"
ALLOCATOR_SA = f"system:serviceaccount:{NS}:mthreads-allocator"
SCHEDULER_SA = f"system:serviceaccount:{NS}:mthreads-scheduler"  # kube-scheduler + extender (extender mode)
WEBHOOK_SA = f"system:serviceaccount:{NS}:mthreads-webhook"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("chart-kube")).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def helm_run(cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("helm-home")
    kubeconfig = str(cluster.kubeconfig(ADMIN))

    def run(*args: str) -> subprocess.CompletedProcess:
        return helm("--kubeconfig", kubeconfig, *args, home=home)
    return run


def get(cluster, *args: str) -> dict:
    out = kubectl(cluster, ADMIN, "get", *args, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def secret_files(cluster) -> dict[str, bytes]:
    data = get(cluster, "secret", "mthreads-webhook-tls", "-n", NS)["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def pod_config(cluster) -> dict:
    return yaml.safe_load(get(cluster, "configmap", "mthreads-webhook-config", "-n", NS)["data"]["config.yaml"])


def template_annotations(cluster) -> dict[str, dict]:
    return {name: get(cluster, "deployment", name, "-n", NS)["spec"]["template"]["metadata"]["annotations"]
            for name in ("mthreads-webhook", "hami-scheduler")}


def can_i(cluster, user: str, *args: str) -> bool:
    out = kubectl(cluster, ADMIN, "auth", "can-i", *args, f"--as={user}")
    assert out.stdout.strip() in ("yes", "no"), out.stderr
    return out.stdout.strip() == "yes"


def ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"ip {' '.join(args)}: {out.stderr}"


@contextlib.contextmanager
def webhook_in_netns(config: Path, tls: Path):
    """`mthreads-webhook serve` at an address inside a network namespace made here, reached
    from the host (and the API server) over a veth pair; yields that address."""
    if os.geteuid() != 0:
        pytest.fail("this test makes a network namespace: run it as root (CI does)")
    tag = f"{os.getpid() % 10000}"
    netns, host_if, ns_if = f"mtw-chart-{tag}", f"mtwh{tag}", f"mtwn{tag}"
    host_ip, ns_ip = f"10.251.{os.getpid() % 250}.1", f"10.251.{os.getpid() % 250}.2"
    server = None
    try:
        ip("netns", "add", netns)
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", netns)
        ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", netns, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        ip("-n", netns, "link", "set", ns_if, "up")
        ip("-n", netns, "link", "set", "lo", "up")
        cli = str(Path(sys.executable).parent / "mthreads-webhook")
        # `ip netns exec` execs the command: the PID stopped below is the server's.
        server = LoggedProcess(
            ["ip", "netns", "exec", netns, cli, "serve", "--config", str(config), "--bind", f"{ns_ip}:8443",
             "--cert-file", str(tls / "tls.crt"), "--key-file", str(tls / "tls.key")],
            tls / "serve.log").start()
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        # readiness only; the API server checks the certificate below
        wait_for(lambda: requests.get(f"https://{ns_ip}:8443/readyz", verify=False, timeout=2).ok, 60, 0.3,
                 what="the webhook in the netns ready", alive=server, retry_on=(requests.RequestException,))
        yield ns_ip
    finally:
        if server is not None:
            server.stop(30)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)


def endpoints(address: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "mthreads-webhook", "namespace": NS},
        "subsets": [{"addresses": [{"ip": address}],
                     "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]}]})


@contextlib.contextmanager
def served_behind_the_service(cluster, directory: Path):
    """The webhook with the config and certificate the chart installed, as the Service's endpoint."""
    directory.mkdir()
    for name, data in secret_files(cluster).items():
        (directory / name).write_bytes(data)
    config = directory / "config.yaml"
    config.write_text(get(cluster, "configmap", "mthreads-webhook-config", "-n", NS)["data"]["config.yaml"])
    with webhook_in_netns(config, directory) as address:
        assert kubectl(cluster, ADMIN, "apply", "-f", "-", stdin=endpoints(address)).returncode == 0
        try:
            yield
        finally:
            kubectl(cluster, ADMIN, "delete", "endpoints", "mthreads-webhook", "-n", NS, "--ignore-not-found")


def apply_as_alice(cluster, path: Path) -> subprocess.CompletedProcess:
    """kubectl apply as a tenant; retried while the API server cannot reach the webhook yet
    (its resolver's informers see new Endpoints within moments)."""
    last = {"stderr": ""}

    def reached():
        out = kubectl(cluster, ALICE, "apply", "-n", "team", "-f", str(path))
        last["stderr"] = out.stderr
        return None if "failed calling webhook" in out.stderr else out

    return wait_for(reached, 30, 0.5, what=lambda: f"the API server reaching the webhook: {last['stderr']}")


def test_the_1_20_render_passes_a_server_side_dry_run(cluster):
    for values in ([], ["--set", "mode=extender"], ["--set", "webhook.networkPolicy.enabled=true",
                                                     "--set", "webhook.networkPolicy.apiServerCIDRs={10.0.0.1/32}"],
                   ["--set", "mode=extender", "--set", "scheduler.networkPolicy.enabled=true",
                    "--set", "scheduler.networkPolicy.metricsFrom[0].ipBlock.cidr=10.1.0.0/16"]):
        out = kubectl(cluster, ADMIN, "apply", "--dry-run=server", "-f", "-",
                      stdin=yaml.safe_dump_all(render(*values)))
        assert out.returncode == 0, (values, out.stderr)
        assert "deployment.apps/hami-scheduler created (server dry run)" in out.stdout


def test_the_documents_commands(cluster, helm_run, tmp_path):
    lint = helm_run("lint", str(CHART), "--strict")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    label = kubectl(cluster, ADMIN, "label", "namespace", NS, "hami.io/webhook=ignore", "--overwrite")
    assert label.returncode == 0, label.stderr

    # The one-liner, with the chart's path in place of hami-charts/hami.
    out = helm_run("install", "hami", str(CHART), "--set", "scheduler.kubeScheduler.image.tag=v1.20.2",
                   "--set", "devices.mthreads.enabled=true", "-n", NS)
    assert out.returncode == 0, out.stderr
    try:
        tls = secret_files(cluster)
        assert sorted(tls) == ["ca.crt", "tls.crt", "tls.key"]
        for kind in CONFIGS:
            for hook in get(cluster, kind, "mthreads-webhook")["webhooks"]:
                assert base64.b64decode(hook["clientConfig"]["caBundle"]) == tls["ca.crt"], hook["name"]
        assert pod_config(cluster)["devices"]["mthreads"]["memoryPerCard"] == [96]

        # RBAC as before (the authorizer's cache catches up in a moment).
        wait_for(lambda: can_i(cluster, ALLOCATOR_SA, "list", "pods", "-A"), 20, 0.3,
                 what="the chart's RBAC taking effect")
        assert can_i(cluster, ALLOCATOR_SA, "create", "pods", "--subresource=binding", "-n", "default")
        assert can_i(cluster, ALLOCATOR_SA, "watch", "nodes")
        for claims_and_volumes in ("persistentvolumeclaims", "persistentvolumes",
                                   "storageclasses.storage.k8s.io", "csinodes.storage.k8s.io"):
            assert can_i(cluster, ALLOCATOR_SA, "watch", claims_and_volumes, "-A")
        assert can_i(cluster, ALLOCATOR_SA, "update", "leases.coordination.k8s.io/mthreads-allocator", "-n", NS)
        assert not can_i(cluster, ALLOCATOR_SA, "create", "pods", "-n", "default")
        assert not can_i(cluster, ALLOCATOR_SA, "update", "leases.coordination.k8s.io/other", "-n", NS)
        assert not can_i(cluster, WEBHOOK_SA, "list", "pods", "-A")

        # The API server calls the chart's configurations through the chart's Service.
        assert kubectl(cluster, ADMIN, "create", "namespace", "team").returncode == 0
        # A tenant's rights on pods (the built-in "edit" is empty: no controller-manager).
        role = kubectl(cluster, ADMIN, "create", "role", "pod-editor", "-n", "team", "--resource=pods",
                       "--verb=create,get,list,watch,update,patch,delete")
        grant = kubectl(cluster, ADMIN, "create", "rolebinding", "alice-pods", "-n", "team",
                        "--role=pod-editor", f"--user={ALICE}")
        assert role.returncode == 0 and grant.returncode == 0, role.stderr + grant.stderr
        with served_behind_the_service(cluster, tmp_path / "s4000"):
            applied = apply_as_alice(cluster, POD)
            assert applied.returncode == 0, applied.stderr
            pod = get(cluster, "pod", "gpushare-pod-default", "-n", "team")
            assert pod["spec"]["schedulerName"] == "hami-scheduler"
            assert pod["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-to-allocate"] == ",Mthreads,16384,8:;"
            denied = apply_as_alice(cluster, POD.parent / "invalid" / "memory-3.yaml")
            assert denied.returncode != 0 and "valid values are 2, 4, 8, 16, 32, 64, 96 " in denied.stderr

        # The S5000 values file, applied with helm upgrade: the pods roll by themselves.
        before = template_annotations(cluster)
        out = helm_run("upgrade", "hami", str(CHART), "-n", NS, "-f", str(EXAMPLES / "values-s5000.yaml"))
        assert out.returncode == 0, out.stderr
        assert pod_config(cluster)["devices"]["mthreads"]["memoryPerCard"] == [160]
        after = template_annotations(cluster)
        for name in after:
            assert after[name]["checksum/config"] != before[name]["checksum/config"], name
        assert secret_files(cluster) == tls, "helm upgrade must keep the certificate"
        with served_behind_the_service(cluster, tmp_path / "s5000"):
            admitted = apply_as_alice(cluster, POD.parent / "s5000-64gib-slice.yaml")  # 128: S5000 only
            assert admitted.returncode == 0, admitted.stderr
            denied = apply_as_alice(cluster, POD.parent / "invalid" / "memory-3.yaml")
            assert "valid values are 2, 4, 8, 16, 32, 64, 128, 160 " in denied.stderr, denied.stderr
    finally:
        uninstall = helm_run("uninstall", "hami", "-n", NS)
    assert uninstall.returncode == 0, uninstall.stderr
    for kind in CONFIGS:  # a leftover Fail webhook would block every pod of the cluster
        left = kubectl(cluster, ADMIN, "get", kind, "-o", "name")
        assert "mthreads-webhook" not in left.stdout, left.stdout
    created = kubectl(cluster, ALICE, "run", "after", "-n", "team", "--image=busybox", "--restart=Never")
    assert created.returncode == 0, created.stderr
    left = kubectl(cluster, ADMIN, "get", "all,secret,configmap,serviceaccount,role,rolebinding", "-n", NS,
                   "-l", "app.kubernetes.io/name=mthreads-webhook", "-o", "name")
    assert left.stdout.strip() == "", left.stdout


def test_an_existing_secret_fills_the_ca_bundles_and_stays(cluster, helm_run, tmp_path):
    certs = subprocess.run([str(Path(sys.executable).parent / "mthreads-webhook"), "certs", "--out", str(tmp_path),
                            "--service", "mthreads-webhook", "--namespace", NS],
                           capture_output=True, text=True, timeout=60)
    assert certs.returncode == 0, certs.stderr
    made = kubectl(cluster, ADMIN, "create", "secret", "generic", "my-webhook-tls", "-n", NS,
                   *(f"--from-file={name}={tmp_path / name}" for name in ("ca.crt", "tls.crt", "tls.key")))
    assert made.returncode == 0, made.stderr
    out = helm_run("install", "hami", str(CHART), "-n", NS, "--set", "certificates.mode=secret",
                   "--set", "certificates.secretName=my-webhook-tls")
    assert out.returncode == 0, out.stderr
    try:
        for kind in CONFIGS:
            for hook in get(cluster, kind, "mthreads-webhook")["webhooks"]:
                assert base64.b64decode(hook["clientConfig"]["caBundle"]) == (tmp_path / "ca.crt").read_bytes()
    finally:
        uninstall = helm_run("uninstall", "hami", "-n", NS)
    assert uninstall.returncode == 0, uninstall.stderr
    assert get(cluster, "secret", "my-webhook-tls", "-n", NS)["data"]  # not the chart's to delete


def test_switching_modes_swaps_the_identities(cluster, helm_run):
    """`helm upgrade --set mode=extender` (and back) on a real API server: the identity that binds
    follows the mode, the other mode's identity and rights are gone, and nothing but the
    webhook's Service exists (the extender's verbs are on its pod's loopback)."""
    label = kubectl(cluster, ADMIN, "label", "namespace", NS, "hami.io/webhook=ignore", "--overwrite")
    assert label.returncode == 0, label.stderr
    out = helm_run("install", "hami", str(CHART), "-n", NS)
    assert out.returncode == 0, out.stderr
    try:
        wait_for(lambda: can_i(cluster, ALLOCATOR_SA, "list", "pods", "-A"), 20, 0.3, what="the allocator's RBAC")
        assert not can_i(cluster, ALLOCATOR_SA, "patch", "pods", "-n", "default")
        assert not can_i(cluster, SCHEDULER_SA, "list", "pods", "-A")
        assert pod_config(cluster)["allocator"]["user"] == ALLOCATOR_SA

        out = helm_run("upgrade", "hami", str(CHART), "-n", NS, "--set", "mode=extender")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: not can_i(cluster, ALLOCATOR_SA, "list", "pods", "-A"), 20, 0.3,
                 what="the allocator's rights gone")
        assert kubectl(cluster, ADMIN, "get", "serviceaccount", "mthreads-allocator", "-n", NS).returncode != 0
        wait_for(lambda: can_i(cluster, SCHEDULER_SA, "patch", "pods", "--subresource=status", "-n", "default"),
                 20, 0.3, what="the extender's requeue right")
        assert can_i(cluster, SCHEDULER_SA, "create", "pods", "--subresource=binding", "-n", "default")
        for denied in (("create", "pods", "-n", "default"), ("patch", "pods", "-n", "default"),
                       ("update", "nodes"), ("get", "secrets", "-n", NS),
                       ("update", "leases.coordination.k8s.io/mthreads-allocator", "-n", NS)):
            assert not can_i(cluster, SCHEDULER_SA, *denied), denied
        assert pod_config(cluster)["allocator"]["user"] == SCHEDULER_SA
        deploy = get(cluster, "deployment", "hami-scheduler", "-n", NS)["spec"]["template"]["spec"]
        assert deploy["serviceAccountName"] == "mthreads-scheduler"
        assert [c["name"] for c in deploy["containers"]] == ["kube-scheduler", "extender"]
        assert "--bind=127.0.0.1:8888" in deploy["containers"][1]["args"]
        services = get(cluster, "services", "-n", NS)["items"]  # the release's, and nothing else's here
        assert [svc["metadata"]["name"] for svc in services] == ["mthreads-webhook"]

        out = helm_run("upgrade", "hami", str(CHART), "-n", NS, "--set", "mode=allocator")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: not can_i(cluster, SCHEDULER_SA, "patch", "pods", "--subresource=status", "-n", "default"),
                 20, 0.3, what="the extender's rights gone")
        assert kubectl(cluster, ADMIN, "get", "serviceaccount", "mthreads-scheduler", "-n", NS).returncode != 0
        wait_for(lambda: can_i(cluster, ALLOCATOR_SA, "list", "pods", "-A"), 20, 0.3, what="the allocator's RBAC back")
        assert pod_config(cluster)["allocator"]["user"] == ALLOCATOR_SA
    finally:
        uninstall = helm_run("uninstall", "hami", "-n", NS)
    assert uninstall.returncode == 0, uninstall.stderr


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def loopback(args: list[str], ports: dict[str, int]) -> list[str]:
    """The rendered args with each port moved to a free one on 127.0.0.1 (tests listen on
    loopback only); anything else as rendered."""
    out = []
    for arg in args:
        for flag, port in ports.items():
            if arg.startswith(f"{flag}="):
                host = arg.split("=", 1)[1].rsplit(":", 1)[0]
                assert host in ("127.0.0.1", "0.0.0.0"), arg
                arg = f"{flag}=127.0.0.1:{port}"
        out.append(arg)
    return out


def test_the_extender_mode_pod_as_rendered_binds_with_the_charts_rights_alone(cluster, tmp_path):
    """kube-scheduler and the extender, run by hand with the rendered configuration and args,
    each as the chart's ServiceAccount with only the chart's RBAC (this module's own API server):
    a Mthreads pod is placed and bound with its cards, through the extender's verbs on loopback;
    the metrics listener answers /metrics and /readyz and no verb."""
    docs = render("--set", "mode=extender")
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    applied = kubectl(cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    assert applied.returncode == 0, applied.stderr
    procs: list[LoggedProcess] = []
    fleet = FakeFleet(cluster.api_client(ADMIN), "chart-ext")
    try:
        as_scheduler = service_account_kubeconfig(cluster, NS, "mthreads-scheduler", tmp_path)

        deploy = one(docs, "Deployment", "hami-scheduler")["spec"]["template"]["spec"]
        (kube_scheduler, extender) = deploy["containers"]
        verbs, metrics = free_ports(2)
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(config_of(docs)))
        assert config_of(docs)["allocator"]["user"] == SCHEDULER_SA
        args = loopback(extender["args"], {"--bind": verbs, "--metrics-bind": metrics})
        args = [f"--config={config}" if a.startswith("--config=") else a for a in args]
        cli = str(Path(sys.executable).parent / "mthreads-webhook")
        procs.append(LoggedProcess([cli, *args, f"--kubeconfig={as_scheduler}"], tmp_path / "extender.log").start())
        wait_for(lambda: requests.get(f"http://127.0.0.1:{metrics}/readyz", timeout=2).ok, 60, 0.3,
                 what="the extender ready", alive=procs[0], retry_on=(requests.RequestException,))
        page = requests.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5)
        assert page.status_code == 200 and "hami_" in page.text
        for verb in ("filter", "prioritize", "preempt", "bind"):  # not on the metrics listener
            assert requests.post(f"http://127.0.0.1:{metrics}/{verb}", json={}, timeout=5).status_code in (404, 405)

        sched = yaml.safe_load(one(docs, "ConfigMap", "mthreads-scheduler-config")["data"]["scheduler-config.yaml"])
        assert sched["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"
        sched["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{verbs}"
        sched["clientConnection"] = {"kubeconfig": str(as_scheduler)}
        sched_file = tmp_path / "scheduler-config.yaml"
        sched_file.write_text(yaml.safe_dump(sched))
        command = [f"--config={sched_file}" if a.startswith("--config=") else
                   "--secure-port=0" if a.startswith("--secure-port=") else a
                   for a in kube_scheduler["command"][1:]]  # --port=0 as rendered for 1.20
        procs.append(LoggedProcess([str(cluster.kube_scheduler_path), *command], tmp_path / "kube-scheduler.log").start())

        (node,) = fleet(2, 96)
        made = kubectl(cluster, ADMIN, "create", "namespace", "chart-extender")
        assert made.returncode == 0, made.stderr
        pod = sched_pod(slice_(32, 8, name="a"), name="slice", namespace="chart-extender")
        pod["metadata"].pop("uid")
        created = kubectl(cluster, ADMIN, "create", "-f", "-", stdin=json.dumps(pod))
        assert created.returncode == 0, created.stderr
        admin = cluster.api_client(ADMIN)
        bound = wait_for(lambda: bound_pod(admin, "chart-extender", "slice"), 60, 0.5,
                         what=lambda: "the pod bound: " + procs[1].tail(10) + procs[0].tail(10))
        assert bound["spec"]["nodeName"] == node
        assert bound["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"].startswith(f"{node}-mthreads-")
        lease = get(cluster, "lease", "mthreads-scheduler", "-n", NS)  # kube-scheduler led with its own Lease
        assert lease["spec"]["holderIdentity"]
    finally:
        for proc in reversed(procs):
            proc.stop(15)
        fleet.delete()
        kubectl(cluster, ADMIN, "delete", "namespace", "chart-extender", "--ignore-not-found", "--wait=false")
        kubectl(cluster, ADMIN, "delete", "lease", "mthreads-scheduler", "-n", NS, "--ignore-not-found")
        kubectl(cluster, ADMIN, "delete", "-f", "-", "--ignore-not-found", stdin=yaml.safe_dump_all(rbac))
