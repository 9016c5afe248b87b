"""The image built by hack/image.sh, and containers of it run with podman as the chart runs them."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

from tests.harness.kube import REPO_ROOT
from tests.harness.process import LoggedProcess, stop_process

IMAGE_SCRIPT = REPO_ROOT / "hack" / "image.sh"
BUILD_TIMEOUT = 1800  # seconds: the first build makes the base and installs from PyPI
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": str(REPO_ROOT / "hack" / "containers.conf")}


def build_image() -> str:
    """The image of the current tree (reused when the Dockerfile and the package are unchanged)."""
    out = subprocess.run([str(IMAGE_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True,
                         timeout=BUILD_TIMEOUT).stdout
    return out.strip().splitlines()[-1]


def podman(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=PODMAN_ENV, capture_output=True, text=True,
                          timeout=timeout, check=check)


def split_options(options: list[str]) -> tuple[list[str], list[str]]:
    """pod_spec.run_options() output: (podman options, the image's arguments)."""
    i = options.index("--")
    return options[:i], options[i + 1:]


def run_once(image: str, options: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a container to its end (a one-shot command such as `certs`)."""
    opts, argv = split_options(options)
    return podman("run", "--rm", "--network", "host", *opts, image, *argv, timeout=timeout, check=False)


class Container(LoggedProcess):
    """A long-running container; stop() sends SIGTERM through podman, as the kubelet would."""

    def __init__(self, image: str, options: list[str], log_path: Path):
        self.name = f"mthreads-image-test-{uuid.uuid4().hex[:8]}"
        opts, argv = split_options(options)
        # Host network: the servers bind the 127.0.0.1 addresses the test gives them, and
        # reach the test API server on loopback.
        super().__init__(["podman", "run", "--rm", "--name", self.name, "--network", "host", *opts,
                          image, *argv], log_path, env=PODMAN_ENV)

    def tail(self, lines: int = 60) -> str:
        return super().tail(lines)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (podman passes it on to the container's process), then `podman kill`;
        the exit code."""
        if self.proc is None:
            return 0
        stop_process(self.proc, timeout, kill=lambda: podman("kill", self.name, check=False))
        podman("rm", "--force", "--ignore", self.name, check=False)
        return self.proc.returncode
