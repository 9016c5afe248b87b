"""What the webhook patches into an admitted Mthreads pod (SPEC 3).

The operations are written directly rather than diffed from a copy of the pod
(diffing deep copies cost a third of the throughput). Each operation is only
emitted when the pod differs from the wanted state, so a second pass is empty.
"""

from __future__ import annotations

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model import hami
from ..model.cards import CORES_PER_CARD
from ..model.pods import Kind, PodRequest
from .validate import Rules, annotations_of


def escape(token: str) -> str:
    """A JSON Pointer token (RFC 6901): `mthreads.com/vgpu` -> `mthreads.com~1vgpu`."""
    return token.replace("~", "~0").replace("/", "~1")


def patch_for(pod: JsonObject, request: PodRequest, rules: Rules) -> list[JsonObject]:
    ops: list[JsonObject] = []
    ops += _scheduler_name(pod, rules)
    ops += _whole_card_resources(pod, request, rules)
    ops += _annotations(pod, request)
    return ops


def _scheduler_name(pod: JsonObject, rules: Rules) -> list[JsonObject]:
    current = pod.get("spec", {}).get("schedulerName")
    cfg = rules.config
    if current == cfg.scheduler_name:
        return []
    if not current or (current == "default-scheduler" and cfg.force_overwrite_default_scheduler):
        return [{"op": "add", "path": "/spec/schedulerName", "value": cfg.scheduler_name}]
    return []


def _whole_card_resources(pod: JsonObject, request: PodRequest, rules: Rules) -> list[JsonObject]:
    """Fill memory and cores for containers that asked for whole cards by count alone."""
    if request.kind is not Kind.WHOLE:
        return []
    _, mem_r, core_r = rules.names
    units = request.models[0].units
    ops: list[JsonObject] = []
    for a in request.asks:
        if a.kind is not Kind.WHOLE or a.memory is not None:
            continue
        field = "initContainers" if a.init else "containers"
        base = f"/spec/{field}/{a.index}/resources"
        resources = pod["spec"][field][a.index].get("resources") or {}
        wanted = {mem_r: str(a.cards * units), core_r: str(a.cards * CORES_PER_CARD)}
        for part in ("limits", "requests"):
            current = resources.get(part)
            if not isinstance(current, dict):
                ops.append({"op": "add", "path": f"{base}/{part}", "value": dict(wanted)})
                continue
            ops += [{"op": "add", "path": f"{base}/{part}/{escape(k)}", "value": v}
                    for k, v in wanted.items() if current.get(k) != v]
    return ops


def _annotations(pod: JsonObject, request: PodRequest) -> list[JsonObject]:
    wanted = {keys.TO_ALLOCATE: hami.encode(hami.request_devices(request))}
    if request.cards > 1:
        wanted[keys.REQUEST_GPU_NUM] = str(request.cards)
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": wanted}}]
    if not isinstance(meta.get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": wanted}]
    current = annotations_of(pod)
    ops = [{"op": "add", "path": f"/metadata/annotations/{escape(k)}", "value": v}
           for k, v in wanted.items() if current.get(k) != v]
    if keys.REQUEST_GPU_NUM in current and keys.REQUEST_GPU_NUM not in wanted:
        ops.append({"op": "remove", "path": f"/metadata/annotations/{escape(keys.REQUEST_GPU_NUM)}"})
    return ops
