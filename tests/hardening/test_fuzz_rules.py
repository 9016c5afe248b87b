"""Property-based tests of the admission rules, with no HTTP in them.

Invariants: the rules answer every pod with a request, None, or an InvalidRequest that has
a rule number and a message, never another exception; what mutate admits passes validation
after its patch is applied, and a second mutate pass returns no patch.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from hypothesis import assume, event, given

from tests.hardening.conftest import count_case, profile
from tests.hardening.strategies import (
    any_pod,
    enabled_rules,
    mutate_pods,
    rules,
    too_many_cards,
    updates,
    users,
)
from webhook.admission.mutate import patch_for
from webhook.admission.user_annotations import USER_KEYS
from webhook.admission.validate import (
    OPT_OUT_LABEL,
    OPT_OUT_VALUE,
    SET_AT_CREATE,
    check_create,
    check_update,
)
from webhook.model import annotations as keys
from webhook.model import hami
from webhook.model.pods import InvalidRequest, Kind, Rule, read_request

pytestmark = pytest.mark.fuzz


def _denial_is_well_formed(e: InvalidRequest) -> None:
    assert isinstance(e.rule, int) and 1 <= e.rule <= 13, e.rule
    assert isinstance(e.message, str) and e.message.strip(), "a deny must say why"


@profile()
@given(pod=any_pod, rules=rules)
def test_read_request_answers_every_pod(pod, rules):
    count_case("read_request")
    try:
        request = read_request(pod, rules.config.mthreads, rules.fleet)
    except InvalidRequest as e:
        _denial_is_well_formed(e)
        event(f"denied rule {e.rule}")
        return
    event(f"read as {request.kind.value}")
    assert request.models, "a request always names the models that can serve it"
    for a in request.asks:
        if a.kind is Kind.SLICE:
            assert a.cards == 1 and a.memory in set().union(*(m.valid for m in request.models))


@profile()
@given(pod=any_pod, rules=rules, user=users)
def test_check_create_denies_or_admits(pod, rules, user):
    count_case("check_create")
    before = copy.deepcopy(pod)
    try:
        check_create(pod, rules, user)
    except InvalidRequest as e:
        _denial_is_well_formed(e)
        event(f"create denied rule {e.rule}")
    assert pod == before, "the rules must not change the pod they read"


def _allocation(pod) -> dict:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return {k: ann.get(k) for k in keys.ALLOCATION_KEYS} if isinstance(ann, dict) else \
        dict.fromkeys(keys.ALLOCATION_KEYS)


def _annotations(pod, names) -> dict:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return {k: ann.get(k) for k in names} if isinstance(ann, dict) else dict.fromkeys(names)


def _opts_out(old, new) -> bool:
    def label(p):
        meta = p.get("metadata") if isinstance(p, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return labels.get(OPT_OUT_LABEL) if isinstance(labels, dict) else None
    return label(new) == OPT_OUT_VALUE != label(old)


def _bound(pod) -> bool:
    spec = pod.get("spec") if isinstance(pod, dict) else None
    return isinstance(spec, dict) and bool(spec.get("nodeName"))


@profile(scale=1.5)
@given(update=updates(), rules=rules, user=users)
def test_check_update_denies_exactly_a_foreign_allocation_change(update, rules, user):
    """Rule 10, as an oracle: denied exactly when someone other than the allocator (and the
    configured writers) adds, changes or removes an allocation key or a key set at CREATE,
    or a placement annotation of a bound pod. None of `users` is a kubelet: a mirror pod's
    annotation exempts nothing. Rules 12 and 13 may deny only an update that adds the
    opt-out label or changes a placement annotation."""
    old, new = update
    count_case("check_update")
    foreign = rules.config.mthreads.enabled and user not in rules.writers
    held = _allocation(old) != _allocation(new) or \
        _annotations(old, SET_AT_CREATE) != _annotations(new, SET_AT_CREATE)
    steering = _annotations(old, USER_KEYS) != _annotations(new, USER_KEYS)
    expect_10 = foreign and (held or (steering and _bound(old)))
    try:
        check_update(old, new, rules, user)
    except InvalidRequest as e:
        _denial_is_well_formed(e)
        if e.rule in (Rule.OPT_OUT, Rule.POLICY_ANNOTATIONS):
            assert foreign and not expect_10 and (steering or _opts_out(old, new)), e.message
            event(f"update denied rule {e.rule}")
            return
        assert e.rule == 10, f"UPDATE is not checked for rule {e.rule}"
        assert expect_10, f"denied an update that changes no held key: {e.message}"
        event("update denied")
        return
    assert not expect_10, "a held annotation was changed by a user and allowed"


@profile()
@given(pod=any_pod, rules=rules, user=users)
def test_an_unchanged_update_is_always_allowed(pod, rules, user):
    count_case("check_update unchanged")
    check_update(pod, copy.deepcopy(pod), rules, user)


@profile(scale=2.5)
@given(pod=mutate_pods, rules=enabled_rules, user=users)
def test_mutate_then_validate_admits_and_mutate_is_idempotent(pod, rules, user):
    count_case("mutate then validate")
    assume(not too_many_cards(pod))
    try:
        request = check_create(pod, rules, user)
    except InvalidRequest as e:
        event(f"denied rule {e.rule}")
        return
    if request is None:
        event("not an Mthreads pod, or disabled")
        return
    before = copy.deepcopy(pod)
    patch = patch_for(pod, request, rules)
    assert pod == before, "patch_for must not change the pod it reads"
    count_case("mutate then validate: admitted Mthreads pods")
    event("patched" if patch else "admitted unchanged")
    for op in patch:
        assert op["op"] in ("add", "remove") and isinstance(op["path"], str), op
        assert not any(op["path"].endswith("/" + k.replace("/", "~1")) for k in keys.ALLOCATION_KEYS)
    mutated = jsonpatch.apply_patch(pod, patch)  # raises if an operation does not apply
    try:
        again = check_create(mutated, rules, user)
    except InvalidRequest as e:
        raise AssertionError(f"mutate admitted the pod, validation of its result denies: "
                             f"rule {e.rule}: {e.message}\npatch: {patch}") from None
    assert again is not None
    assert patch_for(mutated, again, rules) == [], "a second mutate pass must return no patch"
    assert [a.kind for a in again.asks] == [a.kind for a in request.asks]
    assert again.cards == request.cards
    ann = mutated["metadata"]["annotations"]
    assert hami.decode(ann[keys.TO_ALLOCATE]) == hami.request_devices(again)
