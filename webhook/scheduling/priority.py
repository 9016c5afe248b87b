"""A pod's priority as kube-scheduler reads it: `spec.priority`, which the API server's
Priority admission fills from the PriorityClass; 0 when unset."""

from __future__ import annotations

from ..base.json_types import JsonObject


def pod_priority(pod: JsonObject) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
