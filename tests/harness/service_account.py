"""A kubeconfig that authenticates as a ServiceAccount of the local API server, with a token the
API server issues for it (TokenRequest): the identity and RBAC a chart's pod would run with."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.harness.kube import ADMIN
from tests.harness.kubectl import kubectl


def service_account_kubeconfig(cluster, namespace: str, name: str, directory: Path) -> Path:
    """A kubeconfig file in `directory` for system:serviceaccount:<namespace>:<name>."""
    token = kubectl(cluster, ADMIN, "create", "token", name, "-n", namespace)
    assert token.returncode == 0, token.stderr
    config = yaml.safe_load(cluster.kubeconfig(ADMIN).read_text())
    config["users"][0]["user"] = {"token": token.stdout.strip()}
    path = directory / f"kubeconfig-{namespace}-{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
