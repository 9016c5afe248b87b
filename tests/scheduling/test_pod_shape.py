"""A pod's shape (webhook/scheduling/pod_shape.py) and the answers request_of keeps per shape
(webhook/scheduling/request.py): replicas share one answer, and nothing a request is read from
is left out of the shape."""

import copy

import pytest

from tests.builders import sched_pod, slice_, whole
from webhook.model import annotations as keys
from webhook.model.cards import Fleet
from webhook.model.config import Config, MthreadsConfig
from webhook.scheduling import request
from webhook.scheduling.pod_shape import shape_of
from webhook.scheduling.request import request_of

MT = MthreadsConfig(memory_per_card=(96, 160))
CONFIG = Config(mthreads=MT)
FLEET = Fleet.of(MT.memory_per_card)


def base() -> dict:
    p = sched_pod(slice_(16, 4, name="main", cpu="250m"), init=(slice_(8, name="setup"),),
                  name="web-1", annotations={keys.CARD_MODEL: "MTT S4000"})
    p["metadata"]["labels"] = {"app": "web"}
    return p


def _set(path: tuple, value):
    def change(p: dict) -> None:
        target = p
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


def _drop(path: tuple):
    def change(p: dict) -> None:
        target = p
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]
    return change


LIMITS = ("spec", "containers", 0, "resources", "limits")
REQUESTS = ("spec", "containers", 0, "resources", "requests")
ANNOTATIONS = ("metadata", "annotations")


@pytest.mark.parametrize("change", [
    _set(("metadata", "name"), "web-2"),
    _set(("metadata", "uid"), "another"),
    _set(("metadata", "labels"), {"app": "other"}),
    _set(ANNOTATIONS + ("team",), "a"),  # an annotation no request reads
    _set(("spec", "containers", 0, "image"), "nginx"),
    _set(("spec", "nodeSelector"), {"zone": "a"}),
], ids=["name", "uid", "labels", "other annotation", "image", "node selector"])
def test_replicas_share_a_shape_and_one_answer(change):
    a, b = base(), base()
    change(b)
    assert shape_of(a) == shape_of(b) is not None
    assert request_of(a, CONFIG, FLEET) is request_of(b, CONFIG, FLEET)


@pytest.mark.parametrize("change", [
    _set(("spec", "containers", 0, "name"), "other"),  # messages name the container
    _set(LIMITS + ("mthreads.com/sgpu-memory",), "32"),
    _set(REQUESTS + ("cpu",), "500m"),
    _drop(REQUESTS + ("cpu",)),
    _set(LIMITS + ("cpu",), "250m"),  # the same item in limits instead of requests
    _set(ANNOTATIONS + (keys.CARD_MODEL,), "MTT S5000"),
    _drop(ANNOTATIONS + (keys.CARD_MODEL,)),
    _set(ANNOTATIONS + (keys.CARD_MODEL,), ""),  # given but empty: not the same as absent
    _set(ANNOTATIONS + (keys.USE_CARDS,), "n0-mthreads-1"),
    _set(ANNOTATIONS + (keys.NOUSE_CARDS,), "n0-mthreads-1"),
    _set(("spec", "overhead"), {"cpu": "100m"}),
    lambda p: p["spec"]["containers"].append(p["spec"].pop("initContainers")[0]),  # init -> app
    lambda p: p["spec"]["containers"].append(whole(1, name="more")),
], ids=["container name", "limit", "request", "no request", "limit not request", "model",
        "no model", "empty model", "use", "nouse", "overhead", "init to app", "one more container"])
def test_what_a_request_is_read_from_makes_another_shape(change):
    a, b = base(), base()
    change(b)
    assert shape_of(a) != shape_of(b) and shape_of(b) is not None


@pytest.mark.parametrize("change", [
    _set(LIMITS + ("mthreads.com/vgpu",), 1),
    _set(LIMITS + ("mthreads.com/vgpu",), True),
    _set(LIMITS + ("mthreads.com/vgpu",), 1.0),
    _set(LIMITS + ("mthreads.com/vgpu",), None),
    _set(ANNOTATIONS + (keys.CARD_MODEL,), None),
    _set(("spec", "containers", 0, "name"), None),
    _set(("spec", "containers", 0, "resources"), ["limits"]),
    _set(("spec", "containers"), {"main": {}}),
    _set(("spec", "overhead"), ["cpu"]),
    _set(("metadata", "annotations"), "x"),
], ids=["int", "bool", "float", "null", "null annotation", "null name", "resources list",
        "containers dict", "overhead list", "annotations text"])
def test_a_pod_with_a_value_that_is_not_a_string_has_no_shape(change):
    p = base()
    change(p)
    assert shape_of(p) is None


def test_values_equal_in_python_but_read_differently_get_their_own_answers():
    # "1" first: an answer kept for it must not serve 1.0 or True (1 == 1.0 == True)
    answers = []
    for value in ("1", 1.0, True, 1):
        p = sched_pod(slice_(16, 4, name="main"))
        p["spec"]["containers"][0]["resources"]["limits"]["mthreads.com/vgpu"] = value
        p["spec"]["containers"][0]["resources"]["requests"]["mthreads.com/vgpu"] = value
        answers.append(request_of(p, CONFIG, FLEET).invalid is None)
    assert answers == [True, False, False, True]


def test_kept_answers_are_the_answers_read_afresh():
    pods = [base()]
    for memory in (2, 8, 16, 32, 64, 96, 97):
        for cores in (None, 1, 16, 17):
            pods.append(sched_pod(slice_(memory, cores, name="c"), name=f"s{memory}-{cores}"))
    pods += [sched_pod(whole(n, units, name="c"), name=f"w{n}-{units}") for n in (1, 2, 9)
             for units in (96, 160)]
    for p in pods + copy.deepcopy(pods):  # the second pass is answered from the table
        fresh = request._read(p, MT, FLEET)
        kept = request_of(p, CONFIG, FLEET)
        assert kept == fresh, p["metadata"]["name"]


def test_another_config_is_not_answered_from_the_first_ones_table():
    p = sched_pod(slice_(16, 4, name="main"))
    on = request_of(p, CONFIG, FLEET)
    off = request_of(copy.deepcopy(p), Config(mthreads=MthreadsConfig(enabled=False)))
    assert on.need is not None and off.request is None and off.need is None
