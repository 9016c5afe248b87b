"""One peer flooding the webhook with big valid reviews, and another peer's calls meanwhile
(issue 32, item 6).

The flood runs in a process of its own (`python -m tests.hardening.flood`), so that its
threads take no GIL from the calls being timed: `connections` TLS connections from one
loopback address (127.0.0.2 by default) each send a ~2.5 MB AdmissionReview of a pod with
20,000 slice containers, read the answer and send the next, back to back, until stopped
(SIGTERM, by PID) or `max_seconds` have passed. On exit it prints its answers by status as
one JSON line. The calls come from 127.0.0.1, another peer, as the API server is.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import socket
import ssl
import threading
import time

from tests.builders import pod, review
from tests.hardening.net import read_answer, request_bytes, timed_calls
from tests.harness.process import ReportingProcess

CONTAINERS = 20_000
FLOWING = "flowing"  # printed once every connection has sent its first review


def big_review() -> bytes:
    """A well-formed review that costs the webhook a lot (about 0.2 s): 20,000 slice
    containers. It is answered 200 (denied: more than one card)."""
    containers = [{"name": f"c{i}", "image": "busybox", "resources": {"limits": {
        "mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4"}}} for i in range(CONTAINERS)]
    return json.dumps(review(pod(*containers))).encode()


# --- the flooding process ----------------------------------------------------------------

def _flood_one(port: int, tls: ssl.SSLContext, source: str, request: bytes, stop: threading.Event,
               answers: collections.Counter, sent_once: threading.Barrier) -> None:
    first = True
    while not stop.is_set():
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=30,
                                           source_address=(source, 0))
            with tls.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                while not stop.is_set():
                    sock.sendall(request)
                    if first:
                        first = False
                        sent_once.wait()
                    status, _ = read_answer(sock, limit=30)
                    answers[status] += 1
                    if status != 200:
                        break  # closed by the server (a 408, say): connect again
        except (OSError, threading.BrokenBarrierError):
            answers["connection error"] += 1
            stop.wait(0.05)


def flood(port: int, ca: str, source: str, connections: int, max_seconds: float) -> dict:
    request = request_bytes(body=big_review())
    tls = ssl.create_default_context(cafile=ca)
    stop = threading.Event()
    answers: collections.Counter = collections.Counter()
    sent_once = threading.Barrier(connections, action=lambda: print(FLOWING, flush=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=_flood_one, daemon=True,
                                args=(port, tls, source, request, stop, answers, sent_once))
               for _ in range(connections)]
    for t in threads:
        t.start()
    stop.wait(max_seconds)
    stop.set()
    sent_once.abort()
    for t in threads:
        t.join(35)
    return {"answers": {str(k): v for k, v in answers.items()}, "bytes": len(request)}


# --- the runner ---------------------------------------------------------------------------

class Flood(ReportingProcess):
    """The flooding process against `server`; start() returns once every connection has sent
    its first review, stop() (by PID) returns its answers by status."""

    def __init__(self, server, connections: int, source: str = "127.0.0.2",
                 max_seconds: float = 120.0):
        super().__init__("tests.hardening.flood", [
            "--port", str(server.port), "--ca", str(server.ca), "--source", source,
            "--connections", str(connections), "--max-seconds", str(max_seconds)],
            FLOWING, "the flood")
        self.started = 0.0

    def start(self, timeout: float = 30.0) -> "Flood":
        super().start(timeout)
        self.started = time.monotonic()
        return self

    def stop(self, timeout: float = 45.0) -> dict:
        """SIGTERM by PID; {"answers": {status: count}, "bytes": the review's size,
        "seconds": how long it flooded}."""
        if self.proc is None:
            return {}
        result = super().stop(timeout) or {"answers": {}}
        result["seconds"] = time.monotonic() - self.started if self.started else 0.0
        return result


def calls_under_flood(server, connections: int, calls: int = 10, timeout: float = 6.0,
                      pause: float = 0.2) -> dict:
    """`calls` POSTs of a small review from 127.0.0.1, each on a new connection (TLS handshake
    included), while `connections` from 127.0.0.2 flood big reviews. Returns the calls'
    (status, seconds) and the flood's answers."""
    flooding = Flood(server, connections, max_seconds=30 + calls * (timeout + pause)).start()
    try:
        results = timed_calls(server, calls, timeout, pause)
    finally:
        stats = flooding.stop()
    return {"calls": results, "flood": stats}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--source", default="127.0.0.2")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--max-seconds", type=float, default=60.0)
    a = p.parse_args()
    print(json.dumps(flood(a.port, a.ca, a.source, a.connections, a.max_seconds)), flush=True)


if __name__ == "__main__":
    main()
