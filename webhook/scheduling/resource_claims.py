"""Dynamic Resource Allocation (`spec.resourceClaims`): the allocator does not allocate DRA
claims and does not yet read them, so a pod that names any waits with a reason that names the
claim and says what to do, never a silent bind. In extender mode kube-scheduler's
DynamicResources plugin allocates and reserves them, so the extender does not refuse for them."""

from __future__ import annotations

from ..base.json_types import JsonObject

NOT_ALLOCATED = ("pod's resource claim {claim!r} is not allocated by this scheduler: the "
                 "allocator does not allocate Dynamic Resource Allocation claims; use mode=extender")
BAD_CLAIMS = "spec.resourceClaims is not a list of objects with a name"


def claims_refusal(spec: JsonObject) -> str | None:
    """Every node's reason for a pod whose spec names DRA claims, or None when it names none."""
    claims = spec.get("resourceClaims")
    if not claims:
        return None
    if not isinstance(claims, list):
        return BAD_CLAIMS
    first = claims[0]
    if not isinstance(first, dict) or not isinstance(first.get("name"), str):
        return BAD_CLAIMS
    name = first.get("resourceClaimName") or first.get("resourceClaimTemplateName") or first["name"]
    return NOT_ALLOCATED.format(claim=name if isinstance(name, str) else first["name"])
