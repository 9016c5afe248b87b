"""The pod requests both front-ends make: the pods/binding write, a fresh read, a merge patch
of pods/status."""

from __future__ import annotations

from .api import Api, ApiError


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


async def post_binding(api: Api, body: dict) -> tuple[int | None, str]:
    """Write one pods/binding: (HTTP status, message); status None: the API server was not
    reached, the write may have happened."""
    meta = body["metadata"]
    try:
        reply = await api.call("POST", _pod_path(meta["namespace"], meta["name"]) + "/binding",
                               body=body)
    except ApiError as e:
        return None, str(e)
    return reply.status, reply.message()


async def read_pod(api: Api, namespace: str, name: str) -> tuple[int, dict | None]:
    """A fresh GET: (HTTP status, the pod or None); (0, None) if the API server was not reached."""
    try:
        reply = await api.call("GET", _pod_path(namespace, name))
    except ApiError:
        return 0, None
    return reply.status, reply.body if reply.ok else None


async def patch_pod_status(api: Api, namespace: str, name: str,
                           patch: dict) -> tuple[int | None, str]:
    """A JSON merge patch of a pod's status subresource: (HTTP status, message); status None:
    the API server was not reached. The API server takes the metadata of a status write (its
    annotations too) and keeps the spec, so this needs pods/status patch, not the pods patch
    that could rewrite any pod (kube-scheduler's own role holds it)."""
    try:
        reply = await api.call("PATCH", _pod_path(namespace, name) + "/status", body=patch,
                               content_type="application/merge-patch+json")
    except ApiError as e:
        return None, str(e)
    return reply.status, reply.message()
