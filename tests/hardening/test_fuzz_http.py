"""Property-based tests of the HTTP layer through Flask's test client.

Every POST gets 200 with an AdmissionReview that echoes the uid, or a 4xx with a JSON
`error`; never a 5xx, and never the internal-error answer (`allowed: false`, code 500),
which would mean a bug in the rules. What /mutate admits passes /validate after its patch
is applied, and a second /mutate pass returns no patch.
"""

from __future__ import annotations

import base64
import json

import jsonpatch
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.hardening.conftest import count_case, profile
from tests.hardening.strategies import CONFIGS, bodies, reviews, too_many_cards
from webhook.admission.review import OPERATIONS, VERSIONS
from webhook.server.app import MAX_BODY, create_app

pytestmark = pytest.mark.fuzz

CLIENTS = {name: create_app(cfg).test_client() for name, cfg in CONFIGS.items()}
configs = st.sampled_from(sorted(CONFIGS))
paths = st.sampled_from(["/mutate", "/validate"])


def check_answer(path: str, status: int, raw: bytes, sent: dict | None) -> dict | None:
    """The invariants of one answer; returns the AdmissionReview response, if any."""
    assert status < 500, f"{path} answered {status}: {raw[:500]!r}"
    try:
        body = json.loads(raw)
    except ValueError:
        raise AssertionError(f"{path} answered {status} with a body that is not JSON: {raw[:300]!r}")
    if status != 200:
        assert status in (400, 413, 415), status
        assert isinstance(body.get("error"), str) and body["error"].strip(), body
        return None
    assert body["kind"] == "AdmissionReview"
    response = body["response"]
    assert isinstance(response["allowed"], bool)
    if isinstance(sent, dict):
        assert body["apiVersion"] == sent["apiVersion"]
        assert response["uid"] == sent["request"]["uid"], "the uid must come back"
    if not response["allowed"]:
        status_ = response["status"]
        assert status_["code"] != 500, f"internal error (a bug in the rules): {sent}"
        assert status_["code"] == 403 and status_["message"].strip(), status_
    elif "patch" in response:
        assert path == "/mutate" and response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"])), list)
    return response


def well_formed(doc) -> bool:
    """An AdmissionReview the contract says must be answered (SPEC 3: everything else is
    "malformed input" and gets a 4xx)."""
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview" \
            or doc.get("apiVersion") not in VERSIONS:
        return False
    req = doc.get("request")
    if not isinstance(req, dict) or not isinstance(req.get("uid"), str) or not req["uid"]:
        return False
    op = req.get("operation")
    if op not in OPERATIONS:
        return False
    if op in ("CREATE", "UPDATE") and not isinstance(req.get("object"), dict):
        return False
    return op != "UPDATE" or isinstance(req.get("oldObject"), dict)


def post(client, path: str, raw: bytes, content_type: str):
    resp = client.post(path, data=raw, content_type=content_type)
    return resp.status_code, resp.get_data()


@profile(scale=1.5)
@given(body=bodies(), config=configs, path=paths)
def test_every_post_gets_a_well_formed_answer(body, config, path):
    raw, content_type, doc = body
    req = doc.get("request") if isinstance(doc, dict) else None
    if path == "/mutate" and isinstance(req, dict) and too_many_cards(req.get("object")):
        path = "/validate"  # see MUTATE_CARD_BOUND
    count_case("http: any POST")
    status, answer = post(CLIENTS[config], path, raw, content_type)
    response = check_answer(path, status, answer, doc if status == 200 else None)
    if content_type.split(";")[0] == "application/json" and well_formed(doc):
        assert status == 200, f"a well-formed review got {status}: {answer[:300]!r}"
    event(f"{status} {'allowed' if response and response['allowed'] else 'denied' if response else ''}")


@profile(scale=1.5)
@given(doc=st.one_of(reviews(wild=False), reviews(wild=False), reviews(wild=True)),
       config=st.sampled_from(sorted(set(CONFIGS) - {"disabled"})))
def test_mutate_then_validate_over_http(doc, config):
    req = doc["request"]
    req["operation"] = "CREATE"
    if not isinstance(req.get("object"), dict) or too_many_cards(req["object"]):
        return
    raw = json.dumps(doc).encode()
    client = CLIENTS[config]
    count_case("http: mutate then validate")
    status, answer = post(client, "/mutate", raw, "application/json")
    response = check_answer("/mutate", status, answer, doc if status == 200 else None)
    if not response or not response["allowed"]:
        return
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    event("patched" if patch else "allowed unchanged")
    obj = jsonpatch.apply_patch(req["object"], patch)
    again = {**doc, "request": {**req, "object": obj}}
    for path in ("/validate", "/mutate"):
        status, answer = post(client, path, json.dumps(again).encode(), "application/json")
        second = check_answer(path, status, answer, again)
        assert second and second["allowed"], f"{path} denies what /mutate admitted: {second}"
        assert "patch" not in second, "a second /mutate pass must return no patch"


@profile(scale=0.2)
@given(size=st.integers(MAX_BODY - 64, MAX_BODY + 64), path=paths)
def test_body_size_limit_is_exact(size, path):
    """Up to MAX_BODY is read (and answered), one byte more gets 413."""
    count_case("http: body size")
    head = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "pad": "'
    tail = b'", "request": {"uid": "u", "operation": "DELETE"}}'
    raw = head + b"x" * (size - len(head) - len(tail)) + tail
    status, answer = post(CLIENTS["s4000"], path, raw, "application/json")
    check_answer(path, status, answer, None)
    assert status == (200 if size <= MAX_BODY else 413), (size, status)
