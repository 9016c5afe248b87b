"""What the scheduler reads of a pod's place in its life: who it is, whether it is bound or
finished, a scheduler's last word on it; and the field selectors of the pods a cache watches."""

from __future__ import annotations

from typing import cast

from ..base.json_types import JsonObject

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"  # the pods a cache lists and watches
BOUND_LIVE_PODS = "spec.nodeName!=," + LIVE_PODS  # of them, those on a node
TERMINAL = ("Succeeded", "Failed")


def waiting_for(scheduler_name: str) -> str:
    """The field selector of the live pods that wait for `scheduler_name` (not bound yet)."""
    return f"spec.schedulerName={scheduler_name},spec.nodeName=,{LIVE_PODS}"


def uid_of(pod: JsonObject) -> str:
    return cast(str, pod["metadata"]["uid"])


def name_of(pod: JsonObject) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace')}/{m.get('name')}"


def is_bound(pod: JsonObject) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def scheduling_gates(pod: JsonObject) -> list[str]:
    """The names of the pod's scheduling gates (Kubernetes 1.26+): while one is left, no
    scheduler may bind it (a queue manager such as Kueue removes them)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return [str(g.get("name", "")) if isinstance(g, dict) else str(g) for g in gates]


def is_finished(pod: JsonObject) -> bool:
    """Its containers have stopped: it holds nothing (the kubelet counts it no more)."""
    return (pod.get("status") or {}).get("phase") in TERMINAL


def scheduled_condition(pod: JsonObject) -> JsonObject | None:
    """The pod's PodScheduled condition (a scheduler's last word on it), if any."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return cast(JsonObject, c)
    return None
