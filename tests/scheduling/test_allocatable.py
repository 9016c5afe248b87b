"""The pure parts of the allocatable bound: the requests as the kubelet sums them, what a
node's allocatable admits, the check, and the node's usage kept as pods come and go."""

import logging

import pytest

from tests.builders import mt_node, plain, slice_, whole
from tests.builders import sched_pod as pod
from webhook.model.config import MthreadsConfig
from webhook.model.pods import resource_names
from webhook.scheduling import reasons
from webhook.scheduling.allocatable import allocatable_reason
from webhook.scheduling.resources import Devices, device_allocatable, device_requests
from webhook.scheduling.shares import share_of
from webhook.scheduling.state import ClusterState

NAMES = resource_names(MthreadsConfig())
VGPU, MEM, CORE = NAMES


def limits_only(memory: int) -> dict:
    return {"name": "l", "resources": {"limits": {VGPU: "1", MEM: str(memory)}}}


@pytest.mark.parametrize("case, p, want", [
    ("no Mthreads resources", pod(plain(cpu="1")), Devices()),
    ("a slice", pod(slice_(8, 4)), Devices(1, 8, 4)),
    ("a slice without cores", pod(slice_(8)), Devices(1, 8, 0)),
    ("two slices add up", pod(slice_(8, 4), slice_(16, 2)), Devices(2, 24, 6)),
    ("whole cards in the webhook's form", pod(whole(2)), Devices(2, 192, 32)),
    ("init: max with the app sum, each resource alone",
     pod(slice_(8, 4), init=(slice_(32, 1),)), Devices(1, 32, 4)),
    ("limits stand in for missing requests", pod(limits_only(16)), Devices(1, 16, 0)),
    ("overhead is added", pod(slice_(8), spec={"overhead": {MEM: "2"}}), Devices(1, 10, 0)),
])
def test_device_requests(case, p, want):
    assert device_requests(p, NAMES) == want, case


@pytest.mark.parametrize("case, node, want", [
    ("as capacity", mt_node("n", 2, 96), (None, 192, 32)),
    ("lowered", mt_node("n", 2, 96, allocatable={MEM: "96", CORE: "16"}), (None, 96, 16)),
    ("the count listed", mt_node("n", 2, 96, allocatable={VGPU: "2"}), (2, 192, 32)),
    ("zero while the plugin restarts", mt_node("n", 2, 96, allocatable={MEM: "0", CORE: "0"}),
     (None, 0, 0)),
    ("not listed: no bound", mt_node("n", 2, 96, allocatable={MEM: None}), (None, None, 32)),
    ("a quantity with a suffix", mt_node("n", 2, 96, allocatable={MEM: "1k"}), (None, 1000, 32)),
    ("unreadable counts as none left", mt_node("n", 2, 96, allocatable={MEM: "lots"}), (None, 0, 32)),
])
def test_device_allocatable(case, node, want):
    assert device_allocatable(node, NAMES) == want, case


def test_no_allocatable_at_all_means_capacity():
    node = mt_node("n", 2, 96)
    del node["status"]["allocatable"]
    assert device_allocatable(node, NAMES) == (None, 192, 32)


@pytest.mark.parametrize("case, wants, used, limits, want", [
    ("fits exactly", Devices(1, 8, 4), Devices(1, 88, 12), (None, 96, 16), None),
    ("memory over", Devices(1, 9, 4), Devices(1, 88, 12), (None, 96, 16), reasons.insufficient(MEM)),
    ("cores over", Devices(1, 8, 5), Devices(1, 88, 12), (None, 96, 16), reasons.insufficient(CORE)),
    ("count first", Devices(1, 96, 16), Devices(2, 96, 16), (2, 96, 16), reasons.insufficient(VGPU)),
    ("not requested: not refused", Devices(1, 8, 0), Devices(1, 8, 20), (None, 96, 16), None),
    ("already over, nothing asked of it", Devices(1, 8, 0), Devices(0, 0, 32), (None, 96, 16), None),
    ("not listed: not refused", Devices(1, 500, 4), Devices(), (None, None, 16), None),
])
def test_allocatable_reason(case, wants, used, limits, want):
    assert allocatable_reason(wants, used, limits, NAMES) == want, case


def test_node_usage_follows_the_pods_and_their_requests():
    state = ClusterState(MthreadsConfig())
    state.set_node(mt_node("n", 2, 96))
    ours = pod(slice_(8, 4), node="n", annotations={
        "hami.io/mthreads-vgpu-devices-allocated": "n-mthreads-0,Mthreads,4096,4:;"})
    theirs = pod(slice_(16), node="n")  # bound by someone else: counted, holds no card
    for p in (ours, theirs, ours):  # twice: keyed by uid
        state.add(share_of(p, NAMES))
    assert state.devices_on("n") == Devices(2, 24, 4)
    state.remove(ours["metadata"]["uid"])
    state.remove(ours["metadata"]["uid"])
    assert state.devices_on("n") == Devices(1, 16, 0)
    state.remove(theirs["metadata"]["uid"])
    assert state.devices_on("n") == Devices()


def test_configured_resource_names_are_the_ones_read():
    mt = MthreadsConfig(count_resource="example.com/gpu", memory_resource="example.com/mem",
                        core_resource="example.com/core")
    state = ClusterState(mt)
    state.set_node(mt_node("n", 0, capacity={"example.com/core": "32", "example.com/mem": "192"}))
    assert state.nodes["n"].device_limits == (None, 192, 32)
    p = pod({"name": "c", "resources": {"requests": {"example.com/gpu": "1", "example.com/mem": "8"}}},
            node="n")
    state.add(share_of(p, state.names))
    assert state.devices_on("n") == Devices(1, 8, 0)


def test_an_inconsistent_node_is_logged_once_per_change(caplog):
    state = ClusterState(MthreadsConfig())
    bad = mt_node("x", capacity={CORE: "40", MEM: "96"})
    with caplog.at_level(logging.INFO, logger="webhook.scheduling.state"):
        state.set_node(bad)
        state.set_node(bad)  # a heartbeat: said once
        state.set_node(mt_node("x", 2, 96))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["node x: mthreads.com/sgpu-core=40 is not a multiple of 16; no Mthreads pod "
                     "goes there until its capacity reads as cards",
                     "node x: its capacity reads as cards again",
                     f"node x: now 2 cards of 96 units, allocatable {MEM}=192 {CORE}=32"]


def test_a_change_of_cards_or_allocatable_is_logged_once(caplog):
    state = ClusterState(MthreadsConfig())
    with caplog.at_level(logging.INFO, logger="webhook.scheduling.state"):
        state.set_node(mt_node("n", 2, 96))  # first sight (a list): no line per node
        state.set_node(mt_node("n", 2, 96, allocatable={MEM: "96", CORE: "16"}))
        state.set_node(mt_node("n", 2, 96, allocatable={MEM: "96", CORE: "16"}))  # a heartbeat
        state.set_node(mt_node("n", 0, capacity={MEM: "0", CORE: "0"}))
    assert [r.getMessage() for r in caplog.records] == [
        f"node n: now 2 cards of 96 units, allocatable {MEM}=96 {CORE}=16",
        f"node n: now no cards, allocatable {MEM}=0 {CORE}=0"]
