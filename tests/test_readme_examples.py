"""The README's curl examples give the answers the README shows."""

import base64
import json
import re
from pathlib import Path

from webhook.model.config import Config
from webhook.server.app import create_app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "manifests" / "examples" / "admission"


def answer(path: str, name: str) -> dict:
    client = create_app(Config()).test_client()
    body = (EXAMPLES / f"{name}.json").read_bytes()
    return client.post(path, data=body, content_type="application/json").get_json()["response"]


README = (ROOT / "README.md").read_text()


def test_seed_pod_example():
    r = answer("/mutate", "gpushare-pod-default")
    shown = json.loads(re.search(r'^\{"apiVersion": "admission.k8s.io/v1".*$', README, re.M)[0])
    assert {k: v for k, v in r.items() if k != "patch"} == \
        {k: v for k, v in shown["response"].items() if k != "patch"}
    # what the README says the patch does is what the decoded patch does
    said = re.search(r"The patch \(base64 JSONPatch\) sets `spec.schedulerName: ([^`]+)` and the "
                     r"annotation\s+`([^:`]+): ([^`]+)`", README)
    assert said, "the README no longer says what the patch sets"
    patch = json.loads(base64.b64decode(r["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": said[1]} in patch
    assert {"op": "add", "path": "/metadata/annotations", "value": {said[2]: said[3]}} in patch


def test_denied_example_message_is_the_readme_s():
    r = answer("/validate", "memory-3")
    assert r["allowed"] is False
    shown = json.dumps(r["status"]["message"])  # as the JSON answer spells it
    assert shown in README
