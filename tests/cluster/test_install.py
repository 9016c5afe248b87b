"""The install path of docs/deploy.md on a real API server: the base applied, then
hack/install-certs.sh fills the Secret and both caBundles."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from tests.harness.kube import ADMIN
from tests.harness.kubectl import kubectl
from tests.harness.registration import REPO_ROOT

pytestmark = pytest.mark.cluster

CONFIGS = "mutatingwebhookconfiguration,validatingwebhookconfiguration"


@pytest.fixture
def installed_base(kube_cluster):
    label = kubectl(kube_cluster, ADMIN, "label", "namespace", "kube-system", "hami.io/webhook=ignore",
                    "--overwrite")
    assert label.returncode == 0, label.stderr
    out = kubectl(kube_cluster, ADMIN, "apply", "-k", str(REPO_ROOT / "manifests" / "base"))
    assert out.returncode == 0, out.stderr
    try:
        yield
    finally:
        # The base's configurations point at a Service nothing serves here and fail closed.
        kubectl(kube_cluster, ADMIN, "delete", CONFIGS, "mthreads-webhook", "--ignore-not-found")


def test_install_certs_fills_the_secret_and_both_ca_bundles(kube_cluster, installed_base, tmp_path):
    cli = tmp_path / "mthreads-webhook"  # the console script of this checkout's venv
    cli.write_text(f"#!/bin/sh\nexec {sys.executable} -m webhook.cli \"$@\"\n")
    cli.chmod(0o755)
    env = {**os.environ, "MTHREADS_WEBHOOK": str(cli), "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run(["bash", str(REPO_ROOT / "hack" / "install-certs.sh"), "--kubeconfig",
                          str(kube_cluster.kubeconfig(ADMIN)), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    ca = (tmp_path / "out" / "ca.crt").read_bytes()

    secret = json.loads(kubectl(kube_cluster, ADMIN, "get", "secret", "mthreads-webhook-tls", "-n",
                                "kube-system", "-o", "json").stdout)
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]  # never the CA key
    assert base64.b64decode(secret["data"]["tls.crt"]) == (tmp_path / "out" / "tls.crt").read_bytes()

    for kind in CONFIGS.split(","):
        doc = json.loads(kubectl(kube_cluster, ADMIN, "get", kind, "mthreads-webhook", "-o", "json").stdout)
        for hook in doc["webhooks"]:
            assert ca in base64.b64decode(hook["clientConfig"]["caBundle"]), (kind, hook["name"])
