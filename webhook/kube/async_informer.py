"""List then watch one kind of object on an event loop: the informer (informer.py) of the
extender, whose loop also answers kube-scheduler.

On a thread, each watch event woke that thread, which then took the interpreter's lock from
the loop busy with the next filter: some nine futex calls per pod in a bench run, and the
urllib3 layers to read each line. Here the lines come through the loop's own transport
(kube/async_api.py, `AsyncApi.watch`) and each event is applied in the same go, between two
answers: no thread, no hand-off. The rules are the informer's: resume from the last
resourceVersion seen (bookmarks included), relist on 410 Gone, each relist one RESET event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from .api import ApiError
from .async_api import AsyncApi
from .informer import GONE, Informer, listed, query, read_event

log = logging.getLogger(__name__)


class AsyncInformer:
    read_timeout = Informer.read_timeout

    def __init__(self, api: AsyncApi, kind: str, path: str, field_selector: str | None,
                 emit: Callable[[str, object], None]):
        """`emit(event, object)` is called on the loop, as each event is read."""
        self.api, self.kind, self.path = api, kind, path
        self.field_selector, self.emit = field_selector, emit

    async def run(self) -> None:
        """Until cancelled."""
        rv = None
        delay = 0.5
        while True:
            try:
                if rv is None:
                    rv = await self._list()
                rv = await self._watch(rv)
                delay = 0.5
            except ApiError as e:
                log.warning("watch %s: %s; retrying in %.1fs", self.kind, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 8)

    async def _list(self) -> str:
        items, rv = listed(await self.api.call("GET", self.path, query(self.field_selector),
                                               timeout=30), self.kind)
        self.emit("RESET", items)
        return rv

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
                self.emit(kind, obj)
            return True

        try:
            reply = await self.api.watch(self.path, query(self.field_selector, rv),
                                         self.read_timeout, on_line)
        except ApiError:
            raise
        except Exception as e:  # an event the cache could not take: resume after the last one
            raise ApiError(f"watch {self.kind} broke: {type(e).__name__}") from None
        if gone or reply.status == 410:
            return None
        if reply.status != 200:
            raise ApiError(f"watch {self.kind}: {reply.message()}")
        return rv
