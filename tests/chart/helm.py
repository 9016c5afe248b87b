"""The project's helm on the chart: render with `helm template`, or run against a cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.harness.kubectl import HELM

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "manifests" / "hami"
EXAMPLES = REPO_ROOT / "manifests" / "examples" / "helm"


def helm(*args: str, home: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if home is not None:  # helm's cache, config and data stay in the test's directory
        env.update({f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")})
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=timeout, env=env)


def render(*values: str, kube_version: str = "1.20.2", namespace: str = "kube-system") -> list[dict]:
    out = helm("template", "hami", str(CHART), "--namespace", namespace, "--kube-version", kube_version,
               *values)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def config_of(docs: list[dict]) -> dict:
    """The config file the pods read."""
    return yaml.safe_load(one(docs, "ConfigMap", "mthreads-webhook-config")["data"]["config.yaml"])


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """Label selector semantics as the API server applies them (matchLabels, In/NotIn/Exists)."""
    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in (selector or {}).get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if not {"In": key in labels and labels[key] in values,
                "NotIn": key not in labels or labels[key] not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[op]:
            return False
    return True
