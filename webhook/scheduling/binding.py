"""The one write of a decision: a pods/binding carrying SPEC 4's annotations."""

from __future__ import annotations

from ..base.json_types import JsonObject
from ..model import annotations as keys
from .decide import Placement


def binding_annotations(p: Placement, now_ns: int) -> dict[str, str]:
    seconds = str(now_ns // 1_000_000_000)
    return {
        keys.ALLOCATED: p.allocated,
        keys.GPU_INDEX: p.gpu_index,
        keys.PREDICATE_NODE: p.node,
        keys.VGPU_NODE: p.node,
        keys.PREDICATE_TIME: str(now_ns),
        keys.VGPU_TIME: seconds,
        keys.BIND_TIME: seconds,
        keys.BIND_PHASE: "allocating",
    }


def binding_body(namespace: str, name: str, uid: str, p: Placement, now_ns: int,
                 with_annotations: bool) -> JsonObject:
    meta: JsonObject = {"name": name, "namespace": namespace, "uid": uid}
    if with_annotations:
        meta["annotations"] = binding_annotations(p, now_ns)
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": p.node}}
