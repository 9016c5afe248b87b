"""The real `mthreads-webhook serve`: gunicorn over TLS on 127.0.0.1."""

import http.client
import json
import ssl
import subprocess
import time

import pytest

from tests.builders import container as c
from tests.builders import ephemeral_update, pod, review
from tests.harness.wait import wait_for
from tests.harness.webhook import CLI, WebhookProcess, make_certs


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = WebhookProcess(tmp_path_factory.mktemp("serve")).start()
    yield s
    s.stop()


def test_mutate_and_validate_over_https(server):
    r = review(pod(c("gpushare-pod-1", 1, 32, 8)))
    body = server.post("/mutate", r).json()["response"]
    assert body["uid"] == r["request"]["uid"] and body["allowed"] and body["patchType"] == "JSONPatch"
    denied = server.post("/validate", review(pod(c("train", 1, 3)))).json()["response"]
    assert denied["allowed"] is False and "valid values are 2, 4, 8" in denied["status"]["message"]


@pytest.mark.parametrize("legacy", [False, True], ids=["pod-1.22+", "EphemeralContainers-1.16-1.21"])
def test_a_privileged_ephemeral_container_of_an_mthreads_pod_is_denied(server, legacy):
    """The pods/ephemeralcontainers UPDATE as the API server sends it, over HTTPS (1.20's own
    validation refuses an ephemeral securityContext before the webhooks; 1.23+ does not)."""
    running = pod(c("train", 1, 32, 8), node="node-1", annotations={
        "hami.io/mthreads-vgpu-devices-to-allocate": ",Mthreads,16384,8:;"})
    for security, allowed in (({"privileged": True}, False),
                              ({"capabilities": {"add": ["ALL"]}}, False), (None, True)):
        debug = {**c("debug"), **({"securityContext": security} if security else {})}
        answer = server.post("/validate", ephemeral_update(running, debug, legacy)).json()
        assert answer["response"]["allowed"] is allowed, answer
        if not allowed:
            assert 'container "debug"' in answer["response"]["status"]["message"]


def test_connections_are_kept_alive(server):
    """Many requests on one TLS connection, as the API server sends them."""
    ctx = ssl.create_default_context(cafile=server.ca)
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=5)
    body = json.dumps(review(pod(c("web"))))
    conn.connect()
    first_socket = conn.sock
    for _ in range(20):
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["response"]["allowed"]
        assert conn.sock is first_socket  # never reconnected
    time.sleep(3)  # past gunicorn's default keep-alive of 2 s: still open
    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200 and conn.sock is first_socket
    conn.close()


def test_bad_input_does_not_kill_the_worker(server):
    workers = server.workers()
    for body in (b"{", b"[]", b'{"kind": "AdmissionReview"}', b"\x00" * 1000):
        resp = server.session.post(f"{server.url}/mutate", data=body, timeout=5,
                                   headers={"Content-Type": "application/json"})
        assert resp.status_code == 400 and "error" in resp.json()
    assert _oversized_post(server) == 413
    assert server.workers() == workers
    assert server.post("/validate", review(pod())).status_code == 200


def _oversized_post(server) -> int:
    """Announce 8 MiB, send 64 KiB: the answer comes without the body being read."""
    ctx = ssl.create_default_context(cafile=server.ca)
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(8 * 1024 * 1024))
    conn.endheaders(b"x" * 65536)
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_below_1_2_is_refused(server):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(server.ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    import socket
    with socket.create_connection(("127.0.0.1", server.port)) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() == "TLSv1.2"
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    old.set_ciphers("ALL:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", server.port)) as raw:
        with pytest.raises(ssl.SSLError, match="ALERT_PROTOCOL_VERSION"):  # the server's alert
            old.wrap_socket(raw, server_hostname="127.0.0.1")


def test_metrics_and_health(server):
    server.post("/validate", review(pod(c("train", 1, 3))))
    text = server.session.get(f"{server.url}/metrics", timeout=5).text
    assert 'mthreads_webhook_denials_total{endpoint="validate",rule="2"}' in text
    assert server.session.get(f"{server.url}/healthz", timeout=5).text == "ok\n"


def test_rotated_certificate_is_served_without_restart(tmp_path):
    s = WebhookProcess(tmp_path).start()
    try:
        before = s.peer_certificate()
        conn = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=5,
                                           context=ssl.create_default_context(cafile=s.ca))
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok\n"
        make_certs(s.certs)  # same CA, new serving certificate and key
        wait_for(lambda: s.peer_certificate() != before, 10, what="the new certificate served")
        conn.request("GET", "/healthz")  # the connection made before the rotation goes on
        assert conn.getresponse().read() == b"ok\n"
        assert s.session.get(f"{s.url}/readyz", timeout=5).status_code == 200
        pid = s.proc.pid
        assert s.proc.poll() is None and s.proc.pid == pid
    finally:
        s.stop()


def test_readyz_reports_a_missing_certificate(tmp_path):
    s = WebhookProcess(tmp_path).start()
    try:
        (s.certs / "tls.crt").rename(s.certs / "moved.crt")
        time.sleep(1.2)
        resp = s.session.get(f"{s.url}/readyz", timeout=5)  # the loaded context still serves
        assert resp.status_code == 503 and "tls.crt is missing" in resp.text
    finally:
        s.stop()


def test_sigterm_shuts_down_gracefully(tmp_path):
    s = WebhookProcess(tmp_path).start()
    assert s.stop() == 0  # SIGTERM, and a clean exit within the time stop_process gives it


def test_several_workers_share_metrics(tmp_path):
    s = WebhookProcess(tmp_path, extra=["--workers", "2", "--threads", "2"]).start()
    try:
        # ready once one worker serves; the master forks the second a moment later
        wait_for(lambda: len(s.workers()) == 2, 20, what="two gunicorn workers", alive=s)
        for _ in range(10):
            s.session.close()  # new connections, spread over both workers
            s.post("/validate", review(pod(c("train", 1, 3))))
        text = s.session.get(f"{s.url}/metrics", timeout=5).text
        assert 'mthreads_webhook_requests_total{endpoint="validate",result="denied"} 10.0' in text
    finally:
        s.stop()


@pytest.mark.parametrize("content, words", [
    ("devices:\n  mthreads:\n    memoryPerCard: []\n", "devices.mthreads.memoryPerCard: must list"),
    ("schedulerNmae: x\n", "schedulerNmae: unknown key"),
])
def test_bad_config_stops_with_one_line(tmp_path, content, words):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(content)
    out = subprocess.run([*CLI, "serve", "--config", str(cfg), "--bind", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], out.stderr


def test_missing_certificate_stops_with_one_line(tmp_path):
    out = subprocess.run([*CLI, "serve", "--bind", "127.0.0.1:1", "--cert-file",
                          str(tmp_path / "no.crt"), "--key-file", str(tmp_path / "no.key")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and "no.crt" in out.stderr


def test_certs_command(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    out = subprocess.run([*CLI, "certs", "--out", str(tmp_path), "--service", "wh",
                          "--namespace", "gpu"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "wh", "wh.gpu", "wh.gpu.svc", "wh.gpu.svc.cluster.local", "localhost"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    for key in ("tls.key", "ca.key"):
        assert (tmp_path / key).stat().st_mode & 0o777 == 0o600
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    # a re-run keeps the CA (the caBundle clients trust) and issues a new serving certificate
    subprocess.run([*CLI, "certs", "--out", str(tmp_path)], check=True, capture_output=True)
    assert (tmp_path / "ca.crt").read_bytes() == ca.public_bytes(Encoding.PEM)
    assert x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes()).serial_number \
        != cert.serial_number
