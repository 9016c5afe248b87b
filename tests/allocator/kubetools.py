"""Helpers for the cluster tests: RBAC for the allocator user, its process, and a checker that
reads the allocation annotations with its own few lines (not with webhook.hami)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kubernetes.client as k

from tests.harness import invariants
from tests.harness.kube import free_ports

ALLOCATOR_USER = "system:serviceaccount:kube-system:mthreads-allocator"
REPO = Path(__file__).resolve().parents[2]


# Not the manifests' name: applying manifests/base (tests/cluster/test_install.py) must not
# narrow what these tests' allocator may do (leases in any namespace).
TEST_ROLE = "mthreads-allocator-tests"


def grant_allocator_rbac(api_client) -> None:
    rbac = k.RbacAuthorizationV1Api(api_client)
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
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


def ensure_namespace(api_client, name: str) -> None:
    try:
        k.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    except k.ApiException as e:
        if e.status != 409:
            raise


class AllocatorProcess:
    """`python -m webhook.allocator` as a real subprocess, stopped by its PID."""

    def __init__(self, kubeconfig: Path, namespace: str, log_path: Path, config: Path | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.args = [sys.executable, "-m", "webhook.allocator", "--kubeconfig", str(kubeconfig),
                     "--namespace", namespace, "--metrics-bind", f"127.0.0.1:{free_ports(1)[0]}",
                     *extra_args]
        if config:
            self.args += ["--config", str(config)]
        self.metrics_url = "http://" + self.args[self.args.index("--metrics-bind") + 1]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AllocatorProcess":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        return self

    def wait_healthy(self, timeout: float = 20) -> None:
        import urllib.request

        def up():
            try:
                return urllib.request.urlopen(self.metrics_url + "/healthz", timeout=1).status == 200
            except OSError:
                return False
        wait_for(up, timeout, what="allocator /healthz")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 15) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def list_pods(api_client, namespace: str) -> list[dict]:
    resp = k.CoreV1Api(api_client).list_namespaced_pod(namespace, _preload_content=False)
    return json.loads(resp.data)["items"]


# The checker independent of the allocator's code, shared with the extender's tests.
check_capacity = invariants.check
