"""Rule 8: what in an Mthreads pod reaches every card of its node (SPEC 3).

A privileged container, one that adds SYS_ADMIN (or ALL), and one that mounts a hostPath
volume of /dev (or of / or below /dev) each see every card's device file, whatever the
allocator gave the pod. Ephemeral containers can mount the pod's volumes as well.
Other host access (hostPID, hostNetwork, hostIPC, other hostPath volumes, other
capabilities) reaches no card: it is left to Pod Security Admission (docs/rules.md).
"""

from __future__ import annotations

import posixpath

from ..pods import InvalidRequest, container_name

CARD_CAPABILITIES = frozenset({"SYS_ADMIN", "ALL"})


def ephemeral_containers(obj: dict) -> list[dict]:
    """spec.ephemeralContainers of a Pod, or ephemeralContainers of the EphemeralContainers
    object that pods/ephemeralcontainers takes on Kubernetes 1.16 to 1.21."""
    spec = obj.get("spec")
    items = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
    if items is None:
        items = obj.get("ephemeralContainers")
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def check_privilege(pod: dict, items: list[dict], whole_pod: bool = True) -> None:
    """Raise InvalidRequest (rule 8) for the first container of `items` that reaches every
    card; with `whole_pod` (CREATE) also for a device volume that no container mounts yet:
    an ephemeral container could mount it later, and on 1.16-1.21 the webhook does not see
    the pod's volumes then."""
    device_volumes = _device_volumes(pod)
    for c in items:
        reason = _reaches_every_card(c, device_volumes)
        if reason:
            raise InvalidRequest(8, f'container "{container_name(c)}": {reason} is not allowed '
                                    f"in an Mthreads pod (it would reach every card of the node)")
    if whole_pod and device_volumes:
        name, path = next(iter(device_volumes.items()))
        raise InvalidRequest(8, f"volume {name!r}: hostPath {path!r} is not allowed in an "
                                f"Mthreads pod (a container mounting it would reach every card "
                                f"of the node)")


def _reaches_every_card(c: dict, device_volumes: dict[str, str]) -> str | None:
    sc = c.get("securityContext")
    if isinstance(sc, dict):
        if sc.get("privileged") is True:
            return "privileged: true"
        caps = sc.get("capabilities")
        added = caps.get("add") if isinstance(caps, dict) else None
        for cap in added if isinstance(added, list) else ():
            if isinstance(cap, str) and _capability(cap) in CARD_CAPABILITIES:
                return f"capabilities.add {cap}"
    if device_volumes:
        for key in ("volumeMounts", "volumeDevices"):
            mounts = c.get(key)
            for m in mounts if isinstance(mounts, list) else ():
                name = m.get("name") if isinstance(m, dict) else None
                if name in device_volumes:
                    return f"mounting hostPath {device_volumes[name]!r} (volume {name!r})"
    return None


def _capability(cap: str) -> str:
    """As the container runtimes read it: case-insensitive, with or without CAP_."""
    cap = cap.strip().upper()
    return cap[4:] if cap.startswith("CAP_") else cap


def _device_volumes(pod: dict) -> dict[str, str]:
    """name -> path of the pod's hostPath volumes that hold /dev: /, /dev and below."""
    spec = pod.get("spec")
    volumes = spec.get("volumes") if isinstance(spec, dict) else None
    if not volumes or not isinstance(volumes, list):
        return {}
    out = {}
    for v in volumes:
        host = v.get("hostPath") if isinstance(v, dict) else None
        path = host.get("path") if isinstance(host, dict) else None
        if isinstance(path, str) and _holds_dev(path) and isinstance(v.get("name"), str):
            out[v["name"]] = path
    return out


def _holds_dev(path: str) -> bool:
    norm = posixpath.normpath("/" + path.strip())
    norm = "/" + norm.lstrip("/")  # normpath keeps a leading "//"
    return norm in ("/", "/dev") or norm.startswith("/dev/")
