"""List then watch one kind of object on an event loop, handing each event to `emit` as it is
read: the one watch loop (the allocator's, on its I/O loop; the extender's, on the loop that
also answers kube-scheduler).

The lines come through the loop's own transport (api.py, `Api.watch`) and each event is
handed on in the same go: no thread, no hand-off (on a thread, each watch event woke that
thread, which then took the interpreter's lock from a loop busy with the next filter). Resumes
from the last resourceVersion seen (bookmarks included) and relists on 410 Gone. Each relist
is delivered as one ("RESET", items) event so the receiver can rebuild at once.

The extender's first list asks for resourceVersion 0, as client-go's reflector does: the API
server answers from its watch cache instead of reading every pod of the cluster from etcd and
filtering them (in a bench backlog of 2,000 pods, the extender's two pod lists cost the API
server and etcd that much CPU on the way to the first bind). The watch from the list's version
then brings every later change. The allocator's sessions list the latest (`CONSISTENT`): a
new leader decides at once from its first list, and the watch cache may not yet hold the
bindings its predecessor wrote a moment before, which it would hand out again; the latest is
read from etcd up to 1.30, and from the watch cache once it has caught up on 1.31 and newer
(ConsistentListFromCache). A relist after 410 Gone reads the latest too: the cache may be as
old as the version that was too old.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Callable

from ..base import fast_json
from .api import Api, ApiError, Reply
from .io_loop import IoLoop, io_loop

log = logging.getLogger(__name__)

WATCH_SECONDS = 240  # the server ends each watch after this; we then resume
GONE = "GONE"  # the watch's resourceVersion is too old: list again


ANY_VERSION = "0"  # a list's resourceVersion: the watch cache's, whatever its age
CONSISTENT = None  # a list's resourceVersion: none, the latest (a quorum read)


def query(field_selector: str | None, watch_from: str | None = None,
          list_from: str | None = None) -> dict:
    """The query of a list (at resourceVersion `list_from`; None: the latest, from etcd), or
    of a watch from resourceVersion `watch_from`."""
    if watch_from is not None:
        q = {"watch": "true", "resourceVersion": watch_from, "allowWatchBookmarks": "true",
             "timeoutSeconds": str(WATCH_SECONDS)}
    else:
        q = {} if list_from is None else {"resourceVersion": list_from}
    if field_selector:
        q["fieldSelector"] = field_selector
    return q


def read_event(line: bytes | str, what: str) -> tuple[str, dict]:
    """One line of a watch as (type, object); (GONE, {}) when the server says the
    resourceVersion is too old. Another error of the server is an ApiError, a line that is not
    an event a ValueError (the caller resumes the watch)."""
    ev = fast_json.loads(line)
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
                 emit: Callable[[str, object], None], first_list: str | None = ANY_VERSION):
        """`emit(event, object)` is called on the loop, as each event is read. `first_list`:
        the resourceVersion of the first list (ANY_VERSION or CONSISTENT)."""
        self.api, self.kind, self.path = api, kind, path
        self.field_selector, self.emit, self.first_list = field_selector, emit, first_list
        self._running: concurrent.futures.Future | None = None

    def start(self, io: IoLoop | None = None) -> "Informer":
        """For a threaded program: `run` on the I/O loop (`io`, else the process's) until
        `stop`."""
        self._running = (io or io_loop()).submit(self.run())
        return self

    def stop(self) -> None:
        """End what `start` began (events already read may still be handed on)."""
        if self._running is not None:
            self._running.cancel()

    async def run(self) -> None:
        """Until cancelled."""
        rv = None
        list_from = self.first_list
        delay = 0.5
        while True:
            try:
                if rv is None:
                    rv = await self._list(list_from)
                rv = await self._watch(rv)
                if rv is None:  # too old: the next list reads the latest
                    list_from = CONSISTENT
                delay = 0.5
            except ApiError as e:
                log.warning("watch %s: %s; retrying in %.1fs", self.kind, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 8)

    async def _list(self, list_from: str | None) -> str:
        items, rv = listed(await self.api.call("GET", self.path, query(self.field_selector,
                                                                       list_from=list_from),
                                               timeout=30), self.kind)
        self._hand_on("RESET", items)
        return rv

    def _hand_on(self, event: str, obj) -> None:
        """`emit` one event. A receiver that raises loses that event alone: logged, naming the
        object, and the list or the watch goes on (the front-ends catch per object before
        this; a list that raised here once killed its informer, a watch event broke the watch)."""
        try:
            self.emit(event, obj)
        except Exception as e:
            log.warning("watch %s: %s of %s not applied: %s: %s", self.kind, event, _named(obj),
                        type(e).__name__, e)

    async def _watch(self, rv: str) -> str | None:
        """The resourceVersion to resume from, or None to relist."""
        gone = False

        def on_line(line: bytes) -> bool:
            nonlocal rv, gone
            kind, obj = read_event(line, self.kind)
            if kind == GONE:
                gone = True
                return False
            rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
            if kind != "BOOKMARK":
                self._hand_on(kind, obj)
            return True

        try:
            reply = await self.api.watch(self.path, query(self.field_selector, rv),
                                         self.read_timeout, on_line)
        except ApiError:
            raise
        except Exception as e:  # a line that is not an event: resume after the last one
            raise ApiError(f"watch {self.kind} broke: {type(e).__name__}") from None
        if gone or reply.status == 410:
            return None
        if reply.status != 200:
            raise ApiError(f"watch {self.kind}: {reply.message()}")
        return rv


def _named(obj: object) -> str:
    """`namespace/name (uid ...)` of a watched object, or what the list holds."""
    if isinstance(obj, list):
        return f"a list of {len(obj)}"
    try:
        meta = obj.get("metadata") or {} if isinstance(obj, dict) else {}
        return f"{meta.get('namespace')}/{meta.get('name')} (uid {meta.get('uid')})"
    except Exception:  # an object whose metadata raises names nothing
        return "an unnamed object"


# (kind, path, fieldSelector) of the watch of namespaces (affinity terms' namespaceSelector)
NAMESPACE_WATCH = ("namespace", "/api/v1/namespaces", None)
# (kind, path) of the watches of the volumes a pod's claims name, and of the CSINodes that
# bound how many a node attaches
STORAGE_WATCHES = [("pvc", "/api/v1/persistentvolumeclaims"), ("pv", "/api/v1/persistentvolumes"),
                   ("storageclass", "/apis/storage.k8s.io/v1/storageclasses"),
                   ("csinode", "/apis/storage.k8s.io/v1/csinodes")]


def cluster_watches(pods: str, storage: bool = False) -> list[tuple[str, str, str | None]]:
    """(kind, path, fieldSelector) of the watches a pod cache is fed from: every node, the pods
    the field selector `pods` selects, every namespace (the labels affinity terms'
    namespaceSelector reads), and with `storage` every claim, volume, class and CSINode."""
    return [("node", "/api/v1/nodes", None), ("pod", "/api/v1/pods", pods), NAMESPACE_WATCH] + \
        [(kind, path, None) for kind, path in STORAGE_WATCHES if storage]


def watch_cluster(api: Api, emit: Callable[[tuple], None], session: int, pods: str,
                  storage: bool = False, io: IoLoop | None = None) -> list[Informer]:
    """The watches of `cluster_watches(pods, storage)` on the I/O loop (`io`, else the
    process's), each event handed on as `emit((session, kind, event, object))`: the allocator's
    session, whose first lists are consistent (the module's docstring says why)."""
    def emitter(kind: str) -> Callable[[str, object], None]:
        return lambda event, obj: emit((session, kind, event, obj))
    return [Informer(api, kind, path, selector, emitter(kind), CONSISTENT).start(io)
            for kind, path, selector in cluster_watches(pods, storage)]
