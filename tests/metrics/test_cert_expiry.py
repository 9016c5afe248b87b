"""The webhook's certificate expiry gauge, from a real `serve` (gunicorn, TLS, two workers)."""

from __future__ import annotations

import subprocess

from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.wait import wait_for
from tests.harness.webhook import CLI, WebhookProcess

NAME = "mthreads_webhook_certificate_expiry_timestamp_seconds"


def expiry(server: WebhookProcess) -> list[float]:
    server.session.close()  # a new connection: either worker may answer
    text = server.session.get(f"{server.url}/metrics", timeout=10).text
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == NAME]


def not_after(path) -> float:
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc.timestamp()


def test_expiry_is_the_served_certificates_and_follows_a_rotation(tmp_path):
    server = WebhookProcess(tmp_path, extra=["--workers", "2", "--threads", "2"]).start()
    try:
        first = not_after(server.certs / "tls.crt")
        for _ in range(4):  # once per scrape, whichever worker answers
            assert expiry(server) == [first]
        subprocess.run([*CLI, "certs", "--out", str(server.certs), "--days", "10"], check=True,
                       capture_output=True, timeout=60)
        rotated = not_after(server.certs / "tls.crt")
        assert rotated < first - 300 * 86400
        wait_for(lambda: all(expiry(server) == [rotated] for _ in range(4)), 30,
                 what="both workers to report the rotated certificate")
    finally:
        server.stop()
