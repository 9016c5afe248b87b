"""The webhook configurations of manifests/, rendered for a webhook on 127.0.0.1.

In this test cluster nothing routes a `service:` reference, so each clientConfig
becomes a url with the test CA as caBundle; everything else is as shipped.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import yaml

from tests.harness.kube import ADMIN
from tests.harness.kubectl import KUBECTL, kubectl
from tests.harness.wait import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def rendered_manifests(directory: str = "manifests/base") -> list[dict]:
    out = subprocess.run([KUBECTL, "kustomize", str(REPO_ROOT / directory)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def webhook_configurations(url: str, ca_file: str) -> list[dict]:
    ca = base64.b64encode(Path(ca_file).read_bytes()).decode()
    docs = [d for d in rendered_manifests() if d["kind"] in KINDS]
    for doc in docs:
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca}
    return docs


def wait_until_called(cluster, namespace: str, probe: str, timeout: float = 30) -> None:
    """Until a server-side dry run of the pod `probe` (JSON) in `namespace` comes back patched
    by the webhook: the API server picks up new configurations in a moment."""
    last = {"stderr": ""}

    def patched() -> bool:
        out = kubectl(cluster, ADMIN, "create", "-n", namespace, "--dry-run=server", "-o", "json",
                      "-f", "-", stdin=probe)
        last["stderr"] = out.stderr
        return out.returncode == 0 and \
            json.loads(out.stdout)["spec"].get("schedulerName") == "hami-scheduler"

    wait_for(patched, timeout, 0.3, what=lambda: f"the webhook called: {last['stderr']}")
