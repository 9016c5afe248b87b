"""A real `mthreads-webhook serve` (gunicorn, TLS) on 127.0.0.1, for tests."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import requests

from tests.harness.kube import free_ports
from tests.harness.process import LoggedProcess
from tests.harness.wait import wait_for

CLI = [sys.executable, "-m", "webhook.cli"]


def make_certs(directory: Path) -> Path:
    subprocess.run([*CLI, "certs", "--out", str(directory)], check=True, capture_output=True)
    return directory


class WebhookProcess(LoggedProcess):
    """`mthreads-webhook serve` with its own certificates under `workdir`; start() returns once
    /readyz answers."""

    def __init__(self, workdir: Path, config: str | None = None, extra: list[str] = ()):
        self.workdir = Path(workdir)
        self.certs = self.workdir / "certs"
        if not (self.certs / "tls.crt").exists():
            make_certs(self.certs)
        self.port = free_ports(1)[0]
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = str(self.certs / "ca.crt")
        args = [*CLI, "serve", "--bind", f"127.0.0.1:{self.port}",
                "--cert-file", str(self.certs / "tls.crt"),
                "--key-file", str(self.certs / "tls.key"), *extra]
        if config:  # resolved here: the process runs from the repository's root
            args += ["--config", str(Path(config).resolve())]
        super().__init__(args, self.workdir / f"webhook-{self.port}.log")
        self.session = requests.Session()
        self.session.trust_env = False  # the machine's REQUESTS_CA_BUNDLE must not win over ours
        self.session.verify = self.ca

    def start(self, timeout: float = 20.0) -> "WebhookProcess":
        super().start()
        try:
            wait_for(lambda: self.session.get(f"{self.url}/readyz", timeout=1).status_code == 200,
                     timeout, 0.1, what="the webhook's /readyz", alive=self,
                     retry_on=(requests.RequestException,))
        except AssertionError as e:
            self.stop()
            raise RuntimeError(str(e)) from None
        return self

    def post(self, path: str, body, **kw) -> requests.Response:
        return self.session.post(f"{self.url}{path}", json=body, timeout=10, **kw)

    def peer_certificate(self) -> bytes:
        """The DER certificate a new connection is served."""
        ctx = ssl.create_default_context(cafile=self.ca)
        import socket
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return s.getpeercert(binary_form=True)

    def stop(self, timeout: float = 30) -> int | None:
        return super().stop(timeout)
