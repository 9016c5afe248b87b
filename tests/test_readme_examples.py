"""The README's curl examples give the answers the README shows."""

import base64
import json
from pathlib import Path

from webhook.config import Config
from webhook.server.app import create_app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "manifests" / "examples" / "admission"


def answer(path: str, name: str) -> dict:
    client = create_app(Config()).test_client()
    body = (EXAMPLES / f"{name}.json").read_bytes()
    return client.post(path, data=body, content_type="application/json").get_json()["response"]


def test_seed_pod_example():
    r = answer("/mutate", "gpushare-pod-default")
    assert r["allowed"] is True and r["uid"] == "7f0b2c7e-6d43-4f1e-9d1a-3c2b5a9e0001"
    patch = json.loads(base64.b64decode(r["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {"hami.io/mthreads-vgpu-devices-to-allocate": ",Mthreads,16384,8:;"}} in patch
    readme = (ROOT / "README.md").read_text()
    assert r["patch"][:10] in readme


def test_denied_example_message_is_the_readme_s():
    r = answer("/validate", "memory-3")
    assert r["allowed"] is False
    shown = json.dumps(r["status"]["message"])  # as the JSON answer spells it
    assert shown in (ROOT / "README.md").read_text()
