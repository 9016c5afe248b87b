"""A fake of the few API server calls the allocator and the extender make (webhook.kube.api.Api,
awaited as it is), for unit tests that must start no process: pods/binding (answering
`status`, or raising as an unreachable server does), GET of a pod from `pods`, PATCH
(answering `patch_status`), and 200 for anything else (reports)."""

from __future__ import annotations

import asyncio
import threading
from typing import NamedTuple

from webhook.kube.api import ApiError, Reply


class Call(NamedTuple):
    """One call the fake API was made, as it recorded it."""

    method: str
    path: str
    body: dict | None


class FakeApi:
    def __init__(self):
        self.status = 201
        self.patch_status = 200  # the answer to a PATCH
        self.raise_error = False
        self.read_error = False  # GETs fail as if the server were unreachable
        self.delay = 0.0
        self.calls: list[Call] = []
        self.pods: dict[tuple[str, str], dict] = {}
        self.lock = threading.Lock()

    async def call(self, method, path, query=None, body=None, **kw):
        self._record(method, path, body)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._answer(method, path, body)

    def _record(self, method, path, body) -> None:
        with self.lock:
            self.calls.append(Call(method, path, body))

    def _answer(self, method, path, body) -> Reply:
        parts = path.split("/")
        is_pod = len(parts) >= 7 and parts[3] == "namespaces" and parts[5] == "pods"
        if method == "GET" and is_pod:
            if self.read_error:
                raise ApiError("GET: timed out")
            p = self.pods.get((parts[4], parts[6]))
            return Reply(200, p) if p else Reply(404, {"message": "not found"})
        if method == "PATCH":
            ok = self.patch_status < 300
            return Reply(self.patch_status, {} if ok else {"message": f"HTTP {self.patch_status}"})
        if not (method == "POST" and path.endswith("/binding")):
            return Reply(200, {})
        if self.raise_error:
            raise ApiError("POST: timed out")
        if self.status == 201:
            p = self.pods.get((parts[4], parts[6]))
            if p is not None:
                p.setdefault("spec", {})["nodeName"] = body["target"]["name"]
                p["metadata"].setdefault("annotations", {}).update(
                    body["metadata"].get("annotations") or {})
            return Reply(201, {"kind": "Status", "status": "Success"})
        return Reply(self.status, {"message": f"HTTP {self.status}"})

    def bindings(self):
        return [c for c in self.calls if c.method == "POST" and c.path.endswith("/binding")]

    def patches(self):
        return [c for c in self.calls if c.method == "PATCH"]

    async def watch(self, *a, **kw):
        raise ApiError("the fake API has no watches")


def AsyncFakeApi(fake: FakeApi) -> FakeApi:
    """The fake itself (its calls are awaited, as the one API client's are)."""
    return fake
