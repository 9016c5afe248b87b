"""A few lines of HTTP on 127.0.0.1 that record what the API client (webhook/kube/api.py)
sends, for its tests. Paths that start with /broken promise more than they
send and hang up; /close answers with "Connection: close"; /hangup answers, then closes the
connection without saying so; /slow answers after a second."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes import client

from webhook.kube.api import Api


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict] = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Recorder.seen.append({"method": self.command, "path": self.path, "port": self.client_address[1],
                              "auth": self.headers.get("Authorization"),
                              "type": self.headers.get("Content-Type"),
                              "body": json.loads(body) if body else None})
        if self.path.startswith("/broken"):  # promises more than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"kind":')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if self.path.startswith("/slow"):
            time.sleep(1)
        out = json.dumps({"kind": "Status", "message": "made"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if self.path.startswith("/close"):
            self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(out)
        except (BrokenPipeError, ConnectionResetError):  # /slow: the client gave up
            self.close_connection = True
        if self.path.startswith("/hangup"):
            self.close_connection = True

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args):
        pass


def serve() -> ThreadingHTTPServer:
    """A Recorder on a free port of 127.0.0.1, serving on a thread; the caller shuts it down."""
    Recorder.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    return srv


def api_for(port: int, token: str = "first") -> Api:
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return Api(cfg)
