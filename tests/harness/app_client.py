"""Calls to the extender app (webhook/extender/app.py) in this process, the way Flask's test
client calls a Flask app: for the extender's handler tests, which start no server (the real
one is exercised by tests/extender/test_server.py and the kube-scheduler tests).

One event loop per client, kept for its life: the app's API client keeps its connections on
the loop that opened them. `gather` sends several requests at once, as kube-scheduler's binds come.
"""

from __future__ import annotations

import asyncio
import inspect
import json as jsonlib
from dataclasses import dataclass


@dataclass
class Response:
    status_code: int
    headers: dict[str, str]
    data: bytes

    def get_json(self):
        return jsonlib.loads(self.data)


class AppClient:
    def __init__(self, app):
        self.app = app
        self.loop = asyncio.new_event_loop()

    def get(self, path: str) -> Response:
        return self.loop.run_until_complete(self._call("GET", path, b""))

    def post(self, path: str, json=None, data: bytes | str | None = None) -> Response:
        return self.loop.run_until_complete(self._call("POST", path, _body(json, data)))

    def gather(self, requests: list[tuple[str, dict]]) -> list[Response]:
        """POST each (path, json) at once; the answers in the same order."""
        async def all_at_once():
            return await asyncio.gather(*(self._call("POST", p, _body(j, None)) for p, j in requests))
        return self.loop.run_until_complete(all_at_once())

    def close(self) -> None:
        self.loop.close()

    async def _call(self, method: str, path: str, body: bytes) -> Response:
        answer = self.app.respond(method, path, body)
        if inspect.isawaitable(answer):
            answer = await answer
        status, headers, data = answer
        return Response(status, dict(headers), data)


def _body(json, data) -> bytes:
    if json is not None:
        return jsonlib.dumps(json).encode()
    return data.encode() if isinstance(data, str) else (data or b"")
