"""The informer (kube/informer.py), run both ways it is run: started on the process's I/O loop
(the allocator's watches) and awaited on a loop of the caller's (the extender's), against a
scripted API server on 127.0.0.1: what it hands on, where it resumes, when it relists, and that
a silent watch is abandoned. The real API server serves both in tests/allocator and
tests/extender."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.harness.wait import wait_for
from tests.kube.recorder import api_for
from webhook.kube.api import Api
from webhook.kube.informer import CONSISTENT, Informer, read_event, watch_cluster


def event(kind: str, rv: str, name: str = "n1") -> bytes:
    return json.dumps({"type": kind, "object": {"metadata": {"name": name, "resourceVersion": rv}}}).encode()


GONE_EVENT = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410}}).encode()


@contextmanager
def script_server(watches: list[list]):
    """A server whose list answers resourceVersion 5 and whose n-th watch plays `watches[n]`:
    ("line", bytes) a line of the stream, ("status", code) an answer other than 200, ("silent",)
    hold it open without a word; a played-out script ends the answer. Watches after the last
    script hold silently. Records the query of each request in `server.requests`."""
    release = threading.Event()
    requests: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            q = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
            requests.append(q)
            if q.get("watch") != "true":
                self._send(200, json.dumps({"metadata": {"resourceVersion": "5"}, "items": []}).encode())
                return
            n = sum(1 for r in requests if r.get("watch") == "true") - 1
            steps = watches[n] if n < len(watches) else [("silent",)]
            if steps and steps[0][0] == "status":
                self._send(steps[0][1], json.dumps({"kind": "Status", "message": "scripted"}).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for step in steps:
                if step[0] == "silent":
                    release.wait(30)
                    return
                line = step[1] + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def _send(self, status: int, body: bytes):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.requests = requests
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def on_the_io_loop(api: Api, out: queue.Queue, read_timeout: float, emit=None):
    informer = Informer(api, "node", "/api/v1/nodes", None, lambda e, o: (emit or out.put)((e, o)))
    informer.read_timeout = read_timeout
    informer.start()
    return informer.stop


def on_loop(api: Api, out: queue.Queue, read_timeout: float, emit=None):
    loop = asyncio.new_event_loop()
    informer = Informer(api, "node", "/api/v1/nodes", None, lambda e, o: (emit or out.put)((e, o)))
    informer.read_timeout = read_timeout
    task = loop.create_task(informer.run())

    def run():
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:  # stopped
            pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def stop():
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)
        loop.close()
    return stop


INFORMERS = {"on the I/O loop": on_the_io_loop, "on a loop": on_loop}


@pytest.fixture(params=INFORMERS)
def informer_kind(request):
    return INFORMERS[request.param]


def watch_versions(server) -> list[str]:
    return [r["resourceVersion"] for r in server.requests if r.get("watch") == "true"]


def lists(server) -> int:
    return sum(1 for r in server.requests if r.get("watch") != "true")


CASES = {
    # name: (watch scripts, events handed on after the first RESET, lists, version of watch 2)
    "events are handed on, a bookmark only moves the version, the next watch resumes after it": (
        [[("line", event("ADDED", "6")), ("line", event("MODIFIED", "7")),
          ("line", event("BOOKMARK", "8")), ("line", event("DELETED", "9")),
          ("line", event("BOOKMARK", "11"))]],
        ["ADDED", "MODIFIED", "DELETED"], 1, "11"),
    "an ERROR 410 in the stream relists": ([[("line", event("ADDED", "6")), ("line", GONE_EVENT)]],
                                           ["ADDED", "RESET"], 2, "5"),
    "an answer 410 relists": ([[("status", 410)]], ["RESET"], 2, "5"),
    "an answer 500 resumes from the same version": ([[("status", 500)]], [], 1, "5"),
    "a line that is not an event resumes from where that watch began": (
        [[("line", event("ADDED", "6")), ("line", b"{not json")]], ["ADDED"], 1, "5"),
    "a silent watch is abandoned and resumed": ([[("silent",)]], [], 1, "5"),
}


@pytest.mark.parametrize("case", CASES)
def test_an_informer_follows_the_watch(informer_kind, case):
    scripts, events, lists_made, second = CASES[case]
    out: queue.Queue = queue.Queue()
    with script_server(scripts) as server:
        started = time.monotonic()
        stop = informer_kind(api_for(server.server_port), out, 1.0)
        try:
            assert out.get(timeout=10)[0] == "RESET"
            assert [out.get(timeout=10)[0] for _ in events] == events
            wait_for(lambda: len(watch_versions(server)) >= 2, 10, 0.02, "the second watch")
            assert watch_versions(server)[:2] == ["5", second]
            assert lists(server) == lists_made
            assert out.empty()
            assert time.monotonic() - started < 8  # the silent one: read timeout 1 s, not 270
        finally:
            stop()


@pytest.mark.parametrize("scripts", [[[("line", GONE_EVENT)]], [[("status", 410)]]],
                         ids=["an ERROR 410 in the stream", "an answer 410"])
def test_the_first_list_is_the_watch_caches_a_relist_after_gone_reads_etcd(informer_kind, scripts):
    """resourceVersion 0 (any: the API server's cache) for the first list, as client-go's
    reflector asks; none (the latest, from etcd) once a watch's version was too old."""
    out: queue.Queue = queue.Queue()
    with script_server(scripts) as server:
        stop = informer_kind(api_for(server.server_port), out, 5.0)
        try:
            assert [out.get(timeout=10)[0] for _ in range(2)] == ["RESET", "RESET"]
            wait_for(lambda: len(watch_versions(server)) >= 2, 10, 0.02, "the second watch")
            assert [r.get("resourceVersion") for r in server.requests if r.get("watch") != "true"] \
                == ["0", None]
        finally:
            stop()


def test_the_allocators_first_lists_are_consistent():
    """A new leader decides from its first lists at once: each reads the latest (no
    resourceVersion), never the watch cache's, which may lack its predecessor's last bindings
    (issue 46, finding 10)."""
    out: queue.Queue = queue.Queue()
    with script_server([]) as server:
        informers = watch_cluster(api_for(server.server_port), out.put, 1, "status.phase!=Failed",
                                  storage=True)
        try:
            assert sorted(out.get(timeout=10)[1] for _ in informers) == \
                sorted(["node", "pod", "namespace", "pvc", "pv", "storageclass", "csinode"])
            firsts = [r for r in server.requests if r.get("watch") != "true"]
            assert len(firsts) == len(informers) == 7 and all("resourceVersion" not in r for r in firsts), firsts
        finally:
            for i in informers:
                i.stop()


def test_an_informer_asked_for_consistent_lists_never_lists_the_watch_cache():
    out: queue.Queue = queue.Queue()
    with script_server([[("status", 410)]]) as server:
        informer = Informer(api_for(server.server_port), "node", "/api/v1/nodes", None,
                            lambda e, o: out.put((e, o)), CONSISTENT)
        informer.start()
        try:
            assert [out.get(timeout=10)[0] for _ in range(2)] == ["RESET", "RESET"]
            assert [r.get("resourceVersion") for r in server.requests if r.get("watch") != "true"] \
                == [None, None]
        finally:
            informer.stop()


@pytest.mark.parametrize("fails", ["RESET", "ADDED"], ids=["the list", "a watch event"])
def test_an_event_the_receiver_cannot_take_is_lost_alone(informer_kind, fails):
    """A receiver that raises loses that one event (logged, naming it): the informer goes on
    with the next ones on the same watch. Before (issue 46, finding 2), a list that raised
    ended the informer for good, and a watch event that raised ended the watch and came again
    on the next one, and again: one object stopped every later event of its kind."""
    out: queue.Queue = queue.Queue()
    failed = []

    def emit(item):
        if item[0] == fails and not failed:
            failed.append(item)
            raise KeyError("a bug in the cache")
        out.put(item)

    script = [("line", event("ADDED", "6")), ("line", event("ADDED", "7", name="n2"))]
    with script_server([script + [("silent",)]]) as server:
        stop = informer_kind(api_for(server.server_port), out, 5.0, emit)
        try:
            got = [out.get(timeout=10) for _ in range(2)]
            names = [o["metadata"]["name"] if kind == "ADDED" else kind for kind, o in got]
            assert names == (["n1", "n2"] if fails == "RESET" else ["RESET", "n2"])
            assert failed and watch_versions(server) == ["5"]  # one watch, never broken
        finally:
            stop()


@pytest.mark.parametrize("line, expected", [
    (event("ADDED", "6"), ("ADDED", {"metadata": {"name": "n1", "resourceVersion": "6"}})),
    (GONE_EVENT, ("GONE", {})),
    (b'{"type": "ERROR", "object": {"code": 500, "message": "etcd"}}', "watch node: etcd"),
    (b"[1]", "not an event"),
    (b'{"type": "ADDED", "object": [1]}', "not an event"),
    (b'{"object": {}}', "not an event"),
    (b"{half", ValueError),  # not JSON: the caller resumes the watch
])
def test_a_watch_line_is_read_as_an_event_or_refused(line, expected):
    if isinstance(expected, tuple):
        assert read_event(line, "node") == expected
    elif isinstance(expected, type):
        with pytest.raises(expected):
            read_event(line, "node")
    else:
        with pytest.raises(Exception, match=expected):
            read_event(line, "node")
