"""The serving certificate under rotation, expiry and removal, on the real server.

The files are laid out as a Secret volume lays them out: `tls.crt -> ..data/tls.crt`,
`..data -> ..2026_<stamp>`, and an update writes a new timestamped directory and renames a new
`..data` symlink over the old one (atomic), then removes the old directory.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shutil
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from tests.builders import container as c
from tests.builders import pod, review
from tests.harness.wait import time_until
from tests.harness.webhook import WebhookProcess
from webhook.server.certs import _pem_cert, _pem_key, make_ca, make_serving, service_names

_stamp = itertools.count(1)


class SecretVolume:
    """A directory shaped like a mounted kubernetes.io/tls Secret, with its CA."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = make_ca()
        ca_file = self.dir.parent / f"{self.dir.name}-ca.crt"
        ca_file.write_bytes(_pem_cert(self.ca))
        self.ca_file = str(ca_file)
        self.current: x509.Certificate | None = None

    def serving(self, not_before: dt.datetime | None = None, not_after: dt.datetime | None = None):
        cert, key = make_serving(self.ca, self.ca_key, service_names("mthreads-webhook", "kube-system"),
                                 ["127.0.0.1"])
        if not_before or not_after:  # rebuild with the dates wanted (make_serving takes days only)
            builder = (x509.CertificateBuilder().subject_name(cert.subject).issuer_name(cert.issuer)
                       .public_key(key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(not_before or cert.not_valid_before_utc)
                       .not_valid_after(not_after or cert.not_valid_after_utc))
            for ext in cert.extensions:
                builder = builder.add_extension(ext.value, ext.critical)
            cert = builder.sign(self.ca_key, hashes.SHA256())
        return cert, key

    def publish(self, cert, key, key_pem: bytes | None = None) -> None:
        """What the kubelet does on a Secret update: new dir, new ..data symlink renamed over."""
        stamp = f"..2026_01_01_00_00_{next(_stamp):02d}.{os.getpid()}"
        new = self.dir / stamp
        new.mkdir()
        (new / "tls.crt").write_bytes(_pem_cert(cert))
        (new / "tls.key").write_bytes(key_pem if key_pem is not None else _pem_key(key))
        data = self.dir / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        tmp = self.dir / "..data_tmp"
        os.symlink(stamp, tmp)
        os.rename(tmp, data)  # atomic
        for name in ("tls.crt", "tls.key"):
            link = self.dir / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        if old:
            shutil.rmtree(self.dir / old)
        self.current = cert

    def remove(self) -> None:
        """The Secret's files gone (the symlinks dangle)."""
        data = self.dir / "..data"
        target = os.readlink(data)
        data.unlink()
        shutil.rmtree(self.dir / target)


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def served(port: int, ca_file: str | None = None) -> bytes:
    """The certificate a new connection is served (verified against the CA unless None)."""
    if ca_file:
        ctx = ssl.create_default_context(cafile=ca_file)
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


class Shared(NamedTuple):
    volume: SecretVolume  # the Secret's files the server reads
    server: WebhookProcess


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("certificates")
    volume = SecretVolume(tmp_path / "secret")
    volume.publish(*volume.serving())
    server = WebhookProcess(tmp_path)
    # Point the server at the Secret-shaped files instead of the harness's own.
    server.args[server.args.index("--cert-file") + 1] = str(volume.dir / "tls.crt")
    server.args[server.args.index("--key-file") + 1] = str(volume.dir / "tls.key")
    server.ca = volume.ca_file
    server.session.verify = volume.ca_file
    server.start()
    yield Shared(volume, server)
    server.session.close()  # no kept-alive connection for the worker to linger on
    server.stop()


@pytest.fixture
def volume_server(shared_server):
    """Each test starts from a fresh valid pair, served and ready."""
    volume, server = shared_server
    cert, key = volume.serving()
    volume.publish(cert, key)
    time_until(lambda: served(server.port, volume.ca_file) == der(cert), 3)
    time_until(lambda: readyz(server)[0] == 200, 3)
    return volume, server


def readyz(server) -> tuple[int, str]:
    resp = server.session.get(f"{server.url}/readyz", timeout=5)
    return resp.status_code, resp.text


# -- rotation under load ------------------------------------------------------------------------


class Load:
    """Client threads posting reviews for `seconds`: some on a new connection per request,
    some kept alive (reconnecting every 25 requests). Stops by itself."""

    def __init__(self, server, ca_file: str, seconds: float, fresh: int = 2, kept: int = 2):
        self.server, self.ca_file, self.seconds = server, ca_file, seconds
        self.ok = 0
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i < fresh,), daemon=True)
                        for i in range(fresh + kept)]

    def _session(self) -> requests.Session:
        s = requests.Session()
        s.trust_env = False
        s.verify = self.ca_file
        return s

    def _run(self, fresh: bool) -> None:
        deadline = time.monotonic() + self.seconds
        session, n = self._session(), 0
        while time.monotonic() < deadline:
            if fresh or n % 25 == 0:
                session.close()
                session = self._session()
            n += 1
            r = review(pod(c("train", 1, 32, 8)))
            try:
                resp = session.post(f"{self.server.url}/mutate", data=json.dumps(r), timeout=5,
                                    headers={"Content-Type": "application/json"})
                body = resp.json()["response"]
                good = resp.status_code == 200 and body["uid"] == r["request"]["uid"] and body["allowed"]
                problem = None if good else f"{resp.status_code} {body}"
            except Exception as e:  # noqa: BLE001 - every failure is recorded
                problem = repr(e)
            with self.lock:
                if problem:
                    self.failures.append(problem)
                else:
                    self.ok += 1
        session.close()

    def __enter__(self):
        self.started = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        for t in self.threads:
            t.join(self.seconds + 30)


def test_rotation_under_load_loses_no_request_and_is_seen_within_bounded_time(volume_server):
    volume, server = volume_server
    first = volume.current
    kept = requests.Session()  # a connection made before the rotations, used after them
    kept.trust_env, kept.verify = False, volume.ca_file
    assert kept.get(f"{server.url}/healthz", timeout=5).status_code == 200
    seen_after = []
    with Load(server, volume.ca_file, seconds=10) as load:
        for at in (2.5, 6.0):
            time.sleep(max(0.0, at - (time.monotonic() - load.started)))
            cert, key = volume.serving()
            volume.publish(cert, key)
            seen_after.append(time_until(lambda: served(server.port, volume.ca_file) == der(cert), 5))
    print(f"rotation: {load.ok} requests ok, {len(load.failures)} failed; new connections saw "
          f"the new certificate after {', '.join(f'{s:.2f} s' for s in seen_after)}")
    assert load.failures == [], load.failures[:5]
    assert load.ok > 100
    assert all(s < 2.5 for s in seen_after), seen_after  # checked at most once a second
    assert volume.current is not first
    assert kept.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert readyz(server)[0] == 200


# -- readiness ----------------------------------------------------------------------------------


def test_readyz_reports_missing_files_then_recovers(volume_server):
    volume, server = volume_server
    volume.remove()
    time_until(lambda: readyz(server)[0] == 503, 3)
    assert "missing" in readyz(server)[1]
    # the loaded context goes on serving
    assert server.post("/validate", review(pod(c("web")))).status_code == 200
    cert, key = volume.serving()
    volume.publish(cert, key)
    time_until(lambda: readyz(server)[0] == 200, 3)
    time_until(lambda: served(server.port, volume.ca_file) == der(cert), 3)


@pytest.mark.parametrize("dates, words", [
    ({"not_before": "-30d", "not_after": "-1d"}, "expired"),
    ({"not_before": "+1d", "not_after": "+30d"}, "not valid before"),
])
def test_readyz_reports_an_expired_or_not_yet_valid_certificate(volume_server, dates, words):
    volume, server = volume_server
    now = dt.datetime.now(dt.timezone.utc)
    when = {k: now + dt.timedelta(days=int(v[:-1])) for k, v in dates.items()}
    cert, key = volume.serving(**when)
    volume.publish(cert, key)
    time_until(lambda: readyz(server)[0] == 503, 3)
    assert words in readyz(server)[1]
    assert served(server.port) == der(cert)  # served anyway: clients refuse it, /readyz says why
    with pytest.raises(ssl.SSLCertVerificationError):
        served(server.port, volume.ca_file)
    good, good_key = volume.serving()
    volume.publish(good, good_key)
    time_until(lambda: readyz(server)[0] == 200, 3)


@pytest.mark.parametrize("bad", ["garbage key", "key of another certificate", "empty files"])
def test_a_broken_pair_keeps_the_previous_certificate(volume_server, bad):
    volume, server = volume_server
    before = volume.current
    cert, key = volume.serving()
    if bad == "garbage key":
        volume.publish(cert, key, key_pem=b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    elif bad == "key of another certificate":
        volume.publish(cert, volume.serving()[1])
    else:
        volume.publish(cert, key, key_pem=b"")
    time.sleep(1.5)  # past the once-a-second check
    assert served(server.port, volume.ca_file) == der(before)
    assert server.post("/validate", review(pod(c("web")))).status_code == 200
    assert readyz(server)[0] == 200  # the loaded pair is valid, and it is what is served


# -- protocol versions ----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_below_1_2_is_refused_also_after_a_rotation(volume_server):
    volume, server = volume_server

    def handshake(version: ssl.TLSVersion) -> str:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_ciphers("ALL:@SECLEVEL=0")
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            try:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    return s.version()
            except ssl.SSLError as e:
                return f"refused: {e.reason}"

    for _ in range(2):
        results = {v.name: handshake(v) for v in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1,
                                                  ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)}
        assert results["TLSv1_2"] == "TLSv1.2" and results["TLSv1_3"] == "TLSv1.3", results
        for old in ("TLSv1", "TLSv1_1"):
            assert results[old].startswith("refused"), results
        cert, key = volume.serving()
        volume.publish(cert, key)
        time_until(lambda: served(server.port, volume.ca_file) == der(cert), 3)
