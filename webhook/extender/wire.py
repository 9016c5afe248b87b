"""kube-scheduler's extender messages (k8s.io/kube-scheduler/extender/v1) as JSON.

The Go structs of that package carry no json tags, so kube-scheduler 1.20 sends and expects
the Go field names as they are (`Pod`, `NodeNames`, `FailedNodes`, `PodUID`, `Host`, ...),
while the objects inside (`Pod`, `Nodes`) use the usual lower-camel API field names. Go's
decoder matches keys case-insensitively, so we read either spelling and answer with the
Go names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JsonObject, all_text

# Kubernetes' own rules for the names a body gives (they go into API paths): a namespace is a
# DNS-1123 label, a pod or node name a DNS-1123 subdomain.
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
NAMESPACE = re.compile(_LABEL)
SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")


class WireError(ValueError):
    """The body is not an extender message."""


def _field(body: JsonObject, name: str) -> Any:
    if name in body:
        return body[name]
    low = name.lower()
    for k, v in body.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def _names_error(namespace: object, name: object, node: str | None = None) -> str | None:
    """Why these are not a namespace, a pod name (and a node name), or None."""
    if not (isinstance(namespace, str) and len(namespace) <= 63 and NAMESPACE.fullmatch(namespace)):
        return f"the namespace {namespace!r} is not a namespace's name"
    if not (isinstance(name, str) and len(name) <= 253 and SUBDOMAIN.fullmatch(name)):
        return f"the pod name {name!r} is not a pod's name"
    if node is not None and not (len(node) <= 253 and SUBDOMAIN.fullmatch(node)):
        return f"the node name {node!r} is not a node's name"
    return None


def pod_name(pod: JsonObject) -> tuple[str, str, str] | str:
    """(namespace, name, uid) of a body's pod: all a verb takes from it; or why they are not."""
    meta = pod["metadata"]
    namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    error = _names_error(namespace, name)
    if error is not None:
        return error
    if not isinstance(uid, str) or not uid:
        return "the pod has no uid"
    return namespace, name, uid


@dataclass(frozen=True)
class ExtenderArgs:
    pod: JsonObject
    node_names: list[str]
    nodes: list[JsonObject] | None  # only when the extender is not node-cache capable


def extender_args(body: Any) -> ExtenderArgs:
    if not isinstance(body, dict):
        raise WireError("the body is not a JSON object")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise WireError("Pod is missing")
    names = _field(body, "NodeNames")
    node_list = _field(body, "Nodes")
    nodes = None
    if isinstance(node_list, dict) and isinstance(node_list.get("items"), list):
        nodes = [n for n in node_list["items"] if isinstance(n, dict)]
    if names is None and nodes is not None:
        names = [(n.get("metadata") or {}).get("name", "") for n in nodes]
    if not isinstance(names, list) or not all_text(names):
        raise WireError("NodeNames is missing or not a list of names")
    return ExtenderArgs(pod, names, nodes)


@dataclass(frozen=True)
class BindingArgs:
    name: str
    namespace: str
    uid: str
    node: str


def binding_args(body: Any) -> BindingArgs:
    if not isinstance(body, dict):
        raise WireError("the body is not a JSON object")
    values = [_field(body, k) for k in ("PodName", "PodNamespace", "PodUID", "Node")]
    if not all(isinstance(v, str) and v for v in values):
        raise WireError("PodName, PodNamespace, PodUID and Node are all required")
    error = _names_error(values[1], values[0], values[3])
    if error is not None:
        raise WireError(error)
    return BindingArgs(*values)


@dataclass(frozen=True)
class PreemptionArgs:
    pod: JsonObject
    victims: dict[str, tuple[list[str], int]]  # node -> (victim uids, PDB violations)


def preemption_args(body: Any) -> PreemptionArgs:
    """`ExtenderPreemptionArgs`: `NodeNameToMetaVictims` (uids, sent to a node-cache capable
    extender) or `NodeNameToVictims` (whole pods)."""
    if not isinstance(body, dict):
        raise WireError("the body is not a JSON object")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise WireError("Pod is missing")
    meta, full = _field(body, "NodeNameToMetaVictims"), _field(body, "NodeNameToVictims")
    given = meta if meta is not None else full
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise WireError("NodeNameToMetaVictims is not a map of node names")
    victims: dict[str, tuple[list[str], int]] = {}
    for node, v in given.items():
        if not isinstance(v, dict):
            raise WireError(f"the victims of node {node} are not an object")
        pods = _field(v, "Pods") or []
        if not isinstance(pods, list) or not all(isinstance(p, dict) for p in pods):
            raise WireError(f"the victims of node {node}: Pods is not a list of objects")
        uids: list[Any] = [_field(p, "UID") if meta is not None
                           else (p.get("metadata") or {}).get("uid")
                           for p in pods]
        if not all(isinstance(u, str) and u for u in uids):
            raise WireError(f"the victims of node {node}: a pod without a UID")
        pdb = _field(v, "NumPDBViolations") or 0
        victims[node] = (uids, pdb if isinstance(pdb, int) else 0)
    return PreemptionArgs(pod, victims)


def preemption_result(victims: dict[str, tuple[list[str], int]]) -> JsonObject:
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}
        for node, (uids, pdb) in victims.items()}}


def filter_result(args: ExtenderArgs, fits: list[str], failed: dict[str, str],
                  error: str = "") -> JsonObject:
    out: JsonObject = {"NodeNames": fits, "FailedNodes": failed, "Error": error}
    if args.nodes is not None:  # answer in the form we were asked in
        keep = set(fits)
        out["Nodes"] = {"items": [n for n in args.nodes
                                  if (n.get("metadata") or {}).get("name") in keep]}
        out["NodeNames"] = None
    return out


def filter_error(message: str) -> JsonObject:
    return {"NodeNames": None, "FailedNodes": {}, "Error": message}


def priority_list(scores: list[tuple[str, int]]) -> list[JsonObject]:
    return [{"Host": host, "Score": score} for host, score in scores]


def binding_result(error: str = "") -> JsonObject:
    return {"Error": error}
