"""Which pods are admitted (SPEC 3): plain functions on plain dicts."""

from __future__ import annotations

from dataclasses import dataclass

from .. import annotations as keys
from ..cards import Fleet
from ..config import Config
from ..pods import InvalidRequest, PodRequest, containers, container_name, is_mthreads_pod, \
    read_request, resource_names


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


def annotations_of(pod: dict) -> dict:
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return ann if isinstance(ann, dict) else {}


def is_mirror(pod: dict) -> bool:
    return keys.MIRROR in annotations_of(pod)


def check_create(pod: dict, rules: Rules, username: str) -> PodRequest | None:
    """Admit a new pod or raise InvalidRequest; the request of an Mthreads pod, else None."""
    if not rules.config.mthreads.enabled:
        return None
    ann = annotations_of(pod)
    if keys.MIRROR in ann:  # is_mirror(pod)
        return None
    writer = username in rules.writers
    if not writer and not keys.ALLOCATION_KEYS.isdisjoint(ann):  # the usual case costs one test
        _refuse_allocation_keys(ann)
    items = containers(pod)  # walked once, for the three rules below
    if not is_mthreads_pod(pod, rules.names, items):
        return None
    request = read_request(pod, rules.config.mthreads, rules.fleet, items)
    for _, _, c in items:
        sc = c.get("securityContext")
        if isinstance(sc, dict) and sc.get("privileged") is True:
            raise InvalidRequest(8, f'container "{container_name(c)}": privileged containers are '
                                    f"not allowed in an Mthreads pod (they would see every card)")
    spec = pod.get("spec")
    if not writer and isinstance(spec, dict) and spec.get("nodeName"):
        raise InvalidRequest(9, f"spec.nodeName={spec['nodeName']!r} is set: an Mthreads pod "
                                f"must be placed by the allocator, which picks its card")
    return request


def check_update(old: dict, new: dict, rules: Rules, username: str) -> None:
    """Only the allocator (and the configured writers) may touch allocation annotations."""
    if not rules.config.mthreads.enabled or is_mirror(new) or username in rules.writers:
        return
    before, after = annotations_of(old), annotations_of(new)
    changed = sorted(k for k in keys.ALLOCATION_KEYS if before.get(k) != after.get(k))
    if changed:
        raise InvalidRequest(10, f"annotation {changed[0]} may only be changed by the allocator "
                                 f"({rules.config.allocator.user}), not by {username or 'anonymous'}")


def check_binding(binding: dict, rules: Rules, username: str) -> None:
    """A Binding's annotations are merged into the pod it binds (SPEC 4, the allocator's one
    write), so carrying an allocation key is writing it: rule 10, as on UPDATE."""
    if not rules.config.mthreads.enabled or username in rules.writers:
        return
    forged = sorted(keys.ALLOCATION_KEYS.intersection(annotations_of(binding)))
    if forged:
        meta = binding.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        pod = f"pod {name!r}" if isinstance(name, str) and name else "a pod"
        raise InvalidRequest(10, f"annotation {forged[0]} may only be written by the allocator "
                                 f"({rules.config.allocator.user}); {username or 'anonymous'} "
                                 f"may not bind {pod} with it")


def _refuse_allocation_keys(ann: dict) -> None:
    forged = sorted(keys.ALLOCATION_KEYS.intersection(ann))
    if forged:
        raise InvalidRequest(10, f"annotation {forged[0]} is written by the allocator when it "
                                 f"binds the pod; a new pod may not carry it")
