"""The one invariant checker of the tests: an independent reader of the allocation annotations
(its own few lines, not webhook.model.hami) and the rules every state of the cluster must satisfy:
no card over-committed (`check`), and no node's allocatable exceeded by the requests of its
pods as the kubelet sums them (`check_allocatable`). Pods that ended (Succeeded, Failed) hold
nothing. The allocator's, the extender's and the fault tests use it."""

from __future__ import annotations

from typing import Callable

ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
S4000_MIB, S5000_MIB = 96 * 512, 160 * 512
CORES = 16
BIND_PHASES = ("allocating", "success", "failed")  # the allocator writes the first; a device plugin the others
RESOURCES = ("mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core")
ENDED = ("Succeeded", "Failed")


def ended(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ENDED


def entries(text: str) -> list[list[tuple[str, int, int]]]:
    """Per container: [(card id, MiB, cores)]; ValueError if it is not in that form."""
    out = []
    for container in text.split(";")[:-1]:
        row = []
        for e in container.split(":"):
            if e:
                card, vendor, mem, cores = e.split(",")
                if vendor != "Mthreads":
                    raise ValueError(f"vendor {vendor!r}")
                row.append((card, int(mem), int(cores)))
        out.append(row)
    return out


def parse_allocated(text: str) -> list[tuple[str, int, int]]:
    """(card id, MiB, cores) of every entry, the containers run together."""
    return [e for row in entries(text) for e in row]


def card_problems(pods: list[dict], capacity_mib: dict[str, int],
                  whole_cards: Callable[[dict], int | None] | None = None
                  ) -> tuple[dict[str, list[int]], list[str]]:
    """(card id -> [MiB, cores, holders, whole holders], the rules broken, in words).

    `whole_cards(pod)`: how many cards the pod asked for exclusively, if the test knows (None:
    a pod holding a card's whole memory and cores holds it whole)."""
    problems: list[str] = []
    totals: dict[str, list[int]] = {}
    for p in pods:
        meta, spec = p["metadata"], p.get("spec") or {}
        ann = meta.get("annotations") or {}
        node, text, who = spec.get("nodeName"), ann.get(ALLOCATED), meta["name"]
        if node and ended(p):
            continue  # its containers have stopped: its cards are free for the next
        if not node:
            if text is not None:
                problems.append(f"{who}: unbound but allocated {text}")
            continue
        if text is None:
            continue
        if ann.get("mthreads.com/predicate-node") != node or ann.get("hami.io/vgpu-node") != node:
            problems.append(f"{who}: annotated node {ann.get('mthreads.com/predicate-node')} "
                            f"!= nodeName {node}")
        if ann.get("hami.io/bind-phase") not in BIND_PHASES:
            problems.append(f"{who}: bind-phase {ann.get('hami.io/bind-phase')!r}")
        try:
            rows = entries(text)
        except ValueError as e:
            problems.append(f"{who}: unreadable allocation {text!r}: {e}")
            continue
        order: list[str] = []
        mine: dict[str, list[int]] = {}
        for card, mem, cores in (e for row in rows for e in row):
            if not card.startswith(f"{node}-mthreads-"):
                problems.append(f"{who}: card {card} is not on its node {node}")
            index = card.rsplit("-", 1)[1]
            if index not in order:
                order.append(index)
            m = mine.setdefault(card, [0, 0])
            m[0] += mem
            m[1] += cores
        if ann.get("mthreads.com/gpu-index") != ",".join(order):
            problems.append(f"{who}: gpu-index {ann.get('mthreads.com/gpu-index')!r}, "
                            f"the cards say {','.join(order)!r}")
        full = {c for c, (mem, cores) in mine.items() if mem == capacity_mib.get(c) and cores == CORES}
        slices = {c for row in rows for c, mem, cores in row
                  if not (mem == capacity_mib.get(c) and cores == CORES)}
        if len(slices) > 1:
            problems.append(f"{who}: slices over several cards: {text}")
        want = whole_cards(p) if whole_cards else None
        if want is not None and len(mine) != want:
            problems.append(f"{who}: asked for {want} whole cards, holds {sorted(mine)}")
        for container in spec.get("containers") or ():
            limits = (container.get("resources") or {}).get("limits") or {}
            units = int(limits.get("mthreads.com/sgpu-memory", 0))
            if int(limits.get("mthreads.com/vgpu", 0)) == 1 and units in (96, 128, 160):
                model = S4000_MIB if units == 96 else S5000_MIB
                if any(capacity_mib.get(c) != model for c in mine):
                    problems.append(f"{who}: {units} units not on an {'S4000' if units == 96 else 'S5000'}")
        for card, (mem, cores) in mine.items():
            cap = capacity_mib.get(card)
            if cap is None:
                problems.append(f"{who}: {card} is no card of the fleet")
                continue
            if want is not None and (mem != cap or cores != CORES):
                problems.append(f"{who}: exclusive pod holds {mem} MiB/{cores} cores of {card} "
                                f"({cap} MiB)")
            t = totals.setdefault(card, [0, 0, 0, 0])
            t[0] += mem
            t[1] += cores
            t[2] += 1
            t[3] += want is not None or card in full
    for card, (mem, cores, holders, whole) in totals.items():
        if mem > capacity_mib[card]:
            problems.append(f"{card}: {mem} MiB allocated > {capacity_mib[card]}")
        if cores > CORES:
            problems.append(f"{card}: {cores} cores allocated > {CORES}")
        if whole and holders > 1:
            problems.append(f"{card}: held exclusively but shared by {holders} pods")
    return totals, problems


def check(pods: list[dict], capacity_mib: dict[str, int]) -> dict[str, list[int]]:
    """card id -> [MiB, cores, holders, whole holders]; AssertionError naming every breach."""
    totals, problems = card_problems(pods, capacity_mib)
    assert not problems, "; ".join(problems[:20])
    return totals


def requested(pod: dict, resource: str) -> int:
    """A pod's request of one resource as the kubelet sums it: max(app sum, max init); a
    missing request is the limit (the API server's defaulting)."""
    def value(c: dict) -> int:
        res = c.get("resources") or {}
        return int((res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource, 0)))
    spec = pod.get("spec") or {}
    return max([sum(value(c) for c in spec.get("containers") or ())] +
               [value(c) for c in spec.get("initContainers") or ()])


def allocatable_problems(pods: list[dict], nodes: list[dict],
                         bound_before: set[str] | None = None) -> tuple[dict, list[str]]:
    """(node -> {resource: requested}, the nodes over their allocatable, in words).

    `bound_before`: the names of the pods bound before the nodes took their present
    allocatable; a node is then held to it only if a pod was bound there since (a card that
    fails under running pods lowers allocatable below them, and nothing is evicted)."""
    totals: dict[str, dict[str, int]] = {}
    fresh: set[str] = set()
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or ended(p):
            continue
        t = totals.setdefault(node, dict.fromkeys(RESOURCES, 0))
        for r in RESOURCES:
            t[r] += requested(p, r)
        if bound_before is not None and p["metadata"]["name"] not in bound_before:
            fresh.add(node)
    problems = []
    for n in nodes:
        name, alloc = n["metadata"]["name"], (n.get("status") or {}).get("allocatable") or {}
        if bound_before is not None and name not in fresh:
            continue
        for r in RESOURCES:
            have = totals.get(name, {}).get(r, 0)
            if r in alloc and have > int(alloc[r]):
                problems.append(f"{name}: {r} {have} requested > allocatable {alloc[r]}")
    return totals, problems


def check_allocatable(pods: list[dict], nodes: list[dict],
                      bound_before: set[str] | None = None) -> dict[str, dict[str, int]]:
    """node -> {resource: requested}; AssertionError naming every node over its allocatable."""
    totals, problems = allocatable_problems(pods, nodes, bound_before)
    assert not problems, "; ".join(problems[:20])
    return totals
