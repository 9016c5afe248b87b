"""Every fit reason and both policies, as tables over plain pods and nodes (no cluster)."""

import pytest

from tests.builders import mt_node, plain, slice_, whole
from tests.builders import sched_pod as pod
from tests.harness.invariants import requested  # the checker's own reading, independent of webhook/
from webhook.model import annotations as keys
from webhook.model.cards import Fleet
from webhook.model.config import AllocatorConfig, Config, MthreadsConfig
from webhook.model.hami import encode
from webhook.model.pods import read_request
from webhook.scheduling import decide as decisions
from webhook.scheduling import reasons
from webhook.scheduling.decide import NoFit, Placement
from webhook.scheduling.request import request_of
from webhook.scheduling.shares import share_of
from webhook.scheduling.state import ClusterState

MT = MthreadsConfig(memory_per_card=(96, 160))
CONFIG = Config(mthreads=MT)
FLEET = Fleet.of(MT.memory_per_card)


def place(p, nodes, bound=(), config=CONFIG):
    state = ClusterState(MT)
    for n in nodes:
        state.set_node(n)
    for b in bound:
        state.add(share_of(b))
    return decisions.place(p, request_of(p, config, FLEET), state, config)


def bound_pod(node, devices_text, **kw):
    return pod(plain(), node=node, annotations={keys.ALLOCATED: devices_text}, phase="Running", **kw)


def bound_slice(node, card, units, cores=None, **kw):
    """A running pod as the allocator bound it: its slice's requests and its allocation."""
    return pod(slice_(units, cores), node=node, phase="Running", annotations={
        keys.ALLOCATED: f"{node}-mthreads-{card},Mthreads,{units * 512},{cores or 0}:;"}, **kw)


VGPU, MEM, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
ONE_CARD_DOWN = {MEM: "96", CORE: "16"}  # 2 S4000 cards, the device plugin reports one healthy


S4 = lambda name="s4", **kw: mt_node(name, 2, 96, **kw)  # noqa: E731
S5 = lambda name="s5", **kw: mt_node(name, 2, 160, **kw)  # noqa: E731
TOL_ALL = {"tolerations": [{"operator": "Exists"}]}


@pytest.mark.parametrize("case, p, nodes, bound, reason", [
    ("not ready", pod(slice_(8, 4)), [S4(ready=False)], [], reasons.NOT_READY),
    ("cordoned", pod(slice_(8, 4)), [S4(unschedulable=True)], [], reasons.UNSCHEDULABLE),
    ("NoSchedule taint", pod(slice_(8, 4)),
     [S4(taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])], [], reasons.TAINTED),
    ("NoExecute taint", pod(slice_(8, 4)),
     [S4(taints=[{"key": "gpu", "effect": "NoExecute"}])], [], reasons.TAINTED),
    ("toleration of another value", pod(slice_(8, 4), spec={"tolerations": [
        {"key": "gpu", "operator": "Equal", "value": "y", "effect": "NoSchedule"}]}),
     [S4(taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])], [], reasons.TAINTED),
    ("nodeSelector", pod(slice_(8, 4), spec={"nodeSelector": {"pool": "a"}}),
     [S4(labels={"pool": "b"})], [], reasons.AFFINITY),
    ("affinity In", pod(slice_(8, 4), spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}}),
     [S4(labels={"pool": "b"})], [], reasons.AFFINITY),
    ("affinity empty term matches nothing", pod(slice_(8, 4), spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}),
     [S4()], [], reasons.AFFINITY),
    ("insufficient cpu", pod(slice_(8, 4, cpu="33")), [S4()], [], reasons.INSUFFICIENT_CPU),
    ("cpu used by bound pods", pod(slice_(8, 4, cpu="2")), [S4()],
     [pod(plain(cpu="31"), node="s4")], reasons.INSUFFICIENT_CPU),
    ("insufficient memory", pod(plain(memory="129Gi"), slice_(8, 4)), [S4()], [],
     reasons.INSUFFICIENT_MEMORY),
    ("init container counts as max", pod(slice_(8, 4), init=(plain(cpu="33"),)), [S4()], [],
     reasons.INSUFFICIENT_CPU),
    ("too many pods", pod(slice_(8, 4)), [mt_node("s4", 2, 96, pods="1")],
     [pod(plain(), node="s4")], reasons.TOO_MANY_PODS),
    ("no cards", pod(slice_(8, 4)), [mt_node("cpu", 0)], [], reasons.NO_DEVICE),
    ("fewer cards than asked", pod(whole(3)), [S4()], [], reasons.NO_DEVICE),
    ("allocatable memory: one of two cards down", pod(slice_(8, 2)), [S4(allocatable=ONE_CARD_DOWN)],
     [bound_slice("s4", 0, 64, 4), bound_slice("s4", 1, 32, 4)], reasons.insufficient(MEM)),
    ("allocatable cores", pod(slice_(8, 4)), [S4(allocatable={CORE: "10"})],
     [bound_slice("s4", 0, 8, 8)], reasons.insufficient(CORE)),
    ("allocatable count", pod(slice_(8, 4)), [S4(allocatable={VGPU: "1"})],
     [bound_slice("s4", 0, 8, 4)], reasons.insufficient(VGPU)),
    ("allocatable 0: the device plugin restarting", pod(slice_(2)),
     [S4(allocatable={MEM: "0", CORE: "0"})], [], reasons.insufficient(MEM)),
    ("a whole card beyond allocatable", pod(whole(1)), [S4(allocatable=ONE_CARD_DOWN)],
     [bound_slice("s4", 0, 96, 16)], reasons.insufficient(MEM)),
    ("a pod not placed by the allocator counts too", pod(slice_(8)), [S4(allocatable=ONE_CARD_DOWN)],
     [pod(slice_(92), node="s4", phase="Running")], reasons.insufficient(MEM)),
    ("96 only on S4000", pod(slice_(96)), [S5()], [], reasons.TYPE_MISMATCH),
    ("128 only on S5000", pod(slice_(128)), [S4()], [], reasons.TYPE_MISMATCH),
    ("card-model annotation", pod(slice_(8), annotations={keys.CARD_MODEL: "MTT-S5000"}), [S4()], [],
     reasons.TYPE_MISMATCH),
    ("whole S5000 card", pod(whole(1, 160)), [S4()], [], reasons.TYPE_MISMATCH),
    ("use-gpuuuid", pod(slice_(8), annotations={keys.USE_CARDS: "other-mthreads-0"}), [S4()], [],
     reasons.UUID_MISMATCH),
    ("nouse-gpuuuid", pod(slice_(8), annotations={keys.NOUSE_CARDS: "s4-mthreads-0, s4-mthreads-1"}),
     [S4()], [], reasons.UUID_MISMATCH),
    ("exclusive on busy cards", pod(whole(1)), [S4()],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,1024,1:;"),
      bound_pod("s4", "s4-mthreads-1,Mthreads,1024,1:;")], reasons.EXCLUSIVE_CONFLICT),
    ("two whole cards, one busy", pod(whole(2)), [S4()],
     [bound_pod("s4", "s4-mthreads-1,Mthreads,1024,0:;")], reasons.EXCLUSIVE_CONFLICT),
    ("slice on exclusively held cards", pod(slice_(2)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,49152,16:;")], reasons.EXCLUSIVE_CONFLICT),
    ("coreless slice, cores all reserved", pod(slice_(2)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,1024,16:;")], reasons.CORES_EXHAUSTED),
    ("card memory", pod(slice_(64)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,20480,2:;")], reasons.INSUFFICIENT_CARD_MEMORY),
    ("card cores", pod(slice_(8, 8)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,1024,9:;")], reasons.INSUFFICIENT_CARD_CORES),
    ("slices of a pod share a card", pod(slice_(64, 4), slice_(32, 4)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,1024,1:;")], reasons.INSUFFICIENT_CARD_MEMORY),
    ("init slice counts with app slices", pod(slice_(64), init=(slice_(32),)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,1024,1:;")], reasons.INSUFFICIENT_CARD_MEMORY),
    ("garbled allocation holds its cards", pod(slice_(2)), [mt_node("s4", 1, 96)],
     [bound_pod("s4", "s4-mthreads-0,Mthreads,lots,1:;")], reasons.EXCLUSIVE_CONFLICT),
    ("garbled allocation naming no card holds the node", pod(slice_(2)), [S4()],
     [bound_pod("s4", "garbage")], reasons.EXCLUSIVE_CONFLICT),
])
def test_reason(case, p, nodes, bound, reason):
    got = place(p, nodes, bound)
    assert isinstance(got, NoFit), case
    assert got.rejected == {reason: 1}, case
    assert got.message == f"0/1 nodes are available: 1 {reason}."


ROOM = {"cpu": "32", "memory": "128Gi", "pods": "110"}  # what the node offers besides the cards


@pytest.mark.parametrize("capacity, why", [
    ({CORE: "24", MEM: "96"}, "mthreads.com/sgpu-core=24 is not a multiple of 16"),
    ({CORE: "32", MEM: "95"}, "mthreads.com/sgpu-memory=95 does not divide into 2 cards"),
    ({CORE: "16", MEM: "1"}, "1 units per card is less than the smallest slice (2)"),
])
def test_a_node_whose_capacity_is_not_cards_is_named_with_why(capacity, why):
    got = place(pod(slice_(8, 4)), [S4("ok", allocatable={MEM: "0"}),
                                    mt_node("x", capacity={**ROOM, **capacity})])
    assert got.rejected == {reasons.INCONSISTENT: 1, reasons.insufficient(MEM): 1}
    assert got.message == (f"0/2 nodes are available: 1 Insufficient {MEM}, "
                           f"1 NodeCardsInconsistent (x: {why}).")


def test_many_inconsistent_nodes_are_named_up_to_three():
    bad = [mt_node(f"x{i}", capacity={**ROOM, CORE: "8", MEM: "8"}) for i in range(5)]
    got = place(pod(slice_(8)), bad)
    why = "mthreads.com/sgpu-core=8 is not a multiple of 16"
    assert got.message == (f"0/5 nodes are available: 5 NodeCardsInconsistent (x0: {why}; "
                           f"x1: {why}; x2: {why}; 2 more).")


@pytest.mark.parametrize("case, p, node, bound, allocated", [
    ("allocatable not listing a resource bounds nothing", pod(slice_(8, 4, name="a")),
     S4(allocatable={MEM: None, CORE: None}), [bound_slice("s4", 0, 96, 16)],
     "s4-mthreads-1,Mthreads,4096,4:;"),
    ("room left under lowered allocatable", pod(slice_(32, 8, name="a")),
     S4(allocatable=ONE_CARD_DOWN), [bound_slice("s4", 0, 64, 8)], "s4-mthreads-1,Mthreads,16384,8:;"),
    ("cores not requested are not bounded", pod(slice_(8, name="a")), S4(allocatable={CORE: "0"}),
     [], "s4-mthreads-0,Mthreads,4096,0:;"),
    # the kubelet counts an init container's request as max with the app's, not added to it
    ("init slices as the kubelet counts them", pod(slice_(16, name="a"), init=(slice_(32, name="i"),)),
     S4(allocatable={MEM: "40"}), [], "s4-mthreads-0,Mthreads,16384,0:;s4-mthreads-0,Mthreads,8192,0:;"),
])
def test_placed_within_allocatable(case, p, node, bound, allocated):
    got = place(p, [node], bound)
    assert isinstance(got, Placement), (case, getattr(got, "message", None))
    assert encode(got.devices) == allocated, case


def test_allocatable_under_what_is_bound_evicts_nothing_and_takes_nothing_new():
    """A card failed under running pods: allocatable drops below the requests already bound.
    Those pods keep their cards (nothing is removed); nothing new goes there until there is room
    again; plain pods still do (they request none of it)."""
    state = ClusterState(MT)
    running = [bound_slice("s4", 0, 64, 8), bound_slice("s4", 1, 64, 8)]
    state.set_node(S4())
    for b in running:
        state.add(share_of(b))
    state.set_node(S4(allocatable=ONE_CARD_DOWN))
    assert set(state.shares) == {b["metadata"]["uid"] for b in running}
    slice_pod = pod(slice_(2))
    assert decisions.place(slice_pod, request_of(slice_pod, CONFIG, FLEET), state, CONFIG).rejected == {
        reasons.insufficient(MEM): 1}
    assert isinstance(decisions.place(pod(plain(cpu="1")), request_of(pod(plain(cpu="1")), CONFIG, FLEET), state, CONFIG), Placement)
    state.remove(running[0]["metadata"]["uid"])  # one pod ends: 64 of the 96 allocatable held
    assert isinstance(decisions.place(slice_pod, request_of(slice_pod, CONFIG, FLEET), state, CONFIG), Placement)


def test_reasons_are_counted():
    nodes = [S4("a", unschedulable=True), S4("b"), S4("c"), S5("d", ready=False)]
    got = place(pod(slice_(128)), nodes)
    assert got.message == ("0/4 nodes are available: 2 CardTypeMismatch, "
                           "1 node(s) were not ready, 1 node(s) were unschedulable.")


def test_no_nodes():
    assert place(pod(slice_(2)), []).message == "0/0 nodes are available."


@pytest.mark.parametrize("case, p, nodes, node, allocated, index", [
    ("96 goes to S4000", pod(slice_(96, 8, name="a")), [S5(), S4()], "s4",
     "s4-mthreads-0,Mthreads,49152,8:;", "0"),
    ("128 goes to S5000", pod(slice_(128, name="a")), [S4(), S5()], "s5",
     "s5-mthreads-0,Mthreads,65536,0:;", "0"),
    ("160 goes to S5000", pod(slice_(160, 16)), [S4(), S5()], "s5",
     "s5-mthreads-0,Mthreads,81920,16:;", "0"),
    ("two slices of one pod on one card", pod(slice_(32, 8), plain(), slice_(16, 4)), [S4()], "s4",
     "s4-mthreads-0,Mthreads,16384,8:;;s4-mthreads-0,Mthreads,8192,4:;", "0"),
    ("init slice first", pod(slice_(8, 2), init=(slice_(4, 1),)), [S4()], "s4",
     "s4-mthreads-0,Mthreads,2048,1:;s4-mthreads-0,Mthreads,4096,2:;", "0"),
    ("whole cards on idle cards", pod(whole(2)), [mt_node("s4", 3, 96)], "s4",
     "s4-mthreads-0,Mthreads,49152,16:s4-mthreads-1,Mthreads,49152,16:;", "0,1"),
    ("whole cards over two containers", pod(whole(1), whole(1)), [S4()], "s4",
     "s4-mthreads-0,Mthreads,49152,16:;s4-mthreads-1,Mthreads,49152,16:;", "0,1"),
    ("use-gpuuuid picks the card", pod(slice_(8), annotations={keys.USE_CARDS: "s4-mthreads-1"}),
     [S4()], "s4", "s4-mthreads-1,Mthreads,4096,0:;", "1"),
    ("nouse-gpuuuid avoids the card", pod(slice_(8), annotations={keys.NOUSE_CARDS: "s4-mthreads-0"}),
     [S4()], "s4", "s4-mthreads-1,Mthreads,4096,0:;", "1"),
    ("tolerated taint", pod(slice_(8), spec=TOL_ALL),
     [S4(taints=[{"key": "gpu", "effect": "NoSchedule"}])], "s4", "s4-mthreads-0,Mthreads,4096,0:;", "0"),
    ("PreferNoSchedule is no barrier", pod(slice_(8)),
     [S4(taints=[{"key": "gpu", "effect": "PreferNoSchedule"}])], "s4", "s4-mthreads-0,Mthreads,4096,0:;", "0"),
    ("affinity NotIn / Gt / matchFields", pod(slice_(8), spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["b"]},
                                  {"key": "gen", "operator": "Gt", "values": ["3"]},
                                  {"key": "zone", "operator": "DoesNotExist"}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["s4"]}]}]}}}}),
     [S4(labels={"pool": "a", "gen": "4"}), S4("other", labels={"pool": "a", "gen": "4"})], "s4",
     "s4-mthreads-0,Mthreads,4096,0:;", "0"),
])
def test_placement(case, p, nodes, node, allocated, index):
    got = place(p, nodes)
    assert isinstance(got, Placement), (case, got)
    assert got.node == node
    assert encode([list(d) for d in got.devices]) == allocated
    assert got.gpu_index == index


def test_plain_pod_gets_node_only():
    got = place(pod(plain(cpu="1")), [S4()])
    assert got.node == "s4" and got.devices == () and got.share.cards == ()


# policies: two nodes, "busy" already holds a slice; two cards on each
BUSY = [bound_pod("busy", "busy-mthreads-1,Mthreads,8192,4:;")]


@pytest.mark.parametrize("config_policies, annotations, node, card", [
    (("binpack", "spread"), {}, "busy", "busy-mthreads-0"),
    (("spread", "spread"), {}, "idle", "idle-mthreads-0"),
    (("binpack", "binpack"), {}, "busy", "busy-mthreads-1"),
    (("spread", "binpack"), {}, "idle", "idle-mthreads-0"),
    (("binpack", "spread"), {keys.NODE_POLICY: "spread"}, "idle", "idle-mthreads-0"),
    (("binpack", "spread"), {keys.GPU_POLICY: "binpack"}, "busy", "busy-mthreads-1"),
    (("spread", "binpack"), {keys.NODE_POLICY: "binpack", keys.GPU_POLICY: "spread"}, "busy",
     "busy-mthreads-0"),
    (("binpack", "spread"), {keys.NODE_POLICY: "nonsense"}, "busy", "busy-mthreads-0"),
])
def test_policies(config_policies, annotations, node, card):
    config = Config(mthreads=MT, allocator=AllocatorConfig(node_policy=config_policies[0],
                                                           gpu_policy=config_policies[1]))
    got = place(pod(slice_(8, 2), annotations=annotations), [S4("idle"), S4("busy")], BUSY, config)
    assert got.node == node
    assert got.devices[0][0].card == card


def test_decision_reads_no_pod():
    """The cost of a decision does not grow with the pods: it reads only the per-node and
    per-card indexes, never the table of pods."""
    state = ClusterState(MT)
    for i in range(20):
        state.set_node(S4(f"n{i}"))
    for i in range(2000):
        state.add(share_of(pod(plain(cpu="1m"), node=f"n{i % 20}")))
    state.shares = _Poisoned()  # any read of the pods table fails the test
    p = pod(slice_(8, 2))
    got = decisions.place(p, request_of(p, CONFIG, FLEET), state, CONFIG)
    assert isinstance(got, Placement)


class _Poisoned(dict):
    def __getattribute__(self, name):
        raise AssertionError(f"a decision read the pods table ({name})")


def within_allocatable(p, node, pods_on_node):
    alloc = node["status"]["allocatable"]
    for r in (VGPU, MEM, CORE):
        want = requested(p, r)
        if want and r in alloc and sum(requested(q, r) for q in pods_on_node) + want > int(alloc[r]):
            return False
    return True


def full_scan(p, request, state, config, held=None):
    """The decision as SPEC 4 states it: every node checked, the policy's best of those that fit.
    `held`: uid -> bound pod, for the test's own sums against allocatable."""
    from webhook.scheduling.card_fit import card_ids, fit_cards, need_of
    from webhook.scheduling.feasible import node_reasons
    from webhook.scheduling.score import best_node, policies
    node_policy, gpu_policy = policies(p, config)
    ann = p["metadata"].get("annotations") or {}
    need = need_of(request, card_ids(ann.get(keys.USE_CARDS)), card_ids(ann.get(keys.NOUSE_CARDS)))
    fitting, chosen = [], {}
    refused = node_reasons(p, state)
    for info in state.nodes.values():
        if refused[info.name]:
            continue
        on_node = [q for q in (held or {}).values() if q["spec"]["nodeName"] == info.name]
        if not within_allocatable(p, info.obj, on_node):
            continue
        reason, cards = fit_cards(need, info.cards, state.card, state.node_held_whole(info.name),
                                  gpu_policy)
        if reason is None:
            fitting.append(info)
            chosen[info.name] = cards
    if not fitting:
        return None
    node = best_node(fitting, state, request.kind, node_policy)
    return node.name, tuple(c.id for c in chosen[node.name])


def lowered(rng, cards, units):
    """A random allocatable below capacity (some cards reported unhealthy), or none lowered."""
    down = rng.choice([0, 0, 1, cards])
    return rng.choice([{}, {MEM: str(units * (cards - down)), CORE: str(16 * (cards - down))},
                       {MEM: str(units * (cards - down))}, {CORE: str(16 * (cards - down))},
                       {VGPU: str(rng.choice([1, 3, 8]))}, {MEM: None, CORE: None}])


@pytest.mark.parametrize("node_policy, gpu_policy", [("binpack", "spread"), ("spread", "binpack"),
                                                     ("binpack", "binpack"), ("spread", "spread")])
def test_first_fit_in_policy_order_is_the_full_scan_s_choice(node_policy, gpu_policy):
    """place() tries nodes in the policy's order and stops at the first fit; over a random fill
    with some pods leaving again, and nodes whose allocatable is lowered and restored as it
    goes, every choice is the one a scan of all nodes makes, and no node's allocatable is
    exceeded by a pod placed under it."""
    import random
    rng = random.Random(7)
    config = Config(mthreads=MT, allocator=AllocatorConfig(node_policy=node_policy, gpu_policy=gpu_policy))
    state = ClusterState(MT)
    shapes = {f"n{i}": (rng.choice([2, 4]), rng.choice([96, 160])) for i in range(12)}
    for name, (cards, units) in shapes.items():
        state.set_node(mt_node(name, cards, units, allocatable=lowered(rng, cards, units)))
    placed = refused = bounded = 0
    held = {}
    for _ in range(400):
        if held and rng.random() < 0.15:
            del held[state.remove(rng.choice(list(held))).uid]
        if rng.random() < 0.05:  # a device plugin reports a card unhealthy, or healthy again
            name = rng.choice(list(shapes))
            state.set_node(mt_node(name, *shapes[name], allocatable=lowered(rng, *shapes[name])))
        c = rng.choice([slice_(rng.choice([2, 8, 16, 32, 64]), rng.choice([None, 2, 4, 8])),
                        slice_(rng.choice([96, 128])), whole(rng.choice([1, 2]), rng.choice([96, 160]))])
        p = pod(c)
        request = read_request(p, MT, FLEET)
        expected = full_scan(p, request, state, config, held)
        bounded += expected != full_scan(p, request, state, config)  # the cards alone
        result = decisions.place(p, request_of(p, config, FLEET), state, config)
        if expected is None:
            assert isinstance(result, NoFit)
            refused += 1
            continue
        assert isinstance(result, Placement)
        assert (result.node, tuple(dict.fromkeys(d.card for ds in result.devices for d in ds))) == expected
        state.add(result.share)
        held[result.share.uid] = {**p, "spec": {**p["spec"], "nodeName": result.node}}
        placed += 1
    assert placed >= 30 and refused >= 30  # the fleet filled up: both paths were taken
    assert bounded >= 20  # allocatable, not the cards, decided that often
