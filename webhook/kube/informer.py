"""List then watch one kind of object, handing each event to `emit` (the allocator's decision
loop's queue; the extender's cache applies it at once).

Resumes from the last resourceVersion seen (bookmarks included) and relists on 410 Gone.
Each relist is delivered as one ("RESET", items) event so the loop can rebuild at once.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Callable

from kubernetes.watch.watch import iter_resp_lines

from ..scheduling.pod_status import LIVE_PODS
from .api import Api, ApiError, Reply

log = logging.getLogger(__name__)

WATCH_SECONDS = 240  # the server ends each watch after this; we then resume
GONE = "GONE"  # the watch's resourceVersion is too old: list again


def query(field_selector: str | None, watch_from: str | None = None) -> dict:
    """The query of a list, or of a watch from resourceVersion `watch_from`."""
    q = {} if watch_from is None else {"watch": "true", "resourceVersion": watch_from,
                                       "allowWatchBookmarks": "true",
                                       "timeoutSeconds": str(WATCH_SECONDS)}
    if field_selector:
        q["fieldSelector"] = field_selector
    return q


def read_event(line: bytes | str, what: str) -> tuple[str, dict]:
    """One line of a watch as (type, object); (GONE, {}) when the server says the
    resourceVersion is too old. Another error of the server is an ApiError, a line that is not
    an event a ValueError (the caller resumes the watch)."""
    ev = json.loads(line)
    if not isinstance(ev, dict):
        raise ValueError(f"watch {what}: not an event")
    kind, obj = ev.get("type"), ev.get("object") or {}
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise ValueError(f"watch {what}: not an event")
    if kind == "ERROR":
        if obj.get("code") == 410:
            return GONE, {}
        raise ApiError(f"watch {what}: {obj.get('message')}")
    return kind, obj


def listed(reply: Reply, what: str) -> tuple[list, str]:
    """A list's answer as (items, the resourceVersion to watch from); ApiError if refused."""
    if not reply.ok or reply.body is None:
        raise ApiError(f"list {what}: {reply.message()}")
    return reply.body.get("items") or [], reply.body["metadata"]["resourceVersion"]


class Informer:
    read_timeout = WATCH_SECONDS + 30  # longer than any quiet watch the server keeps open

    def __init__(self, api: Api, kind: str, path: str, field_selector: str | None,
                 emit: Callable[[tuple], None], session: int):
        """`emit((session, kind, event, object))` is called on the watch's thread."""
        self.api, self.kind, self.path = api, kind, path
        self.field_selector = field_selector
        self.emit, self.session = emit, session
        self.stopped = threading.Event()
        self._resp = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    def start(self) -> "Informer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        resp = self._resp
        if resp is not None:
            try:  # shutdown() unblocks the reading thread; close() would wait for it
                resp.shutdown()
            except Exception:
                pass

    def _emit(self, event: str, obj) -> None:
        self.emit((self.session, self.kind, event, obj))

    def _list(self) -> str:
        items, rv = listed(self.api.call("GET", self.path, query(self.field_selector), timeout=30),
                           self.kind)
        self._emit("RESET", items)
        return rv

    def _run(self) -> None:
        rv = None
        delay = 0.5
        while not self.stopped.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv = self._watch(rv)
                delay = 0.5
            except ApiError as e:
                log.warning("watch %s: %s; retrying in %.1fs", self.kind, e, delay)
                self.stopped.wait(delay)
                delay = min(delay * 2, 8)

    def _watch(self, rv: str) -> str | None:
        """Returns the resourceVersion to resume from, or None to relist."""
        resp = self.api.stream(self.path, query(self.field_selector, rv),
                               read_timeout=self.read_timeout)
        self._resp = resp
        try:
            if resp.status != 200:
                # read whole: a body left unread would be taken for the next answer on the
                # connection, which goes back to the pool
                reply = Reply.of(resp.status, resp.data)
                if resp.status == 410:
                    return None
                raise ApiError(f"watch {self.kind}: {reply.message()}")
            for line in iter_resp_lines(resp):
                if self.stopped.is_set():
                    return rv
                if not line:
                    continue
                kind, obj = read_event(line, self.kind)
                if kind == GONE:
                    return None  # too old: relist
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if kind != "BOOKMARK":
                    self._emit(kind, obj)
            return rv
        except Exception as e:  # a broken stream in any of its forms: resume
            if self.stopped.is_set():
                return rv
            if isinstance(e, ApiError):
                raise
            raise ApiError(f"watch {self.kind} broke: {type(e).__name__}") from None
        finally:
            self._resp = None
            try:
                resp.release_conn()
            except Exception:
                pass


def cluster_watches(pods: str = LIVE_PODS) -> list[tuple[str, str, str | None]]:
    """(kind, path, fieldSelector) of the two watches a pod cache is fed from: every node, and
    the pods `pods` selects (the pods still running, or the extender's: those of them on a
    node)."""
    return [("node", "/api/v1/nodes", None), ("pod", "/api/v1/pods", pods)]


def watch_cluster(api: Api, emit: Callable[[tuple], None], session: int,
                  pods: str = LIVE_PODS) -> list[Informer]:
    """The watches of `cluster_watches(pods)`, each on a thread of its own."""
    return [Informer(api, kind, path, selector, emit, session).start()
            for kind, path, selector in cluster_watches(pods)]
