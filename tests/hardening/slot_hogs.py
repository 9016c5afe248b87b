"""Peers that hold the webhook's connection slots, and another peer's calls meanwhile (issue 46,
finding 3).

The hogs run in a process of their own (`python -m tests.hardening.slot_hogs`), so that they
take no GIL from the calls being timed. From each of `peers` loopback addresses (127.0.0.2 and
up) they hold `per_peer` TLS connections: `silent` of them finish the handshake and send
nothing, the others send one small review, read the answer and stay kept alive, idle. Whatever
the server drops is opened again (after REOPEN_PAUSE; after FAILED_PAUSE when it never got
through the handshake, so that refused ones do not spin). One thread drives them all with
non-blocking sockets. It prints READY once every connection has been tried, stops on SIGTERM
(by PID) or after `max_seconds`, and prints what it held as one JSON line. The calls come
from 127.0.0.1, another peer, as the API server is.
"""

from __future__ import annotations

import argparse
import json
import selectors
import signal
import socket
import ssl
import time

from tests.hardening.net import request_bytes, timed_calls
from tests.harness.process import ReportingProcess

READY = "ready"  # printed once every connection has been tried once
REOPEN_PAUSE = 0.05  # seconds before a dropped connection is opened again
FAILED_PAUSE = 1.0  # ... and before one refused before its handshake ended is tried again


# --- the hogging process -----------------------------------------------------------------

class Slot:
    """One connection the hogs keep open, opened again whenever it is lost."""

    __slots__ = ("source", "silent", "sock", "phase", "answer", "tried", "due")

    def __init__(self, source: str, silent: bool):
        self.source, self.silent = source, silent
        self.sock: ssl.SSLSocket | None = None
        self.phase = "closed"  # handshake, answer (idle ones: reading theirs), held, closed
        self.answer = b""
        self.tried = False
        self.due = 0.0  # when a closed slot is opened again


class Hogs:
    def __init__(self, port: int, tls: ssl.SSLContext, sources: list[str], per_peer: int,
                 silent: int):
        self.port, self.tls = port, tls
        self.request = request_bytes()
        self.slots = [Slot(source, i < silent) for source in sources for i in range(per_peer)]
        self.sel = selectors.DefaultSelector()
        self.held = 0
        self.held_min: int | None = None  # over the time after READY
        self.held_max = 0
        self.reopened = 0
        self.failed = 0

    def run(self, stop, max_seconds: float) -> dict:
        deadline = time.monotonic() + max_seconds
        ready = False
        try:
            while not stop() and time.monotonic() < deadline:
                now = time.monotonic()
                for slot in self.slots:
                    if slot.phase == "closed" and slot.due <= now:
                        self._open(slot)
                for key, _ in self.sel.select(0.05):
                    self._step(key.data)
                if not ready and all(s.tried for s in self.slots):
                    ready = True
                    print(READY, flush=True)
                if ready:
                    self.held_min = self.held if self.held_min is None else min(self.held_min,
                                                                                self.held)
                    self.held_max = max(self.held_max, self.held)
        finally:
            for slot in self.slots:
                if slot.sock is not None:
                    slot.sock.close()
            self.sel.close()
        return {"slots": len(self.slots), "held_min": self.held_min, "held_max": self.held_max,
                "reopened": self.reopened, "failed": self.failed}

    def _open(self, slot: Slot) -> None:
        raw = socket.socket()
        raw.setblocking(False)
        raw.bind((slot.source, 0))
        raw.connect_ex(("127.0.0.1", self.port))
        slot.sock = self.tls.wrap_socket(raw, server_hostname="127.0.0.1",
                                         do_handshake_on_connect=False)
        slot.phase, slot.answer = "handshake", b""
        self.sel.register(slot.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, slot)

    def _step(self, slot: Slot) -> None:
        sock = slot.sock
        try:
            if slot.phase == "handshake":
                sock.do_handshake()
                self.sel.modify(sock, selectors.EVENT_READ, slot)
                if slot.silent:
                    self._hold(slot)
                else:
                    sock.send(self.request)  # a few hundred bytes: one TLS record
                    slot.phase = "answer"
                return
            data = sock.recv(65536)
            if not data:
                raise ConnectionResetError
            if slot.phase == "answer":
                slot.answer += data
                head, sep, body = slot.answer.partition(b"\r\n\r\n")
                if sep and b" 200 " not in head.split(b"\r\n", 1)[0]:
                    raise ConnectionResetError  # refused: start again
                length = head.lower().partition(b"content-length:")[2].split(b"\r\n")[0]
                if sep and len(body) >= int(length or 0):
                    self._hold(slot)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except (OSError, ValueError):
            self._lost(slot)

    def _hold(self, slot: Slot) -> None:
        slot.phase, slot.tried = "held", True
        self.held += 1

    def _lost(self, slot: Slot) -> None:
        self.sel.unregister(slot.sock)
        slot.sock.close()
        slot.sock = None
        if slot.phase == "held":
            self.held -= 1
            self.reopened += 1
            slot.due = time.monotonic() + REOPEN_PAUSE
        else:
            self.failed += 1
            slot.due = time.monotonic() + FAILED_PAUSE
        slot.phase, slot.tried = "closed", True


def hog(port: int, ca: str, peers: int, per_peer: int, silent: int, max_seconds: float) -> dict:
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sources = [f"127.0.0.{2 + i}" for i in range(peers)]
    hogs = Hogs(port, ssl.create_default_context(cafile=ca), sources, per_peer, silent)
    return hogs.run(lambda: bool(stopping), max_seconds)


# --- the runner ---------------------------------------------------------------------------

class SlotHogs(ReportingProcess):
    """The hogging process against `server`; start() returns once every connection has been
    tried, stop() (by PID) returns what was held meanwhile: {"slots", "held_min", "held_max",
    "reopened", "failed"}."""

    def __init__(self, server, peers: int, per_peer: int, silent: int = 8,
                 max_seconds: float = 180.0):
        super().__init__("tests.hardening.slot_hogs", [
            "--port", str(server.port), "--ca", str(server.ca), "--peers", str(peers),
            "--per-peer", str(per_peer), "--silent", str(silent),
            "--max-seconds", str(max_seconds)], READY, "the hogs")


def calls_under_slot_hogs(server, peers: int, per_peer: int, calls: int = 10,
                          settle: float = 4.0, timeout: float = 6.0, pause: float = 0.2) -> dict:
    """`calls` POSTs from 127.0.0.1, each on a new connection (TLS handshake included), while
    `peers` hogs hold `per_peer` connections each; after `settle` seconds, so that the silent
    ones have been cut off and opened again once. Returns the calls' (status, seconds) and
    what the hogs held."""
    hogs = SlotHogs(server, peers, per_peer,
                    max_seconds=90 + settle + calls * (timeout + pause)).start(timeout=90)
    try:
        time.sleep(settle)
        results = timed_calls(server, calls, timeout, pause)
    finally:
        held = hogs.stop()
    return {"calls": results, "hogs": held}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--peers", type=int, default=2)
    p.add_argument("--per-peer", type=int, default=500)
    p.add_argument("--silent", type=int, default=8)
    p.add_argument("--max-seconds", type=float, default=120.0)
    a = p.parse_args()
    print(json.dumps(hog(a.port, a.ca, a.peers, a.per_peer, a.silent, a.max_seconds)), flush=True)


if __name__ == "__main__":
    main()
