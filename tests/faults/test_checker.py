"""The tests' invariant checker (tests/harness/invariants.py, with the fault rig's reading of
its pods' labels) on made-up pods: it must see every kind of loss it claims to."""

from __future__ import annotations

from tests.harness.invariants import parse_allocated

from .rig import ALLOCATED, KIND_LABEL, TO_ALLOCATE, Tracker, card_problems

CAPS = {f"n1-mthreads-{i}": 96 * 512 for i in range(2)} | {"n2-mthreads-0": 160 * 512}


def bound(name: str, node: str, allocated: str, kind: str = "slice", uid: str | None = None,
          **ann) -> dict:
    index = ",".join(dict.fromkeys(c.rsplit("-", 1)[1] for c, _, _ in parse_allocated(allocated)))
    annotations = {ALLOCATED: allocated, "mthreads.com/predicate-node": node,
                   "hami.io/vgpu-node": node, "mthreads.com/gpu-index": index,
                   "hami.io/bind-phase": "allocating", TO_ALLOCATE: "x", **ann}
    return {"metadata": {"name": name, "uid": uid or name, "labels": {KIND_LABEL: kind},
                         "annotations": annotations},
            "spec": {"nodeName": node, "schedulerName": "hami-scheduler"}}


def test_parse_allocated_reads_containers_and_cards():
    assert parse_allocated("c0,Mthreads,16384,4:;c0,Mthreads,2048,1:;") == [
        ("c0", 16384, 4), ("c0", 2048, 1)]
    assert parse_allocated("a,Mthreads,49152,16:b,Mthreads,49152,16:;;") == [
        ("a", 49152, 16), ("b", 49152, 16)]


def test_a_full_fleet_within_capacity_has_no_problem():
    pods = [bound("a", "n1", "n1-mthreads-0,Mthreads,32768,8:;"),
            bound("b", "n1", "n1-mthreads-0,Mthreads,16384,8:;"),
            bound("w", "n1", "n1-mthreads-1,Mthreads,49152,16:;", kind="whole")]
    assert card_problems(pods, CAPS) == []


def test_over_memory_over_cores_shared_exclusive_and_wrong_node_are_seen():
    pods = [bound("a", "n1", "n1-mthreads-0,Mthreads,32768,12:;"),
            bound("b", "n1", "n1-mthreads-0,Mthreads,32768,8:;"),
            bound("w", "n1", "n1-mthreads-1,Mthreads,49152,16:;", kind="whole"),
            bound("s", "n1", "n1-mthreads-1,Mthreads,2048,0:;"),
            bound("x", "n2", "n1-mthreads-0,Mthreads,2048,0:;")]
    text = "\n".join(card_problems(pods, CAPS))
    assert "n1-mthreads-0: 67584 MiB allocated > 49152" in text
    assert "n1-mthreads-0: 20 cores allocated > 16" in text
    assert "n1-mthreads-1: held exclusively but shared by 2 pods" in text
    assert "x: card n1-mthreads-0 is not on its node n2" in text


def test_exclusive_pod_with_a_partial_card_or_too_few_cards_is_seen():
    pods = [bound("w", "n1", "n1-mthreads-0,Mthreads,2048,16:;", kind="whole"),
            bound("w2", "n1", "n1-mthreads-1,Mthreads,49152,16:;", kind="whole",
                  **{"mthreads.com/request-gpu-num": "2"})]
    text = "\n".join(card_problems(pods, CAPS))
    assert "w: exclusive pod holds 2048 MiB/16 cores" in text
    assert "w2: asked for 2 whole cards" in text


def test_the_watch_sees_a_second_binding_a_changed_allocation_and_a_half_done_pod():
    t = Tracker(kube=None, namespace="ns", caps=CAPS)
    first = bound("a", "n1", "n1-mthreads-0,Mthreads,2048,1:;")
    t._event("ADDED", first)
    t._event("MODIFIED", bound("a", "n2", "n2-mthreads-0,Mthreads,2048,1:;"))
    assert any("nodeName n1 -> n2" in v for v in t.violations)
    assert any("allocation changed" in v for v in t.violations)
    half = bound("h", "n1", "n1-mthreads-1,Mthreads,2048,1:;")
    del half["spec"]["nodeName"]
    t._event("ADDED", half)
    assert any("h: allocation" in v and "without a node" in v for v in t.violations)
    plain = {"metadata": {"name": "p", "uid": "p"}, "spec": {"schedulerName": "default-scheduler"}}
    t._event("ADDED", plain)
    assert any("p: stored without the webhook's mutation" in v for v in t.violations)


def test_the_watch_checks_the_cards_at_every_binding():
    t = Tracker(kube=None, namespace="ns", caps=CAPS)
    t._event("ADDED", bound("a", "n1", "n1-mthreads-0,Mthreads,40960,8:;"))
    assert t.violations == []
    t._event("ADDED", bound("b", "n1", "n1-mthreads-0,Mthreads,16384,8:;"))
    assert t.violations == ["watch: n1-mthreads-0: 57344 MiB allocated > 49152"]
    t._event("DELETED", bound("a", "n1", "n1-mthreads-0,Mthreads,40960,8:;"))
    t._event("ADDED", bound("c", "n1", "n1-mthreads-0,Mthreads,2048,0:;"))
    assert len(t.violations) == 1  # a's share is gone, b + c fit


def test_wrong_index_phase_unbound_allocation_scattered_slices_and_model_are_seen():
    wrong_index = bound("i", "n1", "n1-mthreads-0,Mthreads,2048,1:;", **{"mthreads.com/gpu-index": "1"})
    no_phase = bound("f", "n1", "n1-mthreads-0,Mthreads,2048,1:;", **{"hami.io/bind-phase": "done"})
    unbound = bound("u", "n1", "n1-mthreads-0,Mthreads,2048,1:;")
    del unbound["spec"]["nodeName"]
    scattered = bound("s", "n1", "n1-mthreads-0,Mthreads,2048,1:;n1-mthreads-1,Mthreads,2048,1:;")
    s5000 = bound("m", "n2", "n2-mthreads-0,Mthreads,49152,0:;")
    s5000["spec"]["containers"] = [{"name": "c", "resources": {"limits": {
        "mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "96"}}}]
    text = "\n".join(card_problems([wrong_index, no_phase, unbound, scattered, s5000], CAPS))
    assert "i: gpu-index '1', the cards say '0'" in text
    assert "f: bind-phase 'done'" in text
    assert "u: unbound but allocated" in text
    assert "s: slices over several cards" in text
    assert "m: 96 units not on an S4000" in text


def _requesting(name: str, node: str | None, memory: int, cores: int = 0, phase: str = "Running",
                init_memory: int = 0) -> dict:
    req = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": str(memory),
           "mthreads.com/sgpu-core": str(cores)}
    spec = {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": req}}]}
    if init_memory:
        spec["initContainers"] = [{"name": "i", "resources": {
            "requests": {"mthreads.com/sgpu-memory": str(init_memory)}}}]
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def _node(name: str, **alloc) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {
        f"mthreads.com/{k.replace('_', '-')}": str(v) for k, v in alloc.items()}}}


def test_allocatable_exceeded_is_seen_and_ended_pods_hold_nothing():
    from tests.harness.invariants import allocatable_problems
    nodes = [_node("n1", sgpu_memory=96, sgpu_core=16, vgpu=2)]
    ok = [_requesting("a", "n1", 64, 8), _requesting("b", "n1", 32, 8),
          _requesting("done", "n1", 96, 16, phase="Succeeded"), _requesting("pending", None, 96)]
    totals, problems = allocatable_problems(ok, nodes)
    assert problems == [] and totals["n1"] == {
        "mthreads.com/vgpu": 2, "mthreads.com/sgpu-memory": 96, "mthreads.com/sgpu-core": 16}
    over = ok + [_requesting("c", "n1", 2, 1)]
    assert allocatable_problems(over, nodes)[1] == [
        "n1: mthreads.com/vgpu 3 requested > allocatable 2",
        "n1: mthreads.com/sgpu-memory 98 requested > allocatable 96",
        "n1: mthreads.com/sgpu-core 17 requested > allocatable 16"]
    # init containers count as the kubelet counts them: max with the app sum
    assert allocatable_problems([_requesting("i", "n1", 8, init_memory=96)], nodes)[1] == []
    assert allocatable_problems([_requesting("i", "n1", 8, init_memory=97)], nodes)[1] == [
        "n1: mthreads.com/sgpu-memory 97 requested > allocatable 96"]


def test_allocatable_below_pods_bound_before_is_held_only_once_a_pod_is_bound_since():
    from tests.harness.invariants import allocatable_problems
    nodes = [_node("n1", sgpu_memory=32)]
    before = [_requesting("a", "n1", 64)]
    assert allocatable_problems(before, nodes, bound_before={"a"})[1] == []
    assert allocatable_problems(before + [_requesting("b", "n1", 2)], nodes, bound_before={"a"})[1] == [
        "n1: mthreads.com/sgpu-memory 66 requested > allocatable 32"]
