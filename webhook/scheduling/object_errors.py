"""An object that raised while it was decided or indexed, named so that a front-end can tell
(a log line, a Warning event, a counter) and go on with the others (docs/reliability.md).

Read defensively: the object is the one that raised, so nothing of it is trusted to be of
the shape the rules expect.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

# The Kubernetes kind of each kind of watch, for an event's involvedObject.
KINDS = {"node": ("v1", "Node"), "pod": ("v1", "Pod"), "pvc": ("v1", "PersistentVolumeClaim"),
         "pv": ("v1", "PersistentVolume"), "storageclass": ("storage.k8s.io/v1", "StorageClass"),
         "namespace": ("v1", "Namespace"), "csinode": ("storage.k8s.io/v1", "CSINode")}


@dataclass(frozen=True, slots=True)
class ObjectError:
    kind: str  # the watch's kind: "pod", "node", "pvc", "pv", "storageclass", "csinode"
    namespace: str
    name: str  # "" when the object names none (a list, or no readable metadata)
    uid: str
    # builtins.Exception, not Exception: compiled by mypyc, a dataclass looks its fields' types
    # up among the module's names, and a bare builtin's is not there (KeyError at import)
    error: builtins.Exception

    @property
    def who(self) -> str:
        """`pod ns/name (uid ...)`, as the log line names it."""
        name = f"{self.namespace}/{self.name}" if self.namespace else self.name or "(unnamed)"
        return f"{self.kind} {name}" + (f" (uid {self.uid})" if self.uid else "")

    @property
    def what(self) -> str:
        """The exception's type and message, without a traceback."""
        return what_raised(self.error)


def what_raised(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def object_error(kind: str, obj: object, e: Exception) -> ObjectError:
    """The failure of `obj` (a watched object, or a list of them) with its identity as far as
    it can be read."""
    fields: list[object] = [None, None, None]
    try:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict):
            fields = [meta.get(k) for k in ("namespace", "name", "uid")]
    except Exception:  # metadata that raises when read names nothing
        pass
    namespace, name, uid = (f if isinstance(f, str) else "" for f in fields)
    return ObjectError(kind, namespace, name, uid, e)
