"""The HTTP protocol through Flask's test client: versions, uid, errors, metrics."""

import base64
import io
import json

import jsonpatch
import pytest

from tests.builders import binding, binding_review, pod, review, status_review
from tests.builders import container as c
from webhook.model.config import Config
from webhook.server.app import MAX_BODY, create_app


@pytest.fixture
def client():
    return create_app(Config()).test_client()


def post(client, path, body, content_type="application/json"):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data=data, content_type=content_type)


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_answers_in_the_version_asked_and_echoes_uid(client, version, path):
    r = review(pod(c("train", 1, 32, 8)), version=version)
    resp = post(client, path, r)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["apiVersion"] == version and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == r["request"]["uid"]
    assert body["response"]["allowed"] is True
    assert ("patch" in body["response"]) == (path == "/mutate")


def test_mutate_patch_applies(client):
    p = pod(c("train", 2))
    body = post(client, "/mutate", review(p)).get_json()["response"]
    assert body["patchType"] == "JSONPatch"
    out = jsonpatch.apply_patch(p, json.loads(base64.b64decode(body["patch"])))
    assert out["metadata"]["annotations"]["mthreads.com/request-gpu-num"] == "2"


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_denial_carries_the_message(client, path):
    r = review(pod(c("train", 1, 3)))
    body = post(client, path, r).get_json()["response"]
    assert body["allowed"] is False
    assert body["uid"] == r["request"]["uid"]
    assert body["status"]["code"] == 403
    assert 'container "train": mthreads.com/sgpu-memory=3 is not valid' in body["status"]["message"]


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_proc_host_path_is_denied_through_the_app(client, path):
    """Rule 8 end to end (issue 32): /proc/1/root/dev is the host's /dev."""
    p = pod(c("train", 1, 32, 8))
    p["spec"]["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    p["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": "/proc/1/root/dev"}}]
    body = post(client, path, review(p)).get_json()["response"]
    assert body["allowed"] is False and body["status"]["code"] == 403
    assert body["status"]["message"] == (
        "container \"train\": mounting hostPath '/proc/1/root/dev' (volume 'host') is not allowed "
        "in an Mthreads pod (it would reach every card of the node: /proc/<pid>/root is the "
        "host's /)")


def test_plain_pod_passes_unchanged(client):
    body = post(client, "/mutate", review(pod(c("web")))).get_json()["response"]
    assert body == {"uid": body["uid"], "allowed": True}


@pytest.mark.parametrize("op", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed(client, op):
    r = review(None, operation=op)
    assert post(client, "/validate", r).get_json()["response"]["allowed"] is True


def test_non_pod_objects_are_allowed(client):
    r = review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x",
                "annotations": {"hami.io/bind-phase": "x"}}})
    r["request"]["kind"] = {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert post(client, "/validate", r).get_json()["response"]["allowed"] is True


def test_update_rule_10(client):
    old = pod(c("train", 1, 32), annotations={"hami.io/bind-phase": "allocating"})
    new = pod(c("train", 1, 32), annotations={"hami.io/bind-phase": "success"})
    body = post(client, "/validate", review(new, "UPDATE", old)).get_json()["response"]
    assert body["allowed"] is False and "hami.io/bind-phase" in body["status"]["message"]
    ok = post(client, "/validate", review(new, "UPDATE", old,
              user="system:serviceaccount:kube-system:mthreads-allocator")).get_json()["response"]
    assert ok["allowed"] is True
    # UPDATE is never mutated
    assert "patch" not in post(client, "/mutate", review(new, "UPDATE", new)).get_json()["response"]


@pytest.mark.parametrize("body, status, words", [
    (b"not json", 400, "not JSON"),
    (b"\xff\xfe", 400, "not JSON"),
    (b"[]", 400, "not a JSON object"),
    (json.dumps({"kind": "Pod"}), 400, "expected 'AdmissionReview'"),
    (json.dumps({"kind": "AdmissionReview", "apiVersion": "v2"}), 400, "apiVersion"),
    (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}), 400, "request is missing"),
    (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                 "request": {"operation": "CREATE", "object": {}}}), 400, "uid"),
    (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                 "request": {"uid": "u", "operation": "CREATE"}}), 400, "object is missing on CREATE"),
    (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                 "request": {"uid": "u", "operation": "UPDATE", "object": {}}}), 400, "oldObject"),
    (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                 "request": {"uid": "u", "operation": "PATCH", "object": {}}}), 400, "operation"),
])
def test_malformed_input_gets_4xx_with_message(client, body, status, words):
    resp = post(client, "/validate", body)
    assert resp.status_code == status
    assert words in resp.get_json()["error"]


def test_wrong_content_type_is_415(client):
    resp = post(client, "/mutate", json.dumps(review(pod())), content_type="text/plain")
    assert resp.status_code == 415 and "application/json" in resp.get_json()["error"]


def test_oversized_body_is_413(client):
    resp = post(client, "/mutate", b"x" * (MAX_BODY + 1))
    assert resp.status_code == 413
    assert "error" in resp.get_json()


def test_body_just_under_the_limit_is_read(client):
    r = review(pod(c("web", extra={"cpu": "1"})))
    r["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (6 * 1024 * 1024)}
    assert post(client, "/validate", r).get_json()["response"]["allowed"] is True


@pytest.mark.parametrize("size, status", [(MAX_BODY + 1, 413), (6 * 1024 * 1024, 200)])
def test_body_limit_when_the_server_ends_the_body(size, status):
    """gunicorn sets wsgi.input_terminated: the app reads the body in one call then."""
    client = create_app(Config()).test_client()
    client.environ_base["wsgi.input_terminated"] = True
    r = review(pod(c("web", extra={"cpu": "1"})))
    r["request"]["object"]["metadata"]["annotations"] = {"big": ""}
    body = json.dumps(r)
    body = body.replace('"big": ""', f'"big": "{"x" * (size - len(body))}"')
    assert len(body) == size
    resp = post(client, "/validate", body)
    assert resp.status_code == status
    assert status != 200 or resp.get_json()["response"]["allowed"] is True


class _StalledBody(io.BytesIO):
    """A body stream whose read fails as gunicorn's does when a client stops sending."""

    def read(self, *args):
        raise TimeoutError("not received within the read budget of 3 s")

    readinto = readline = read


def test_a_body_that_stops_coming_is_408_naming_why():
    """Under gunicorn (wsgi.input_terminated) a stalled read raises; the answer says so."""
    client = create_app(Config()).test_client()
    environ = {"wsgi.input": _StalledBody(), "CONTENT_LENGTH": "100",
               "wsgi.input_terminated": True}
    resp = client.post("/validate", content_type="application/json", environ_overrides=environ)
    assert resp.status_code == 408
    assert resp.get_json() == {"error": "request body not received in full: "
                                        "not received within the read budget of 3 s"}


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_content_type_with_parameters_or_case_is_accepted(client, content_type):
    resp = post(client, "/validate", json.dumps(review(pod())), content_type=content_type)
    assert resp.status_code == 200 and resp.get_json()["response"]["allowed"] is True


def test_internal_error_is_an_admission_denial_with_500(client, monkeypatch):
    import webhook.server.app as app_module

    def broken(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(app_module, "decide", broken)
    r = review(pod(c("train", 1, 32)))
    resp = post(client, "/mutate", r)
    assert resp.status_code == 200
    body = resp.get_json()["response"]
    assert body["allowed"] is False and body["status"]["code"] == 500
    assert body["uid"] == r["request"]["uid"]
    assert "boom" not in json.dumps(body) and "Traceback" not in json.dumps(body)


def test_unknown_path_and_method(client):
    assert client.get("/mutate").status_code == 405
    assert client.get("/nope").status_code == 404


def test_health_and_readiness(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    not_ready = create_app(Config(), readiness=lambda: (False, "tls.crt is missing")).test_client()
    resp = not_ready.get("/readyz")
    assert resp.status_code == 503 and "tls.crt is missing" in resp.get_data(as_text=True)


def test_metrics_count_results_and_rules(client):
    post(client, "/validate", review(pod(c("train", 1, 3))))
    post(client, "/validate", review(pod(c("train", 1, 3))))
    post(client, "/mutate", review(pod(c("train", 1, 32))))
    post(client, "/mutate", b"nope")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'mthreads_webhook_requests_total{endpoint="validate",result="denied"} 2.0' in text
    assert 'mthreads_webhook_requests_total{endpoint="mutate",result="patched"} 1.0' in text
    assert 'mthreads_webhook_requests_total{endpoint="mutate",result="bad_request"} 1.0' in text
    assert 'mthreads_webhook_denials_total{endpoint="validate",rule="2"} 2.0' in text
    assert 'mthreads_webhook_request_duration_seconds_count{endpoint="mutate"} 2.0' in text


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_subresources_rule_10(client, version, path):
    """pods/status and pods/binding reviews as the API server sends them (docs/deploy.md)."""
    old = pod(c("train", 1, 32), annotations={"hami.io/bind-phase": "allocating"})
    new = pod(c("train", 1, 32), annotations={"hami.io/bind-phase": "success"})
    status = post(client, path, status_review(old, new, version=version)).get_json()
    assert status["apiVersion"] == version
    assert status["response"]["allowed"] is False
    assert "hami.io/bind-phase may only be changed" in status["response"]["status"]["message"]
    forged = post(client, path, binding_review(binding("train", {"hami.io/vgpu-node": "n1"}),
                                               version=version)).get_json()["response"]
    assert forged["allowed"] is False and forged["status"]["code"] == 403
    assert "alice may not bind pod 'train'" in forged["status"]["message"]
    plain = post(client, path, binding_review(binding("web"), user="system:kube-scheduler",
                                              version=version)).get_json()["response"]
    assert plain == {"uid": plain["uid"], "allowed": True}


@pytest.mark.parametrize("obj", [{"kind": "Binding", "metadata": []}, {"kind": "Binding"},
                                 {"kind": "Binding", "metadata": {"annotations": "x"}}])
def test_malformed_binding_is_answered_not_a_500(client, obj):
    resp = post(client, "/validate", binding_review(obj))
    assert resp.status_code == 200 and resp.get_json()["response"]["allowed"] is True
