"""Which pods are admitted (SPEC 3): plain functions on plain dicts."""

from __future__ import annotations

from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.cards import Fleet
from ..model.config import Config
from ..model.pods import (
    InvalidRequest,
    PodRequest,
    Rule,
    containers,
    is_mthreads_pod,
    read_request,
    resource_names,
)
from .privilege import check_privilege, ephemeral_containers
from .user_annotations import USER_KEYS, check_user_annotations

OPT_OUT_LABEL, OPT_OUT_VALUE = "hami.io/webhook", "ignore"
# Written by the webhook on CREATE (or chosen by the user then): after it, rule 10's writers only.
SET_AT_CREATE = (keys.TO_ALLOCATE, keys.REQUEST_GPU_NUM, keys.CARD_MODEL)
NODES_GROUP = "system:nodes"


@dataclass(frozen=True)
class Rules:
    """The config, digested once for admission."""

    config: Config
    fleet: Fleet
    names: tuple[str, str, str]
    writers: frozenset[str]

    @classmethod
    def of(cls, config: Config) -> "Rules":
        return cls(config, Fleet.of(config.mthreads.memory_per_card),
                   resource_names(config.mthreads), config.allocator.writers)


def annotations_of(pod: JsonObject) -> JsonObject:
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return ann if isinstance(ann, dict) else {}


def labels_of(pod: JsonObject) -> JsonObject:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def is_kubelet(username: str, groups: tuple[str, ...]) -> bool:
    """A node's own identity, as the API server's NodeRestriction tells it."""
    return username.startswith("system:node:") and len(username) > 12 and NODES_GROUP in groups


def check_create(pod: JsonObject, rules: Rules, username: str,
                 groups: tuple[str, ...] = ()) -> PodRequest | None:
    """Admit a new pod or raise InvalidRequest; the request of an Mthreads pod, else None."""
    if not rules.config.mthreads.enabled:
        return None
    ann = annotations_of(pod)
    if keys.MIRROR in ann and is_kubelet(username, groups):  # a kubelet's static pod
        return None
    writer = username in rules.writers
    if not writer and not keys.ALLOCATION_KEYS.isdisjoint(ann):  # the usual case costs one test
        _refuse_allocation_keys(ann)
    items = containers(pod)  # walked once, for the rules below
    if not is_mthreads_pod(pod, rules.names, items):
        return None
    request = read_request(pod, rules.config.mthreads, rules.fleet, items)
    # Ephemeral containers too: the API server refuses them on CREATE only after /mutate.
    check_privilege(pod, [c for _, _, c in items] + ephemeral_containers(pod))
    if labels_of(pod).get(OPT_OUT_LABEL) == OPT_OUT_VALUE:
        _refuse_opt_out()
    check_user_annotations(ann)
    spec = pod.get("spec")
    if not writer and isinstance(spec, dict) and spec.get("nodeName"):
        raise InvalidRequest(Rule.PRESET_NODE, f"spec.nodeName={spec['nodeName']!r} is set: an Mthreads pod "
                                f"must be placed by the allocator, which picks its card")
    return request


def check_update(old: JsonObject, new: JsonObject, rules: Rules, username: str,
                 groups: tuple[str, ...] = (), sub_resource: str = "") -> None:
    """Rule 10 for the allocation keys and what was set at CREATE; rule 8 for ephemeral
    containers; the opt-out label and the user's annotations as on CREATE.

    `new` and `old` are Pods, or on Kubernetes 1.16-1.21 the EphemeralContainers objects of
    pods/ephemeralcontainers (the pod's metadata and its ephemeral containers)."""
    if not rules.config.mthreads.enabled or username in rules.writers:
        return
    before, after = annotations_of(old), annotations_of(new)
    if keys.MIRROR in before and keys.MIRROR in after and is_kubelet(username, groups):
        return
    who = username or "anonymous"
    changed = sorted(k for k in keys.ALLOCATION_KEYS if before.get(k) != after.get(k))
    if changed:
        raise InvalidRequest(Rule.ALLOCATION_WRITERS, f"annotation {changed[0]} may only be changed by the allocator "
                                 f"({rules.config.allocator.user}), not by {who}")
    for key in SET_AT_CREATE:
        if before.get(key) != after.get(key):
            raise InvalidRequest(Rule.ALLOCATION_WRITERS, f"annotation {key} is set when the pod is created; after "
                                     f"that it may only be changed by the allocator "
                                     f"({rules.config.allocator.user}), not by {who}")
    steering = tuple(k for k in USER_KEYS if before.get(k) != after.get(k))
    if steering:
        spec = old.get("spec")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        if node:
            raise InvalidRequest(Rule.ALLOCATION_WRITERS, f"annotation {steering[0]} steers where the pod is placed; "
                                     f"the pod is bound (to {node!r}), so only the allocator "
                                     f"({rules.config.allocator.user}) may change it, not {who}")
    opting_out = labels_of(new).get(OPT_OUT_LABEL) == OPT_OUT_VALUE != labels_of(old).get(OPT_OUT_LABEL)
    if not (steering or opting_out or sub_resource == "ephemeralcontainers"):
        return  # the usual UPDATE: a status report, a label
    if not _is_mthreads(new, rules):
        return
    if sub_resource == "ephemeralcontainers":
        check_privilege(new, ephemeral_containers(new), whole_pod=False)
    if opting_out:
        _refuse_opt_out()
    check_user_annotations(after, steering)


def _is_mthreads(obj: JsonObject, rules: Rules) -> bool:
    """An Mthreads pod by its containers; an EphemeralContainers object (no containers) by
    the request annotation the webhook wrote at CREATE, which rule 10 holds from then on."""
    if obj.get("kind") == "EphemeralContainers":
        return keys.TO_ALLOCATE in annotations_of(obj)
    return is_mthreads_pod(obj, rules.names)


def _refuse_opt_out() -> None:
    raise InvalidRequest(Rule.OPT_OUT, f"label {OPT_OUT_LABEL}={OPT_OUT_VALUE} opts a pod out of "
                                       f"the webhook, for the webhook's own pods and other "
                                       f"infrastructure; a pod that asks for Mthreads resources "
                                       f"may not carry it (it would go unallocated)")


def check_binding(binding: JsonObject, rules: Rules, username: str) -> None:
    """A Binding's annotations are merged into the pod it binds (SPEC 4, the allocator's one
    write), so carrying an allocation key is writing it: rule 10, as on UPDATE."""
    if not rules.config.mthreads.enabled or username in rules.writers:
        return
    forged = sorted(keys.ALLOCATION_KEYS.intersection(annotations_of(binding)))
    if forged:
        meta = binding.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        pod = f"pod {name!r}" if isinstance(name, str) and name else "a pod"
        raise InvalidRequest(Rule.ALLOCATION_WRITERS, f"annotation {forged[0]} may only be written by the allocator "
                                 f"({rules.config.allocator.user}); {username or 'anonymous'} "
                                 f"may not bind {pod} with it")


def _refuse_allocation_keys(ann: JsonObject) -> None:
    forged = sorted(keys.ALLOCATION_KEYS.intersection(ann))
    if forged:
        raise InvalidRequest(Rule.ALLOCATION_WRITERS, f"annotation {forged[0]} is written by the allocator when it "
                                 f"binds the pod; a new pod may not carry it")
