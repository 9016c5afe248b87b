"""A card cordoned by the node's `hami.io/device-cordon`, and a card's limit of containers
(`maxInstancesPerCard`, or the node's `mthreads.com/max-instances-per-card`), as tables over
plain pods and nodes (no cluster)."""

import random
from collections import Counter

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.scheduling.test_decide import full_scan
from webhook.model import annotations as keys
from webhook.model.cards import Fleet
from webhook.model.config import AllocatorConfig, Config, MthreadsConfig
from webhook.model.pods import read_request
from webhook.scheduling import reasons
from webhook.scheduling.card_fit import card_reasons, fit_cards, may_fit
from webhook.scheduling.decide import NoFit, Placement, place
from webhook.scheduling.node_annotations import (
    Ignored,
    IgnoredEntries,
    card_settings,
    cordoned_cards,
)
from webhook.scheduling.request import request_of
from webhook.scheduling.shares import share_of
from webhook.scheduling.state import ClusterState, card_used

MT = MthreadsConfig(memory_per_card=(96, 160))
FLEET = Fleet.of(MT.memory_per_card)


# --- reading the annotations ----------------------------------------------------------------

@pytest.mark.parametrize("text, cordoned, ignored", [
    ("n-mthreads-1", {"n-mthreads-1"}, []),
    ("n-mthreads-0,n-mthreads-2", {"n-mthreads-0", "n-mthreads-2"}, []),
    (" n-mthreads-1 , n-mthreads-0", {"n-mthreads-0", "n-mthreads-1"}, []),  # trimmed, as HAMi does
    ("n-mthreads-1,", {"n-mthreads-1"}, ["'' (an empty item)"]),
    ("n-mthreads-1,,n-mthreads-3", {"n-mthreads-1", "n-mthreads-3"}, ["'' (an empty item)"]),
    ("n-mthreads-1, ", {"n-mthreads-1"}, ["' ' (an empty item)"]),
    ("n-mthreads-0 n-mthreads-1", set(), ["'n-mthreads-0 n-mthreads-1' (spaces inside an id)"]),
    ("m-mthreads-0,n-mthreads-1", {"n-mthreads-1"},
     ["'m-mthreads-0' (not a card of n: <node>-mthreads-<index>)"]),
    ("nn-mthreads-0", set(), ["'nn-mthreads-0' (not a card of n: <node>-mthreads-<index>)"]),
    ("n-mthreads-x,n-mthreads-", set(),
     ["'n-mthreads-x' (not a card of n: <node>-mthreads-<index>)",
      "'n-mthreads-' (not a card of n: <node>-mthreads-<index>)"]),
    ("GPU-3f2a", set(), ["'GPU-3f2a' (not a card of n: <node>-mthreads-<index>)"]),
    ("", set(), ["'' (an empty item)"]),
    (None, set(), []),
    (7, set(), []),
])
def test_cordon_entries_are_read_one_by_one(text, cordoned, ignored):
    assert cordoned_cards("n", text) == (frozenset(cordoned), ignored)


@pytest.mark.parametrize("annotations, limit, cordoned, ignored", [
    ({}, 16, set(), ()),
    ({keys.MAX_INSTANCES: "4"}, 4, set(), ()),
    ({keys.MAX_INSTANCES: " 1 "}, 1, set(), ()),
    ({keys.MAX_INSTANCES: "16"}, 16, set(), ()),
    ({keys.MAX_INSTANCES: "17"}, 16, set(), (
        "mthreads.com/max-instances-per-card: ignored '17' (not a whole number from 1 to 16); "
        "the limit is maxInstancesPerCard, 16",)),
    ({keys.MAX_INSTANCES: "0"}, 16, set(), (
        "mthreads.com/max-instances-per-card: ignored '0' (not a whole number from 1 to 16); "
        "the limit is maxInstancesPerCard, 16",)),
    ({keys.MAX_INSTANCES: "four"}, 16, set(), (
        "mthreads.com/max-instances-per-card: ignored 'four' (not a whole number from 1 to 16); "
        "the limit is maxInstancesPerCard, 16",)),
    ({keys.CORDON: "n-mthreads-0,,x", keys.MAX_INSTANCES: "2"}, 2, {"n-mthreads-0"}, (
        "hami.io/device-cordon: ignored '' (an empty item), "
        "'x' (not a card of n: <node>-mthreads-<index>)",)),
])
def test_node_settings(annotations, limit, cordoned, ignored):
    s = card_settings(mt_node("n", 1, annotations=annotations), 16)
    assert (s.max_instances, s.cordoned, s.ignored) == (limit, frozenset(cordoned), ignored)


LONG = "9" * 5000  # past Python's 4,300 digits of int(): it raised ValueError (issue 46, finding 7)
DEFAULTED = ("mthreads.com/max-instances-per-card: ignored {} (not a whole number from 1 to 16); "
             "the limit is maxInstancesPerCard, 16")


@pytest.mark.parametrize("raw, limit, ignored", [
    (LONG, 16, (DEFAULTED.format(f"{LONG[:64]!r}... (5000 characters)"),)),
    ("9" * 4301, 16, (DEFAULTED.format(f"{LONG[:64]!r}... (4301 characters)"),)),
    ("0" * 5000 + "4", 4, ()),
    (" " + "0" * 100_000 + "16 ", 16, ()),
])
def test_a_limit_of_any_length_is_read_in_bounds(raw, limit, ignored):
    s = card_settings(mt_node("n", 1, annotations={keys.MAX_INSTANCES: raw}), 16)
    assert (s.max_instances, s.ignored) == (limit, ignored)


def test_a_long_cordon_is_read_and_told_in_few_words():
    entries = ["n-mthreads-1", "x" * 100_000] + [f"m-mthreads-{i}" for i in range(20_000)]
    s = card_settings(mt_node("n", 2, annotations={keys.CORDON: ",".join(entries)}), 16)
    assert s.cordoned == {"n-mthreads-1"}
    (told,) = s.ignored
    assert told.startswith(f"hami.io/device-cordon: ignored {'x' * 64!r}... (100000 characters) "
                           "(not a card of n") and told.endswith(", 19993 more entries")
    assert len(told) < 1000


def test_the_config_limit_is_the_default():
    assert card_settings(mt_node("n", 1), 8).max_instances == 8


# --- the instance count ---------------------------------------------------------------------

def fill(state, make, config, times):
    """Place `make()` up to `times` times; the placements, then the first refusal (or None)."""
    placed = []
    for _ in range(times):
        p = make()
        result = place(p, request_of(p, config, FLEET), state, config)
        if isinstance(result, NoFit):
            return placed, result
        state.add(result.share)
        placed.append(result)
    return placed, None


def one_card(annotations=None, cards=1, units=96, mt=MT):
    state = ClusterState(mt)
    state.set_node(mt_node("n", cards, units, annotations=annotations))
    return state


@pytest.mark.parametrize("case, mt, annotations, fits", [
    ("default 16", MT, None, 16),
    ("config 8", MthreadsConfig(memory_per_card=(96,), max_instances_per_card=8), None, 8),
    ("node annotation 4", MT, {keys.MAX_INSTANCES: "4"}, 4),
    ("node annotation over a config of 2", MthreadsConfig(max_instances_per_card=2),
     {keys.MAX_INSTANCES: "5"}, 5),
    ("a bad annotation keeps the config's", MthreadsConfig(max_instances_per_card=3),
     {keys.MAX_INSTANCES: "99"}, 3),
])
def test_memory_only_slices_stop_at_the_limit(case, mt, annotations, fits):
    """A slice without cores reserves none: without a limit 48 two-unit slices fit one S4000."""
    config = Config(mthreads=mt)
    state = one_card(annotations, mt=mt)
    placed, refusal = fill(state, lambda: pod(slice_(2)), config, 48)
    assert len(placed) == fits
    assert refusal.rejected == {reasons.TIME_SLICING_EXHAUSTED: 1}, refusal.message
    assert refusal.message == "0/1 nodes are available: 1 CardTimeSlicingExhausted."
    assert state.card("n-mthreads-0").containers == fits
    state.remove(placed[0].share.uid)  # one leaves: one more fits
    assert len(fill(state, lambda: pod(slice_(2)), config, 2)[0]) == 1


def test_a_pod_counts_each_of_its_slices():
    config = Config(mthreads=MT)
    state = one_card({keys.MAX_INSTANCES: "5"})
    placed, _ = fill(state, lambda: pod(slice_(2), slice_(2)), config, 1)
    assert state.card("n-mthreads-0").containers == 2
    three = pod(slice_(2), slice_(2), slice_(2), slice_(2))  # 2 + 4 > 5
    assert isinstance(place(three, request_of(three, config, FLEET), state, config), NoFit)
    two = pod(slice_(2), slice_(2), slice_(2))  # 2 + 3 = 5
    assert isinstance(place(two, request_of(two, config, FLEET), state, config), Placement)


@pytest.mark.parametrize("text, containers", [
    ("n-mthreads-0,Mthreads,1024,0:;", {"n-mthreads-0": 1}),
    ("n-mthreads-0,Mthreads,1024,0:;n-mthreads-0,Mthreads,1024,0:;;", {"n-mthreads-0": 2}),
    ("n-mthreads-0,Mthreads,49152,16:n-mthreads-1,Mthreads,49152,16:;",
     {"n-mthreads-0": 1, "n-mthreads-1": 1}),  # one container, two whole cards
    ("n-mthreads-1,Mthreads,12x,2:;", {"n-mthreads-1": 1}),  # garbled: held whole
])
def test_containers_read_from_the_allocation(text, containers):
    p = pod(slice_(2), node="n", phase="Running", annotations={keys.ALLOCATED: text})
    assert {c.card: c.containers for c in share_of(p).cards} == containers


def test_mixed_with_whole_cards():
    """Two cards: a whole-card pod on one, memory-only slices fill the other to its limit;
    then the next slice waits for an instance, and a whole card for an idle card."""
    config = Config(mthreads=MT)
    state = one_card({keys.MAX_INSTANCES: "3"}, cards=2)
    placed, _ = fill(state, lambda: pod(whole(1, 96)), config, 1)
    whole_card = placed[0].devices[0][0].card
    slices, refusal = fill(state, lambda: pod(slice_(2)), config, 10)
    assert len(slices) == 3 and {s.devices[0][0].card for s in slices} != {whole_card}
    assert refusal.rejected == {reasons.TIME_SLICING_EXHAUSTED: 1}
    p = pod(whole(1, 96))
    assert place(p, request_of(p, config, FLEET), state, config).rejected == {
        reasons.EXCLUSIVE_CONFLICT: 1}
    state.remove(placed[0].share.uid)  # the whole card is given back: a slice fits there
    assert len(fill(state, lambda: pod(slice_(2)), config, 1)[0]) == 1


def test_a_card_over_its_limit_keeps_its_pods_and_takes_nothing():
    """A limit lowered under what runs evicts nothing; the card takes no new share until
    enough containers leave."""
    config = Config(mthreads=MT)
    state = one_card()
    placed, _ = fill(state, lambda: pod(slice_(2)), config, 6)
    state.set_node(mt_node("n", 1, annotations={keys.MAX_INSTANCES: "4"}))
    assert state.card("n-mthreads-0").containers == 6
    assert fill(state, lambda: pod(slice_(2)), config, 1)[1].rejected == {
        reasons.TIME_SLICING_EXHAUSTED: 1}
    for p in placed[:3]:
        state.remove(p.share.uid)
    assert len(fill(state, lambda: pod(slice_(2)), config, 2)[0]) == 1


# --- cordon ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case, p, cordon, reason", [
    ("the only card", pod(slice_(8, 4)), "n-mthreads-0", reasons.CORDONED),
    ("both cards", pod(slice_(8, 4)), "n-mthreads-0,n-mthreads-1", reasons.CORDONED),
    ("whole cards: one of two cordoned", pod(whole(2, 96)), "n-mthreads-1", reasons.CORDONED),
    ("use-gpuuuid names the cordoned card", pod(slice_(8, 4), annotations={
        keys.USE_CARDS: "n-mthreads-1"}), "n-mthreads-1", reasons.CORDONED),
    ("model first", pod(slice_(160)), "n-mthreads-0,n-mthreads-1", reasons.TYPE_MISMATCH),
])
def test_cordoned_cards_take_nothing(case, p, cordon, reason):
    state = ClusterState(MT)
    cards = 1 if case == "the only card" else 2
    state.set_node(mt_node("n", cards, 96, annotations={keys.CORDON: cordon}))
    got = place(p, request_of(p, Config(mthreads=MT), FLEET), state, Config(mthreads=MT))
    assert isinstance(got, NoFit) and got.rejected == {reason: 1}, got


def test_a_cordoned_card_keeps_its_pods_and_takes_again_when_uncordoned():
    config = Config(mthreads=MT)
    state = one_card(cards=2)
    placed, _ = fill(state, lambda: pod(slice_(32, 4)), config, 2)  # spread: one on each card
    assert {p.devices[0][0].card for p in placed} == {"n-mthreads-0", "n-mthreads-1"}
    g = state.generation
    state.set_node(mt_node("n", 2, 96, annotations={keys.CORDON: "n-mthreads-0"}))
    assert state.card("n-mthreads-0").memory_mib == 32 * 512  # its pod stays counted
    more, refusal = fill(state, lambda: pod(slice_(16, 2)), config, 10)
    assert {p.devices[0][0].card for p in more} == {"n-mthreads-1"}
    assert refusal.rejected == {reasons.INSUFFICIENT_CARD_MEMORY: 1}  # card 1 full; card 0 cordoned
    state.set_node(mt_node("n", 2, 96))  # uncordoned: the waiting pods are retried
    assert state.generation > g
    assert [p.devices[0][0].card for p in fill(state, lambda: pod(slice_(16, 2)), config, 1)[0]] \
        == ["n-mthreads-0"]


def test_the_node_room_leaves_out_cordoned_and_full_cards():
    """The fast path (NodeRoom, may_fit) never offers what fit_cards refuses."""
    state = one_card({keys.CORDON: "n-mthreads-0", keys.MAX_INSTANCES: "1"}, cards=3)
    p = pod(slice_(2))
    state.add(share_of(pod(slice_(2), node="n", phase="Running", annotations={
        keys.ALLOCATED: "n-mthreads-1,Mthreads,1024,0:;"})))
    room = state.room["n"]
    assert room.idle == 1 and room.free == ((96 * 512, 16),)  # card 2 only
    need = request_of(pod(whole(2, 96)), Config(mthreads=MT), FLEET).need
    assert not may_fit(need, room)
    assert may_fit(request_of(p, Config(mthreads=MT), FLEET).need, room)


@pytest.mark.parametrize("node_policy, gpu_policy", [("binpack", "spread"), ("spread", "binpack")])
def test_first_fit_with_cordons_and_limits_is_the_full_scan_s_choice(node_policy, gpu_policy):
    """Over a random fill where cards are cordoned and uncordoned and nodes' limits change,
    the fast path's choice is the one a scan of every node and card makes."""
    rng = random.Random(35)
    config = Config(mthreads=MT, allocator=AllocatorConfig(node_policy=node_policy,
                                                           gpu_policy=gpu_policy))
    state = ClusterState(MT)
    shapes = {f"n{i}": (rng.choice([1, 2, 4]), rng.choice([96, 160])) for i in range(8)}

    def annotate(name):
        cards, units = shapes[name]
        ann = {}
        if rng.random() < 0.5:
            ann[keys.CORDON] = ",".join(f"{name}-mthreads-{i}" for i in range(cards) if rng.random() < 0.4)
        if rng.random() < 0.5:
            ann[keys.MAX_INSTANCES] = str(rng.choice([1, 2, 3, 8]))
        state.set_node(mt_node(name, cards, units, annotations=ann))

    for name in shapes:
        annotate(name)
    placed = refused = 0
    seen: Counter[str] = Counter()
    for _ in range(500):
        if state.shares and rng.random() < 0.2:
            state.remove(rng.choice(list(state.shares)))
        if rng.random() < 0.1:
            annotate(rng.choice(list(shapes)))
        p = rng.choice([lambda: pod(slice_(rng.choice([2, 4, 8]))),
                        lambda: pod(slice_(rng.choice([8, 16]), 2)),
                        lambda: pod(slice_(2), slice_(4)),  # two instances at once
                        lambda: pod(whole(1, rng.choice([96, 160])))])()
        expected = full_scan(p, read_request(p, MT, FLEET), state, config)
        result = place(p, request_of(p, config, FLEET), state, config)
        if expected is None:
            assert isinstance(result, NoFit)
            refused += 1
            seen.update(result.rejected)
            continue
        assert isinstance(result, Placement)
        assert (result.node, tuple(dict.fromkeys(d.card for ds in result.devices for d in ds))) == expected
        state.add(result.share)
        placed += 1
    assert placed >= 50 and refused >= 50
    assert seen[reasons.CORDONED] and seen[reasons.TIME_SLICING_EXHAUSTED]  # both rules decided


# --- telling the operator what was ignored --------------------------------------------------

def node_with(name, **ann):
    n = mt_node(name, 2, annotations={getattr(keys, k): v for k, v in ann.items()})
    n["metadata"]["uid"] = f"uid-{name}"
    return n


def test_ignored_entries_are_told_once_per_change():
    told = IgnoredEntries(16)
    bad = node_with("n", CORDON="n-mthreads-0,,m-mthreads-1")
    said = told.seen("RESET", [bad, node_with("ok", CORDON="ok-mthreads-1")])
    assert said == [Ignored("n", "uid-n", "hami.io/device-cordon: ignored '' (an empty item), "
                                          "'m-mthreads-1' (not a card of n: <node>-mthreads-<index>)")]
    assert told.seen("MODIFIED", bad) == []  # a heartbeat: told already
    assert told.seen("RESET", [bad]) == []  # a relist: told already
    worse = node_with("n", CORDON="n-mthreads-0,,m-mthreads-1", MAX_INSTANCES="32")
    (said,) = told.seen("MODIFIED", worse)  # more ignored: told again, both annotations
    assert said.message.startswith("hami.io/device-cordon: ignored ") and \
        "; mthreads.com/max-instances-per-card: ignored '32'" in said.message
    assert told.seen("MODIFIED", node_with("n", CORDON="n-mthreads-0")) == []  # fixed: nothing
    assert len(told.seen("MODIFIED", bad)) == 1  # broken again: told again
    told.seen("DELETED", bad)
    assert len(told.seen("ADDED", bad)) == 1  # a node made again under the name


def test_the_warnings_told_are_counted_per_annotation():
    told = IgnoredEntries(16)
    assert told.counts == {keys.CORDON: 0, keys.MAX_INSTANCES: 0}  # both series from the start
    told.seen("RESET", [node_with("a", CORDON=",", MAX_INSTANCES="9" * 5000), node_with("b")])
    told.seen("MODIFIED", node_with("a", CORDON=",", MAX_INSTANCES="9" * 5000))  # told already
    told.seen("MODIFIED", node_with("b", MAX_INSTANCES="0"))
    assert told.counts == {keys.CORDON: 1, keys.MAX_INSTANCES: 2}
    both = card_settings(node_with("a", CORDON=",", MAX_INSTANCES="0"), 16)
    assert both.ignored_keys == (keys.CORDON, keys.MAX_INSTANCES)


# --- the card choice against the card-by-card reasons ---------------------------------------------

# the card filters in the order of docs/allocator.md's table of reasons: a node's reason is the first
# one that leaves the pod too few cards
FILTER_ORDER = (reasons.TYPE_MISMATCH, reasons.UUID_MISMATCH, reasons.CORDONED,
                reasons.EXCLUSIVE_CONFLICT, reasons.TIME_SLICING_EXHAUSTED, reasons.CORES_EXHAUSTED,
                reasons.INSUFFICIENT_CARD_MEMORY, reasons.INSUFFICIENT_CARD_CORES)

@pytest.mark.parametrize("gpu_policy", ["binpack", "spread"])
def test_the_card_choice_is_the_filters_choice(gpu_policy):
    """Over random cards (models, cordons, limits, exclusive and full cards, pinned and avoided
    ids, slices with and without cores), fit_cards chooses the card that passes every filter of
    card_reasons with the policy's best fraction used (lowest index on a tie); when none passes,
    its reason is the filter that refused the card that got furthest."""
    rng = random.Random(37)
    config = Config(mthreads=MT)
    chosen = refused = 0
    for _ in range(400):
        state = ClusterState(MT)
        cards, units = rng.choice([1, 2, 4, 8]), rng.choice([96, 160])
        ann = {keys.MAX_INSTANCES: str(rng.choice([1, 2, 4, 16]))}
        if rng.random() < 0.4:
            ann[keys.CORDON] = ",".join(f"n-mthreads-{i}" for i in range(cards) if rng.random() < 0.3)
        state.set_node(mt_node("n", cards, units, annotations=ann))
        for _ in range(rng.randrange(0, 3 * cards)):  # shares of random sizes, whole cards too
            card = rng.randrange(cards)
            if rng.random() < 0.1:
                text = f"n-mthreads-{card},Mthreads,{units * 512},100:;"
            else:
                text = f"n-mthreads-{card},Mthreads,{rng.choice([2, 8, 32]) * 512},{rng.choice([0, 2, 8])}:;"
            state.add(share_of(pod(slice_(2), node="n", phase="Running",
                                   annotations={keys.ALLOCATED: text})))
        pinned = {}
        if rng.random() < 0.2:
            pinned[keys.USE_CARDS] = f"n-mthreads-{rng.randrange(cards)}"
        if rng.random() < 0.2:
            pinned[keys.NOUSE_CARDS] = f"n-mthreads-{rng.randrange(cards)}"
        slices = [slice_(rng.choice([2, 8, 16, 64]), rng.choice([None, 1, 4, 12]))
                  for _ in range(rng.choice([1, 1, 2]))]
        need = request_of(pod(*slices, annotations=pinned), config, FLEET).need
        if need is None:  # slices the admission rules refuse
            continue
        info = state.nodes["n"]
        reason, picked = fit_cards(need, info.cards, state.card, False, gpu_policy)
        passing = [c for c, why in card_reasons(need, info.cards, state.card) if why is None]
        if not passing:
            furthest = max((why for _, why in card_reasons(need, info.cards, state.card)),
                           key=FILTER_ORDER.index)
            assert (reason, picked) == (furthest, ())
            refused += 1
            continue
        sign = -1 if gpu_policy == "binpack" else 1
        best = min(passing, key=lambda c: (sign * card_used(c.memory_mib, state.card(c.id)), c.index))
        assert (reason, picked) == (None, (best,))
        chosen += 1
    assert chosen >= 100 and refused >= 100
