"""Bugs the fuzzers found, one plain test each (they fail until webhook/ is fixed).

See docs/reliability.md, "Bugs found", for the cause and the suggested fix of each.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonpatch
import pytest

from tests.builders import container as c
from tests.builders import pod, review
from webhook.model.config import Config, MthreadsConfig
from webhook.server.app import create_app

REPO = Path(__file__).resolve().parents[2]
API_SERVER_TIMEOUT = 5.0  # timeoutSeconds of both webhooks in manifests/base


def post(client, path: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    resp = client.post(path, data=data, content_type="application/json")
    return resp.status_code, resp.get_json(silent=True)


@pytest.fixture
def client():
    return create_app(Config(mthreads=MthreadsConfig(memory_per_card=(96, 160)))).test_client()


@pytest.mark.parametrize("value", [["MTT-S4000"], {"model": "MTT-S4000"}, 96, None, True])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_card_model_annotation_that_is_not_a_string_is_denied_not_an_internal_error(
        client, path, value):
    """Found by test_fuzz_rules (read_request): `model not in fleet.by_name` raises TypeError
    for a list or a dict, and the review is answered with code 500."""
    r = review(pod(c("train", 1, 32, 8), annotations={"mthreads.com/card-model": value}))
    status, body = post(client, path, r)
    assert status == 200
    response = body["response"]
    assert response["uid"] == r["request"]["uid"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403, response["status"]  # not 500, internal error
    assert "mthreads.com/card-model" in response["status"]["message"]


@pytest.mark.parametrize("where", ["root", "object", "limits", "annotation"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_deeply_nested_json_gets_a_4xx_not_a_500(client, path, where):
    """json.loads raises RecursionError (not a ValueError) past ~1000 levels; decode() lets
    it through and Flask answers 500."""
    deep = "[" * 100_000 + "]" * 100_000
    if where == "root":
        body = deep
    else:
        r = review(pod(c("train", 1, 32, 8)))
        text = json.dumps(r)
        marker = {"object": '"spec": {', "limits": '"limits": {',
                  "annotation": '"metadata": {'}[where]
        body = text.replace(marker, marker + f'"x": {deep}, ', 1)
    status, answer = post(client, path, body)
    assert status == 400, (status, answer)
    assert answer and answer.get("error")


CHILD = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
    from webhook.server.app import create_app
    from webhook.model.config import Config
    from tests.builders import container as c, pod, review
    client = create_app(Config()).test_client()
    r = review(pod(c("train", sys.argv[1])))
    started = time.monotonic()
    resp = client.post("/mutate", data=json.dumps(r), content_type="application/json")
    print(json.dumps({"status": resp.status_code, "seconds": time.monotonic() - started,
                      "bytes": len(resp.data), "object": r["request"]["object"],
                      "body": resp.get_json(silent=True) if len(resp.data) < 4096 else None}))
""")


@pytest.mark.parametrize("count", ["2147483647", "22369622", "1000000"])
def test_a_huge_card_count_is_answered_in_bounded_time_and_memory(count):
    """`mthreads.com/vgpu: "2147483647"` is a plain positive integer, so it is admitted as
    whole cards, and /mutate builds one device entry per card for the annotation: 10^7 cards
    take 11 s and 1.2 GB here, 2^31-1 would take hundreds of GB. One pod kills the worker.
    22369622 x 96 is the first count whose written sgpu-memory passes 2^31-1.

    Run in a child process under a 1.5 GiB address-space limit and a wall-clock limit (killed
    by its PID), so the machine running the test never pays for it.
    """
    proc = subprocess.Popen([sys.executable, "-c", CHILD, count], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        out, err = proc.communicate(timeout=2 * API_SERVER_TIMEOUT + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"/mutate did not answer vgpu={count} within {2 * API_SERVER_TIMEOUT + 5} s")
    assert proc.returncode == 0 and out.strip(), f"the child died: {err[-2000:]}"
    res = json.loads(out.strip().splitlines()[-1])
    assert res["status"] == 200, res
    assert res["seconds"] < API_SERVER_TIMEOUT, f"{res['seconds']:.1f} s"
    assert res["bytes"] < 1 << 20, f"a {res['bytes']} byte answer"
    response = res["body"]["response"]
    if response["allowed"]:
        # What mutate admits must validate: past 22369621 the written sgpu-memory is > 2^31-1.
        patched = jsonpatch.apply_patch(res["object"], json.loads(base64.b64decode(response["patch"])))
        status, body = post(create_app(Config()).test_client(), "/validate", review(patched))
        assert body["response"]["allowed"], body["response"]["status"]["message"]
    else:
        assert response["status"]["code"] == 403, response["status"]
