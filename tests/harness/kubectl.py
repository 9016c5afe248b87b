"""kubectl against the local API server, as a given user."""

from __future__ import annotations

import shutil
import subprocess

KUBECTL = shutil.which("kubectl")


def kubectl(cluster, user: str, *args: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    assert KUBECTL, "kubectl is not on the PATH; the test setup installs it"
    return subprocess.run([KUBECTL, "--kubeconfig", str(cluster.kubeconfig(user)), *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout)
