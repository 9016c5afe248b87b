"""Run the installed `mthreads-webhook` console script and check its one-line start-up errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

# pip puts the console script next to the interpreter of the environment it installed into
CONSOLE = Path(sys.executable).parent / "mthreads-webhook"

# Variables that point a command at a cluster; a test sets the ones it means to.
CLUSTER_VARIABLES = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment with no cluster in it and `home` as HOME (no ~/.kube/config)."""
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES}
    return {**env, "HOME": str(home), **extra}


def run_console(args: list[str], home: Path, timeout: float = 60, **extra_env: str):
    assert CONSOLE.is_file(), f"{CONSOLE} is not installed (make install)"
    return subprocess.run([str(CONSOLE), *args], env=clean_env(home, **extra_env),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def assert_one_line(out: subprocess.CompletedProcess, exit_code: int, *words: str) -> str:
    """The command ended with `exit_code` and one stderr line containing every one of `words`."""
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == exit_code, (out.returncode, out.stderr)
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("mthreads-webhook: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def listening_socket() -> socket.socket:
    """A socket listening on a free loopback port, so that port is in use."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def write_kubeconfig(path: Path, server: str, token: str, ca_file: Path | None = None) -> Path:
    cluster = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = str(ca_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }))
    return path
