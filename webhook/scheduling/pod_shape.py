"""A pod's shape: what of a pod `request_of` reads, as a key, so that the replicas of a
workload are read once (request.py keeps the answer per shape).

The shape is the annotations that choose cards (model, use, nouse), each container's name,
restart policy, limits and requests (init containers apart), the pod-level resources and the
overhead. Only a pod whose every value there is a string has one: the API server writes
quantities, names and annotations as strings, and a key of mixed types could make equal keys of
different answers (`1 == 1.0 == True` in Python, where a quantity of 1 is valid and `true` is
not). A pod without a shape is read each time.
"""

from __future__ import annotations

from itertools import chain

from ..base.json_types import JsonObject, all_text
from ..model import annotations as keys

Shape = tuple[object, ...]

CARD_KEYS = (keys.CARD_MODEL, keys.USE_CARDS, keys.NOUSE_CARDS)  # the annotations request_of reads
# an annotation or a name not given: no value equals it (an object, not a tuple: compiled
# code (setup.py) passes tuples by value, so a tuple would not stay the one `is` looks for)
_ABSENT = object()


def shape_of(pod: JsonObject) -> Shape | None:
    """The pod's shape; None when a value is not a string or a field is of an unexpected kind."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if type(meta) is not dict or type(spec) is not dict:
        return None
    ann, overhead = meta.get("annotations") or {}, spec.get("overhead") or {}
    if type(ann) is not dict or type(overhead) is not dict:
        return None
    marks = tuple(ann[k] if k in ann else _ABSENT for k in CARD_KEYS)
    texts = [m for m in marks if m is not _ABSENT]  # every value the shape holds
    extra = tuple(chain.from_iterable(overhead.items()))
    texts += extra
    parts: list[object] = [marks, extra]
    for field in ("initContainers", "containers"):
        items = spec.get(field) or []
        if type(items) is not list:
            return None
        group = []
        for c in items:
            if type(c) is not dict:
                return None
            res = c.get("resources") or {}
            if type(res) is not dict:
                return None
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            if type(limits) is not dict or type(requests) is not dict:
                return None
            name, policy = c.get("name", _ABSENT), c.get("restartPolicy", _ABSENT)
            shown = (tuple(chain.from_iterable(limits.items())),
                     tuple(chain.from_iterable(requests.items())))
            texts += shown[0] + shown[1] + tuple(v for v in (name, policy) if v is not _ABSENT)
            group.append((name, policy, *shown))  # a sidecar (policy Always) counts otherwise
        parts.append(tuple(group))
    pod_level = _pod_level(spec)  # pod-level resources replace the containers' sum
    if pod_level is None:
        return None
    texts += pod_level[0] + pod_level[1]
    parts.append(pod_level)
    return tuple(parts) if all_text(texts) else None


def _pod_level(spec: JsonObject) -> tuple[tuple[object, ...], tuple[object, ...]] | None:
    """(limits, requests) of `spec.resources`, flattened; None when not of their kind."""
    res = spec.get("resources") or {}
    if type(res) is not dict:
        return None
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    if type(limits) is not dict or type(requests) is not dict:
        return None
    return tuple(chain.from_iterable(limits.items())), tuple(chain.from_iterable(requests.items()))
