"""A CA and a serving certificate for the webhook's Service (and localhost)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local", "localhost"]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # cheaper handshakes than RSA


def _builder(subject: str, issuer: x509.Name, public_key, days: int) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days)))


def make_ca(days: int = 3650) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = "mthreads-webhook-ca"
    cert = (_builder(name, _name(name), key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def make_serving(ca: x509.Certificate, ca_key, dns: list[str], ips: list[str],
                 days: int = 365) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (_builder(dns[0], ca.subject, key.public_key(), days)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_atomic(path: str, data: bytes, mode: int) -> None:
    """Write via a temp file and rename, so a server never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_certs(out: str, service: str = "mthreads-webhook", namespace: str = "kube-system",
                new_ca: bool = False, days: int = 365) -> dict[str, str]:
    """Write ca.crt, ca.key, tls.crt, tls.key under `out`. An existing CA is reused, so a
    re-run rotates the serving certificate without changing the caBundle clients trust."""
    os.makedirs(out, exist_ok=True)
    paths = {n: os.path.join(out, n) for n in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    if not new_ca and os.path.exists(paths["ca.crt"]) and os.path.exists(paths["ca.key"]):
        with open(paths["ca.crt"], "rb") as f:
            ca = x509.load_pem_x509_certificate(f.read())
        with open(paths["ca.key"], "rb") as f:
            ca_key = serialization.load_pem_private_key(f.read(), password=None)
    else:
        ca, ca_key = make_ca()
        write_atomic(paths["ca.key"], _pem_key(ca_key), 0o600)
        write_atomic(paths["ca.crt"], _pem_cert(ca), 0o644)
    cert, key = make_serving(ca, ca_key, service_names(service, namespace), ["127.0.0.1"], days)
    # The key first: a server that sees the new key with the old certificate fails to
    # load and keeps the old pair; the next check sees both new.
    write_atomic(paths["tls.key"], _pem_key(key), 0o600)
    write_atomic(paths["tls.crt"], _pem_cert(cert), 0o644)
    return paths
