"""The allocator for the cluster tests (and bench/): its RBAC, and `python -m webhook.cli allocate`
as a real subprocess, stopped by its PID, read through its /metrics and /healthz."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import kubernetes.client as k

from tests.harness.kube import free_ports
from tests.harness.process import LoggedProcess
from tests.harness.wait import time_until, wait_for

ALLOCATOR_USER = "system:serviceaccount:kube-system:mthreads-allocator"

# Not the manifests' name: applying manifests/base (tests/cluster/test_install.py) must not
# narrow what these tests' allocator may do (leases in any namespace).
TEST_ROLE = "mthreads-allocator-tests"


def grant_allocator_rbac(api_client) -> None:
    rbac = k.RbacAuthorizationV1Api(api_client)
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes", "persistentvolumeclaims", "persistentvolumes",
                                          "namespaces"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update"]},
    ]
    try:
        rbac.create_cluster_role({"metadata": {"name": TEST_ROLE}, "rules": rules})
        rbac.create_cluster_role_binding({
            "metadata": {"name": TEST_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": TEST_ROLE},
            "subjects": [{"kind": "User", "name": ALLOCATOR_USER}]})
    except k.ApiException as e:
        if e.status != 409:
            raise


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except OSError:
        return 0, ""


class AllocatorProcess(LoggedProcess):
    def __init__(self, kubeconfig: Path, namespace: str, log_path: Path, config: Path | None = None,
                 extra_args: tuple[str, ...] = ()):
        bind = f"127.0.0.1:{free_ports(1)[0]}"
        args = [sys.executable, "-m", "webhook.cli", "allocate", "--kubeconfig", str(kubeconfig),
                "--namespace", namespace, "--metrics-bind", bind, *extra_args]
        if config:
            args += ["--config", str(config)]
        super().__init__(args, log_path)
        self.metrics_url = f"http://{bind}"

    def metric(self, name: str) -> float | None:
        """One unlabelled sample of /metrics (None while it is not served)."""
        status, text = _get(self.metrics_url + "/metrics")
        for line in text.splitlines() if status == 200 else ():
            key, _, value = line.partition(" ")
            if key == name:
                return float(value)
        return None

    def healthy(self) -> bool:
        return _get(self.metrics_url + "/healthz")[0] == 200

    def leading(self) -> bool:
        return self.metric("mthreads_allocator_leader") == 1

    def wait_healthy(self, timeout: float = 20) -> None:
        wait_for(self.healthy, timeout, what="allocator /healthz", alive=self)

    def wait_leading(self, timeout: float = 30) -> float:
        """Until it holds the Lease (its leader gauge); the seconds that took."""
        return time_until(self.leading, timeout, interval=0.1, what="allocator leading (its leader gauge)",
                          alive=self)
