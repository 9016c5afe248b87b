"""The serving certificate: one SSL context, rebuilt only when the files change.

gunicorn asks for a context on every accepted connection; building one reads
and parses the key again, which halved the rate of new connections. Watching
the files is also how a rotated certificate (a Secret update) is picked up.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import threading
import time

from cryptography import x509

log = logging.getLogger(__name__)


class CertificateError(Exception):
    pass


def _signature(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)  # follows the symlinks a Secret volume swaps on update
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


class ServingCertificate:
    def __init__(self, cert_file: str, key_file: str, check_interval: float = 1.0):
        self.cert_file, self.key_file = cert_file, key_file
        self.check_interval = check_interval
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._signature: tuple | None = None
        self._not_after: dt.datetime | None = None
        self._not_before: dt.datetime | None = None
        self._checked = 0.0
        self.reload()  # fail at start, with a clear message, on unusable files

    def reload(self) -> None:
        """Load the files now; raises CertificateError and keeps the old context on failure."""
        try:
            signature = (_signature(self.cert_file), _signature(self.key_file))
            with open(self.cert_file, "rb") as f:
                cert = x509.load_pem_x509_certificate(f.read())
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ValueError, ssl.SSLError) as e:
            raise CertificateError(f"cannot load {self.cert_file} / {self.key_file}: {e}") from None
        self._context, self._signature = context, signature
        self._not_before, self._not_after = cert.not_valid_before_utc, cert.not_valid_after_utc

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= self.check_interval:
            with self._lock:
                if now - self._checked >= self.check_interval:
                    self._checked = now
                    self._reload_if_changed()
        return self._context

    @property
    def not_after(self) -> dt.datetime:
        """The loaded certificate's notAfter, after picking up a rotated file (for metrics)."""
        self.context()
        return self._not_after

    def _reload_if_changed(self) -> None:
        try:
            changed = (_signature(self.cert_file), _signature(self.key_file)) != self._signature
        except OSError:
            return  # mid-rotation: keep serving what we have
        if changed:
            try:
                self.reload()
                log.info("loaded a new serving certificate from %s", self.cert_file)
            except CertificateError as e:  # e.g. the key written before the certificate
                log.warning("%s; still serving the previous certificate", e)

    def status(self) -> tuple[bool, str]:
        """Ready when the files are there and the loaded certificate is within its dates."""
        self.context()
        for path in (self.cert_file, self.key_file):
            if not os.path.exists(path):
                return False, f"{path} is missing"
        now = dt.datetime.now(dt.timezone.utc)
        if now >= self._not_after:
            return False, f"certificate expired at {self._not_after.isoformat()}"
        if now < self._not_before:
            return False, f"certificate is not valid before {self._not_before.isoformat()}"
        return True, f"certificate valid until {self._not_after.isoformat()}"
