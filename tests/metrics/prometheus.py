"""Prometheus and promtool from Debian's package (hack/prometheus.sh installs it when missing),
and a real Prometheus on 127.0.0.1 for the scrape test."""

from __future__ import annotations

import functools
import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from tests.harness.kube import free_ports
from tests.harness.process import LoggedProcess

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "hami" / "files" / "monitoring"  # the chart ships them as they are


@functools.cache
def bin_dir() -> Path:
    out = subprocess.run([str(REPO / "hack" / "prometheus.sh")], check=True, text=True,
                         stdout=subprocess.PIPE, timeout=900).stdout
    return Path(out.strip().splitlines()[-1])


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir() / "promtool"), *args], capture_output=True, text=True,
                          timeout=300)


class PrometheusProcess(LoggedProcess):
    """Scrapes the given HTTP(S) targets every second; stopped by its PID."""

    def __init__(self, workdir: Path, jobs: dict[str, dict]):
        workdir = Path(workdir)
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(MONITORING / "rules.yaml")],
                  "scrape_configs": [{"job_name": name, **job} for name, job in jobs.items()]}
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        super().__init__([str(bin_dir() / "prometheus"), f"--config.file={self.config}",
                          f"--storage.tsdb.path={workdir / 'data'}",
                          f"--web.listen-address=127.0.0.1:{self.port}"], workdir / "prometheus.log")

    def ready(self) -> bool:
        """Whether it answers /-/ready (wait with wait_for's alive=, which reports an exit)."""
        try:
            return urllib.request.urlopen(self.url + "/-/ready", timeout=2).status == 200
        except OSError:
            return False

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def query(self, expr: str) -> list:
        body = self.api("query", query=expr)
        assert body["status"] == "success", body
        return body["data"]["result"]
