"""AdmissionReview in and out (admission.k8s.io v1 and v1beta1), with no HTTP in it."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JsonObject

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# The API server may send two 3 MiB objects in one UPDATE review.
MAX_BODY = 7 * 1024 * 1024


class BadReview(ValueError):
    """A body that is not an AdmissionReview we can answer; `status` is the HTTP code."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Review:
    api_version: str
    uid: str
    operation: str
    is_pod: bool
    obj: JsonObject | None
    old_obj: JsonObject | None
    username: str
    # A pods/binding (or legacy `bindings`) CREATE: obj is a Binding, whose annotations the
    # API server merges into the pod it binds.
    is_binding: bool = False
    sub_resource: str = ""  # "status", "binding", ...; "" for the pod itself
    groups: tuple[Any, ...] = ()  # userInfo.groups, as sent (only looked up in)
    # pods/ephemeralcontainers on Kubernetes 1.16-1.21: obj is an EphemeralContainers object
    # (the pod's metadata and ephemeral containers); on 1.22+ it is the Pod.
    is_ephemeral: bool = False


def decode(body: bytes) -> Review:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadReview(f"body is not JSON: {e}") from None
    except RecursionError:
        raise BadReview("body is nested too deeply to be an AdmissionReview") from None
    if not isinstance(data, dict):
        raise BadReview("body is not a JSON object")
    if data.get("kind") != "AdmissionReview":
        raise BadReview(f"kind is {data.get('kind')!r}, expected 'AdmissionReview'")
    version = data.get("apiVersion")
    if version not in VERSIONS:
        raise BadReview(f"apiVersion {version!r} is not one of {', '.join(VERSIONS)}")
    req = data.get("request")
    if not isinstance(req, dict):
        raise BadReview("request is missing or not an object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing or empty")
    op = req.get("operation")
    if op not in OPERATIONS:
        raise BadReview(f"request.operation {op!r} is not one of {', '.join(OPERATIONS)}")
    obj, old = req.get("object"), req.get("oldObject")
    if op in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise BadReview(f"request.object is missing on {op}")
    if op == "UPDATE" and not isinstance(old, dict):
        raise BadReview("request.oldObject is missing on UPDATE")
    user = req.get("userInfo")
    username = user.get("username") if isinstance(user, dict) else None
    groups = user.get("groups") if isinstance(user, dict) else None
    sub = req.get("subResource")
    kind = _core_kind(req, obj)
    return Review(version, uid, op, kind == "Pod", obj if isinstance(obj, dict) else None,
                  old if isinstance(old, dict) else None,
                  username if isinstance(username, str) else "",
                  is_binding=kind == "Binding", sub_resource=sub if isinstance(sub, str) else "",
                  groups=tuple(groups) if isinstance(groups, list) else (),
                  is_ephemeral=kind == "EphemeralContainers")


def _core_kind(req: JsonObject, obj: Any) -> str:
    """The kind of a core-group (v1) object under review, else ""."""
    kind = req.get("kind")
    if isinstance(kind, dict):
        name = kind.get("kind")
        return name if isinstance(name, str) and kind.get("group", "") == "" else ""
    name = obj.get("kind") if isinstance(obj, dict) else None
    return name if isinstance(name, str) else ""


def allow(review: Review, patch: list[JsonObject] | None = None) -> JsonObject:
    response: dict[str, Any] = {"uid": review.uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return _envelope(review.api_version, response)


def deny(api_version: str, uid: str, message: str, code: int = 403) -> JsonObject:
    reason = "Forbidden" if code == 403 else "InternalError"
    return _envelope(api_version, {
        "uid": uid, "allowed": False,
        "status": {"code": code, "reason": reason, "message": message},
    })


def _envelope(api_version: str, response: JsonObject) -> JsonObject:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
