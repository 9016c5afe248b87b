"""An independent reader of the allocation annotations (its own few lines, not webhook.hami),
and the invariants every state of the cluster must satisfy."""

from __future__ import annotations

ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
S4000_MIB, S5000_MIB = 96 * 512, 160 * 512


def entries(text: str) -> list[list[tuple[str, int, int]]]:
    """Per container: [(card id, MiB, cores)]."""
    out = []
    for container in text.split(";")[:-1]:
        row = []
        for e in container.split(":"):
            if e:
                card, vendor, mem, cores = e.split(",")
                assert vendor == "Mthreads", text
                row.append((card, int(mem), int(cores)))
        out.append(row)
    return out


def check(pods: list[dict], capacity_mib: dict[str, int]) -> dict[str, list[int]]:
    """card id -> [MiB, cores, holders, whole holders]; raises AssertionError on a breach."""
    totals: dict[str, list[int]] = {}
    for p in pods:
        ann = p["metadata"].get("annotations") or {}
        node = p["spec"].get("nodeName")
        text = ann.get(ALLOCATED)
        who = p["metadata"]["name"]
        if not node:
            assert text is None, f"{who}: unbound but allocated {text}"
            continue
        if text is None:
            continue
        assert ann["mthreads.com/predicate-node"] == ann["hami.io/vgpu-node"] == node, who
        assert ann["hami.io/bind-phase"] == "allocating", who
        rows = entries(text)
        order: list[int] = []
        mine: dict[str, list[int]] = {}
        for row in rows:
            for card, mem, cores in row:
                assert card.startswith(f"{node}-mthreads-"), f"{who}: {card} not on {node}"
                index = int(card.rsplit("-", 1)[1])
                if index not in order:
                    order.append(index)
                m = mine.setdefault(card, [0, 0, 0])
                m[0] += mem
                m[1] += cores
                m[2] += mem == capacity_mib.get(card) and cores == 16
        assert ann["mthreads.com/gpu-index"] == ",".join(map(str, order)), who
        slices = [e for row in rows for e in row if not (e[1] == capacity_mib.get(e[0]) and e[2] == 16)]
        assert len({c for c, _, _ in slices}) <= 1, f"{who}: slices over several cards: {text}"
        for card, (mem, cores, whole) in mine.items():
            t = totals.setdefault(card, [0, 0, 0, 0])
            t[0] += mem
            t[1] += cores
            t[2] += 1
            t[3] += bool(whole)
        for container in p["spec"]["containers"]:
            limits = container.get("resources", {}).get("limits", {})
            units = int(limits.get("mthreads.com/sgpu-memory", 0))
            count = int(limits.get("mthreads.com/vgpu", 0))
            if count == 1 and units in (96,):
                assert all(capacity_mib[c] == S4000_MIB for c in mine), f"{who}: 96 not on S4000"
            if count == 1 and units in (128, 160):
                assert all(capacity_mib[c] == S5000_MIB for c in mine), f"{who}: {units} not on S5000"
    for card, (mem, cores, holders, whole) in totals.items():
        assert card in capacity_mib, f"{card} is no card of the fleet"
        assert mem <= capacity_mib[card], f"{card}: {mem} MiB > {capacity_mib[card]}"
        assert cores <= 16, f"{card}: {cores} cores"
        if whole:
            assert holders == 1, f"{card} is held whole but shared by {holders} pods"
    return totals
