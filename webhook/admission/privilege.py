"""Rule 8: what in an Mthreads pod reaches every card of its node (SPEC 3).

A privileged container, one that adds SYS_ADMIN (or ALL), and one that mounts a hostPath
volume of /, of /dev or /proc or below them each see every card's device file, whatever the
allocator gave the pod: /dev holds them, / holds /dev, and /proc/<pid>/root is the host's /.
Ephemeral containers can mount the pod's volumes as well. Other host access (hostPID,
hostNetwork, hostIPC, other hostPath volumes, other capabilities) reaches no card: it is left
to Pod Security Admission (docs/rules.md), as are host symlinks to these directories.
"""

from __future__ import annotations

import posixpath

from ..base.json_types import JsonObject
from ..model.pods import InvalidRequest, Rule, container_name

CARD_CAPABILITIES = frozenset({"SYS_ADMIN", "ALL"})
# Host directories that reach every card, and why (said in the denial).
CARD_DIRS = {"/dev": "the host's /dev holds every card's device file",
             "/proc": "/proc/<pid>/root is the host's /"}
ROOT_WHY = "the host's / holds /dev"


def ephemeral_containers(obj: JsonObject) -> list[JsonObject]:
    """spec.ephemeralContainers of a Pod, or ephemeralContainers of the EphemeralContainers
    object that pods/ephemeralcontainers takes on Kubernetes 1.16 to 1.21."""
    spec = obj.get("spec")
    items = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
    if items is None:
        items = obj.get("ephemeralContainers")
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def check_privilege(pod: JsonObject, items: list[JsonObject], whole_pod: bool = True) -> None:
    """Raise InvalidRequest (rule 8) for the first container of `items` that reaches every
    card; with `whole_pod` (CREATE) also for a card volume that no container mounts yet:
    an ephemeral container could mount it later, and on 1.16-1.21 the webhook does not see
    the pod's volumes then."""
    card_volumes = _card_volumes(pod)
    for c in items:
        found = _reaches_every_card(c, card_volumes)
        if found:
            what, why = found
            raise InvalidRequest(Rule.HOST_REACH, f'container "{container_name(c)}": {what} is not allowed '
                                    f"in an Mthreads pod (it would reach every card of the "
                                    f"node{why})")
    if whole_pod and card_volumes:
        name, (path, why) = next(iter(card_volumes.items()))
        raise InvalidRequest(Rule.HOST_REACH, f"volume {name!r}: hostPath {path!r} is not allowed in an "
                                f"Mthreads pod (a container mounting it would reach every card "
                                f"of the node: {why})")


def host_path(path: str) -> str:
    """A hostPath's path as the kubelet and the runtime read it, as Go's filepath.Clean does:
    `//` and `.` elements collapsed, `..` resolved lexically, no trailing slash. A relative
    path (the API server takes one) is read from /, the working directory of containerd and
    CRI-O under systemd; surrounding whitespace is dropped too (refusing on the safe side)."""
    norm = posixpath.normpath("/" + path.strip())
    return "/" + norm.lstrip("/")  # normpath keeps a leading "//"


def card_path_reason(path: str) -> str | None:
    """Why a hostPath volume of `path` reaches every card of the node, or None:
    /, and /dev or /proc or below them."""
    norm = host_path(path)
    if norm == "/":
        return ROOT_WHY
    for top, why in CARD_DIRS.items():
        if norm == top or norm.startswith(top + "/"):
            return why
    return None


def _reaches_every_card(c: JsonObject, card_volumes: dict[str, tuple[str, str]]
                        ) -> tuple[str, str] | None:
    """(what the container does, ": why" or "") when it reaches every card, else None."""
    sc = c.get("securityContext")
    if isinstance(sc, dict):
        if sc.get("privileged") is True:
            return "privileged: true", ""
        caps = sc.get("capabilities")
        added = caps.get("add") if isinstance(caps, dict) else None
        for cap in added if isinstance(added, list) else ():
            if isinstance(cap, str) and _capability(cap) in CARD_CAPABILITIES:
                return f"capabilities.add {cap}", ""
    if card_volumes:
        for key in ("volumeMounts", "volumeDevices"):
            mounts = c.get(key)
            for m in mounts if isinstance(mounts, list) else ():
                name = m.get("name") if isinstance(m, dict) else None
                if name in card_volumes:
                    path, why = card_volumes[name]
                    return f"mounting hostPath {path!r} (volume {name!r})", f": {why}"
    return None


def _capability(cap: str) -> str:
    """As the container runtimes read it: case-insensitive, with or without CAP_."""
    cap = cap.strip().upper()
    return cap[4:] if cap.startswith("CAP_") else cap


def _card_volumes(pod: JsonObject) -> dict[str, tuple[str, str]]:
    """name -> (path as given, why) of the pod's hostPath volumes that reach every card."""
    spec = pod.get("spec")
    volumes = spec.get("volumes") if isinstance(spec, dict) else None
    if not volumes or not isinstance(volumes, list):
        return {}
    out = {}
    for v in volumes:
        host = v.get("hostPath") if isinstance(v, dict) else None
        path = host.get("path") if isinstance(host, dict) else None
        if isinstance(path, str) and isinstance(v.get("name"), str):
            why = card_path_reason(path)
            if why:
                out[v["name"]] = (path, why)
    return out
