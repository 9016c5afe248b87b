"""A watch whose connection goes silent (a middlebox dropped it without a word) is resumed.

The real API server always closes its sockets, so this one case needs a server that does not:
a few lines of HTTP on 127.0.0.1 that answer the list, then hold the first watch open silently.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes import client

from webhook.kube.api import Api
from webhook.kube.informer import Informer

NODE = {"metadata": {"name": "n1", "resourceVersion": "7"}}


class SilentThenTalking(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # a watch is a chunked stream, as the API server sends it
    watches = 0
    release = threading.Event()

    def do_GET(self):
        if "watch=true" not in self.path:
            self._send(json.dumps({"metadata": {"resourceVersion": "5"}, "items": []}).encode())
            return
        type(self).watches += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if self.watches == 1:
            self.release.wait(30)  # silent: no event, no close
            return
        line = json.dumps({"type": "ADDED", "object": NODE}).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()
        self.release.wait(30)

    def _send(self, body: bytes):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_silent_watch_is_abandoned_and_resumed():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SilentThenTalking)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = Api(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{server.server_port}")))
    out: queue.Queue = queue.Queue()
    informer = Informer(api, "node", "/api/v1/nodes", None, out.put, session=1)
    informer.read_timeout = 1.0
    informer.start()
    try:
        assert out.get(timeout=10)[2] == "RESET"
        started = time.monotonic()
        _, kind, event, obj = out.get(timeout=15)
        assert (kind, event, obj["metadata"]["name"]) == ("node", "ADDED", "n1")
        assert SilentThenTalking.watches == 2
        assert time.monotonic() - started < 10
    finally:
        informer.stop()
        SilentThenTalking.release.set()
        server.shutdown()
        server.server_close()
