"""Decode -> decide -> respond: the decision for one AdmissionReview, with no HTTP in it."""

from __future__ import annotations

from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..model.pods import InvalidRequest
from . import review as rv
from .mutate import patch_for
from .validate import Rules, check_binding, check_create, check_update


@dataclass(frozen=True)
class Outcome:
    response: JsonObject  # the AdmissionReview to send back
    result: str  # "allowed", "patched" or "denied", for the metrics
    rule: int | None = None  # the SPEC 3 rule a denial broke


def decide(review: rv.Review, rules: Rules, mutating: bool) -> Outcome:
    """Both webhooks deny what breaks a rule; only the mutating one patches."""
    if not (review.is_pod or review.is_binding or review.is_ephemeral) \
            or review.operation not in ("CREATE", "UPDATE"):
        return Outcome(rv.allow(review), "allowed")
    obj = review.obj
    assert obj is not None, "rv.decode refuses a CREATE or UPDATE without an object"
    try:
        if review.is_binding:  # pods/binding or the legacy `bindings`; never patched
            check_binding(obj, rules, review.username)
            return Outcome(rv.allow(review), "allowed")
        # A pods/status UPDATE is a Pod too, and may change annotations: the same rule 10;
        # so is pods/ephemeralcontainers (an EphemeralContainers object before 1.22).
        if review.operation == "UPDATE":
            assert review.old_obj is not None, "rv.decode refuses an UPDATE without oldObject"
            check_update(review.old_obj, obj, rules, review.username, review.groups,
                         review.sub_resource)
            return Outcome(rv.allow(review), "allowed")
        if review.is_ephemeral:
            return Outcome(rv.allow(review), "allowed")  # only ever UPDATEd
        request = check_create(obj, rules, review.username, review.groups)
    except InvalidRequest as e:
        return Outcome(rv.deny(review.api_version, review.uid, e.message), "denied", e.rule)
    if request is None or not mutating:
        return Outcome(rv.allow(review), "allowed")
    patch = patch_for(obj, request, rules)
    return Outcome(rv.allow(review, patch), "patched" if patch else "allowed")
