"""Every numbered denial of SPEC 3, for each card model, as tables."""

import pytest

from tests.builders import CORE, COUNT, MEMORY, binding, pod
from tests.builders import container as c
from webhook.admission.validate import Rules, check_binding, check_create, check_update
from webhook.model.annotations import ALLOCATION_KEYS
from webhook.model.config import AllocatorConfig, Config, MthreadsConfig, parse_config
from webhook.model.pods import InvalidRequest, Kind, parse_quantity

ALLOCATOR = "system:serviceaccount:kube-system:mthreads-allocator"
S4000, S5000, MIXED = (96,), (160,), (96, 160)


def rules(memory=S4000, **kw) -> Rules:
    return Rules.of(Config(mthreads=MthreadsConfig(memory_per_card=memory), **kw))


def denial(p, memory=S4000, user="alice") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as e:
        check_create(p, rules(memory), user)
    return e.value


@pytest.mark.parametrize("raw, value", [
    ("32", 32), (32, 32), ("1", 1), ("2147483647", 2**31 - 1),
    ("16Gi", None), ("1.5", None), ("0", None), ("-1", None), ("2147483648", None),
    ("032", None), (" 32", None), ("32 ", None), ("+32", None), ("1e3", None), ("", None),
    (0, None), (-1, None), (2**31, None), (1.0, None), (True, None), (None, None), ([1], None),
    ("99999999999999999999", None),
])
def test_parse_quantity(raw, value):
    assert parse_quantity(raw) == value


# (memoryPerCard, pod, rule, words the message must contain)
DENIED = [
    # rule 1: not a plain positive integer
    (S4000, pod(c("train", 1, "16Gi")), 1, ['container "train"', f'{MEMORY}="16Gi"', "plain positive integer"]),
    (S4000, pod(c("train", 1, 32, "1.5")), 1, [f'{CORE}="1.5"']),
    (S4000, pod(c("train", "0")), 1, [f'{COUNT}="0"']),
    (S4000, pod(c("train", "-1")), 1, [f'{COUNT}="-1"']),
    (S4000, pod(c("train", 1, "2147483648")), 1, ["2147483648", "at most 2147483647"]),
    # rule 2: not on the whitelist of the configured models
    (S4000, pod(c("train", 1, 3)), 2,
     ['container "train": mthreads.com/sgpu-memory=3 is not valid; valid values are '
      '2, 4, 8, 16, 32, 64, 96 (memoryPerCard [96])']),
    (S4000, pod(c("train", 1, 128)), 2, ["=128 is not valid", "(memoryPerCard [96])"]),
    (S4000, pod(c("train", 1, 160)), 2, ["=160 is not valid"]),
    (S5000, pod(c("train", 1, 96)), 2, ["=96 is not valid", "2, 4, 8, 16, 32, 64, 128, 160 (memoryPerCard [160])"]),
    (S5000, pod(c("train", 1, 48)), 2, ["=48 is not valid"]),
    (MIXED, pod(c("train", 1, 100)), 2, ["2, 4, 8, 16, 32, 64, 96, 128, 160 (memoryPerCard [96, 160])"]),
    (MIXED, pod(c("train", 1, 128), annotations={"mthreads.com/card-model": "MTT-S4000"}), 2,
     ["=128 is not valid", "(MTT-S4000, 96 units per card)"]),
    (MIXED, pod(c("train", 1, 96), annotations={"mthreads.com/card-model": "MTT-S5000"}), 2,
     ["=96 is not valid", "(MTT-S5000, 160 units per card)"]),
    ((120,), pod(c("train", 1, 96)), 2, ["2, 4, 8, 16, 32, 64, 120 (memoryPerCard [120])"]),
    # rule 3: cores outside 1..16
    (S4000, pod(c("train", 1, 32, 17)), 3, [f'container "train": {CORE}=17 is not valid', "1 to 16"]),
    (S5000, pod(c("train", 1, 32, 32)), 3, [f"{CORE}=32"]),
    # rule 4: memory or cores without a count, or over several cards
    (S4000, pod(c("train", None, 32)), 4, [f"{MEMORY} is set without {COUNT}"]),
    (S4000, pod(c("train", None, None, 8)), 4, [f"{CORE} is set without {COUNT}"]),
    (S4000, pod(c("train", 2, 32)), 4, [f"{COUNT}=2", "sharing over several cards is not supported"]),
    (S4000, pod(c("train", 2, 32, 8)), 4, ["sharing over several cards"]),
    (S4000, pod(c("train", 2, 96, 32)), 4, ["sharing over several cards"]),  # 96 != 2 x 96
    (S4000, pod(c("train", 2, 192, 16)), 4, ["sharing over several cards"]),  # cores != 2 x 16
    (S5000, pod(c("train", 2, 192, 32)), 4, ["sharing over several cards"]),  # S4000's form on S5000
    # rule 5: cores without memory
    (S4000, pod(c("train", 1, None, 8)), 5, [f"{CORE}=8 is set without {MEMORY}"]),
    # rule 6: the vendor's whole-card resource together with ours
    (S4000, pod(c("train", 1, extra={"mthreads.com/gpu": "1"})), 6, ["mthreads.com/gpu cannot be combined"]),
    (S4000, pod(c("train", 1, 32, extra={"mthreads.com/gpu": "1"})), 6, ['container "train"']),
    # rule 7: more than one card shared in one pod
    (S4000, pod(c("a", 1, 64, 8), c("b", 1, 64, 8)), 7,
     ['containers "a", "b"', "128 units", "MTT-S4000 has 96 units", "only one Mthreads card can be shared"]),
    (S4000, pod(c("a", 1, 32, 8), c("b", 1, 32, 9)), 7, ["17 of mthreads.com/sgpu-core"]),
    (S4000, pod(c("a", 1, 32, 8), c("b", 1)), 7, ['container "b" asks for whole cards beside a shared card']),
    (S4000, pod(c("a", 2), c("b", 1, 32)), 7, ['container "a" asks for whole cards']),
    (S4000, pod(c("b", 1, 32, 8), init=(c("setup", 1, 96, 8),)), 7, ['containers "setup", "b"']),
    (MIXED, pod(c("a", 1, 96), c("b", 1, 128)), 7, ["MTT-S4000 has 96 units", "MTT-S5000 has 160 units"]),
    (S5000, pod(c("a", 1, 128, 8), c("b", 1, 64, 8)), 7, ["192 units"]),
    (MIXED, pod(c("a", 1, 96, 16), c("b", 1, 320, 32)), 7, ['container "a" asks for whole cards beside']),
    (MIXED, pod(c("a", 1, 96, 16), c("b", 2, 320, 32)), 7, ["whole cards of different models"]),
    # rule 8: privileged containers see every card
    (S4000, pod(c("train", 1, 32, 8, privileged=True)), 8, ['container "train"', "privileged"]),
    (S4000, pod(c("train", 1, 32, 8), c("side", privileged=True)), 8, ['container "side"']),
    (S4000, pod(c("train", 1), init=(c("init", privileged=True),)), 8, ['container "init"']),
    # rule 9: bound before the allocator saw it
    (S4000, pod(c("train", 1, 32), node="node-1"), 9, ["spec.nodeName='node-1'", "allocator"]),
    # rule 10: allocation annotations on CREATE, on any pod
    (S4000, pod(c("train", 1, 32), annotations={"hami.io/bind-phase": "allocating"}), 10,
     ["hami.io/bind-phase"]),
    (S4000, pod(c("web"), annotations={"hami.io/mthreads-vgpu-devices-allocated": "x,Mthreads,1,1:;"}), 10,
     ["hami.io/mthreads-vgpu-devices-allocated"]),
    (S4000, pod(c("web"), annotations={"mthreads.com/gpu-index": "0"}), 10, ["mthreads.com/gpu-index"]),
    # rule 11: a model the fleet does not have
    (S4000, pod(c("train", 1, 32), annotations={"mthreads.com/card-model": "MTT-S5000"}), 11,
     ["'MTT-S5000' names no configured card model", "configured: MTT-S4000"]),
    (MIXED, pod(c("train", 1), annotations={"mthreads.com/card-model": "S4000"}), 11,
     ["configured: MTT-S4000, MTT-S5000"]),
]


@pytest.mark.parametrize("memory, p, rule, words", DENIED)
def test_denied(memory, p, rule, words):
    e = denial(p, memory)
    assert e.rule == rule, e.message
    for w in words:
        assert w in e.message


# (memoryPerCard, pod, kind, cards, model names that can serve it)
ALLOWED = [
    (S4000, pod(c("gpushare-pod-1", 1, 32, 8)), Kind.SLICE, 1, ["MTT-S4000"]),  # the seed's pod
    (S4000, pod(c("train", 1, 32)), Kind.SLICE, 1, ["MTT-S4000"]),  # memory without cores
    (S4000, pod(c("train", 1, 96)), Kind.SLICE, 1, ["MTT-S4000"]),  # all memory, no cores
    (S4000, pod(c("train", 1, 2, 16)), Kind.SLICE, 1, ["MTT-S4000"]),  # all cores, little memory
    (S4000, pod(c("train", 1)), Kind.WHOLE, 1, ["MTT-S4000"]),
    (S4000, pod(c("train", 2)), Kind.WHOLE, 2, ["MTT-S4000"]),
    (S4000, pod(c("train", 1, 96, 16)), Kind.WHOLE, 1, ["MTT-S4000"]),  # the form mutation writes
    (S4000, pod(c("train", 2, 192, 32)), Kind.WHOLE, 2, ["MTT-S4000"]),
    (S4000, pod(c("a", 2), c("b", 1)), Kind.WHOLE, 3, ["MTT-S4000"]),
    (S4000, pod(c("a", 1, 64, 8), c("b", 1, 32, 8)), Kind.SLICE, 1, ["MTT-S4000"]),  # 96 units, 16 cores
    (S4000, pod(c("a", 1, 32, 8), c("side")), Kind.SLICE, 1, ["MTT-S4000"]),
    (S4000, pod(c("a", 1, 32, 8), init=(c("setup", 1, 16, 4),)), Kind.SLICE, 1, ["MTT-S4000"]),
    (S4000, pod(c("train", "1", "32", "8", requests_only=True)), Kind.SLICE, 1, ["MTT-S4000"]),
    (S4000, pod(c("web")), Kind.NONE, 0, []),
    (S5000, pod(c("train", 1, 128, 8)), Kind.SLICE, 1, ["MTT-S5000"]),
    (S5000, pod(c("train", 1, 160)), Kind.SLICE, 1, ["MTT-S5000"]),
    (S5000, pod(c("train", 2, 320, 32)), Kind.WHOLE, 2, ["MTT-S5000"]),
    (MIXED, pod(c("train", 1, 32, 8)), Kind.SLICE, 1, ["MTT-S4000", "MTT-S5000"]),
    (MIXED, pod(c("train", 1, 96)), Kind.SLICE, 1, ["MTT-S4000"]),  # 96 is valid on S4000 only
    (MIXED, pod(c("train", 1, 128)), Kind.SLICE, 1, ["MTT-S5000"]),
    (MIXED, pod(c("a", 1, 64), c("b", 1, 64)), Kind.SLICE, 1, ["MTT-S5000"]),  # 128 fits S5000 only
    (MIXED, pod(c("train", 1)), Kind.WHOLE, 1, ["MTT-S4000"]),  # the smallest by default
    (MIXED, pod(c("train", 1), annotations={"mthreads.com/card-model": "MTT-S5000"}),
     Kind.WHOLE, 1, ["MTT-S5000"]),
    (MIXED, pod(c("a", 1, 160, 16), c("b", 1)), Kind.WHOLE, 2, ["MTT-S5000"]),  # follows the written model
    (MIXED, pod(c("train", 1, 32), annotations={"mthreads.com/card-model": "MTT-S5000"}),
     Kind.SLICE, 1, ["MTT-S5000"]),
    (S4000, pod(c("train", 1, extra={"cpu": "2"}), c("vendor", extra={"mthreads.com/gpu": "1"})),
     Kind.WHOLE, 1, ["MTT-S4000"]),
]


@pytest.mark.parametrize("memory, p, kind, cards, models", ALLOWED)
def test_allowed(memory, p, kind, cards, models):
    request = check_create(p, rules(memory), "alice")
    if kind is Kind.NONE:
        assert request is None
        return
    assert request.kind is kind
    assert request.cards == cards
    assert [m.name for m in request.models] == models


def test_plain_pod_is_not_read():
    plain = pod(c("web", extra={"cpu": "1", "nvidia.com/gpu": "1"}))
    assert check_create(plain, rules(), "alice") is None


def test_disabled_allows_everything():
    r = Rules.of(parse_config({"devices": {"mthreads": {"enabled": False}}}))
    assert check_create(pod(c("train", 1, 3)), r, "alice") is None
    assert check_create(pod(c("x"), annotations={"hami.io/bind-phase": "x"}), r, "alice") is None


def test_mirror_pods_are_allowed_unchanged():
    mirror = pod(c("train", 1, 3), annotations={"kubernetes.io/config.mirror": "abc"})
    assert check_create(mirror, rules(), "system:node:n1", ("system:nodes",)) is None


def test_allocator_may_create_with_allocation_and_node():
    p = pod(c("train", 1, 32), node="n1", annotations={"hami.io/bind-phase": "allocating"})
    assert check_create(p, rules(), ALLOCATOR).kind is Kind.SLICE


def test_extra_writers_may_create_with_allocation():
    r = Rules.of(Config(allocator=AllocatorConfig(extra_writers=("plugin",))))
    assert check_create(pod(c("x"), annotations={"hami.io/bind-phase": "success"}), r, "plugin") is None


def test_custom_resource_names():
    r = Rules.of(parse_config({"devices": {"mthreads": {"resourceMemoryName": "example.com/mem",
                                                        "resourceCountName": "example.com/n"}}}))
    p = pod(c("t", extra={"example.com/n": "1", "example.com/mem": "3"}))
    with pytest.raises(InvalidRequest, match="example.com/mem=3 is not valid"):
        check_create(p, r, "alice")
    assert check_create(pod(c("t", 1, 3)), r, "alice") is None  # the default names mean nothing now


BOUND = pod(c("train", 1, 32, 8), node="n1", annotations={
    "hami.io/mthreads-vgpu-devices-allocated": "n1-mthreads-0,Mthreads,16384,8:;",
    "mthreads.com/gpu-index": "0", "hami.io/bind-phase": "allocating"})


def _with_annotations(p, changes: dict):
    """A copy of p with annotations set, or removed where the value is None."""
    ann = {**p["metadata"]["annotations"], **changes}
    ann = {k: v for k, v in ann.items() if v is not None}
    return {**p, "metadata": {**p["metadata"], "annotations": ann}}


@pytest.mark.parametrize("new, user, denied", [
    (_with_annotations(BOUND, {"hami.io/bind-phase": "success"}), "alice", True),  # change
    (_with_annotations(BOUND, {"hami.io/bind-phase": None}), "alice", True),  # remove
    (_with_annotations(BOUND, {"hami.io/bind-time": "1"}), "alice", True),  # add
    (_with_annotations(BOUND, {"mthreads.com/gpu-index": "1"}), "alice", True),
    (_with_annotations(BOUND, {"hami.io/bind-phase": "success"}), ALLOCATOR, False),
    (_with_annotations(BOUND, {"example.com/note": "edited"}), "alice", False),  # other annotations are free
    (BOUND, "alice", False),  # no change at all
])
def test_update_rule_10(new, user, denied):
    if denied:
        with pytest.raises(InvalidRequest) as e:
            check_update(BOUND, new, rules(), user)
        assert e.value.rule == 10 and "may only be changed by the allocator" in e.value.message
        assert user in e.value.message
    else:
        check_update(BOUND, new, rules(), user)


def test_update_ignores_resources():
    """A pod's resources cannot change after creation: UPDATE checks rule 10 only."""
    check_update(pod(c("train", 1, 3)), pod(c("train", 1, 3)), rules(), "alice")


@pytest.mark.parametrize("p, words", [
    (pod(c("train", 65)), ["mthreads.com/vgpu=65 asks for more cards than one pod may hold", "at most 64"]),
    (pod(c("train", "2147483647")), ["=2147483647 asks for more cards"]),
    (pod(c("a", 40), c("b", 40)), ["ask for 80 cards together"]),
])
def test_card_count_is_bounded(p, words):
    e = denial(p)
    assert e.rule == 4
    for w in words:
        assert w in e.message


def test_64_whole_cards_are_allowed():
    assert check_create(pod(c("a", 32), c("b", 32)), rules(), "alice").cards == 64


# -- pods/binding: a Binding's annotations are merged into the pod (rule 10) ---------------------

KEYS = sorted(ALLOCATION_KEYS)


@pytest.mark.parametrize("key", KEYS)
def test_a_binding_carrying_an_allocation_key_is_denied(key):
    with pytest.raises(InvalidRequest) as e:
        check_binding(binding("train", {key: "x", "example.com/note": "y"}), rules(), "alice")
    assert e.value.rule == 10
    assert e.value.message == (f"annotation {key} may only be written by the allocator ({ALLOCATOR}); "
                               f"alice may not bind pod 'train' with it")


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("user, config", [
    (ALLOCATOR, Config()),
    ("plugin", Config(allocator=AllocatorConfig(extra_writers=("plugin",)))),
    ("alice", Config(mthreads=MthreadsConfig(enabled=False))),  # disabled: rule 10 too
], ids=["allocator", "extra-writer", "disabled"])
def test_writers_may_bind_with_allocation_keys(key, user, config):
    check_binding(binding("train", {key: "x"}), Rules.of(config), user)


@pytest.mark.parametrize("b", [
    binding("web"),  # what default-scheduler posts
    binding("web", {}),
    binding("web", {"example.com/note": "x", "mthreads.com/card-model": "MTT-S4000"}),
    {"apiVersion": "v1", "kind": "Binding"},  # malformed below: no key can be read, nothing merged
    {"kind": "Binding", "metadata": []},
    {"kind": "Binding", "metadata": {"annotations": ["hami.io/bind-phase"]}},
    {"kind": "Binding", "metadata": {"annotations": "hami.io/bind-phase=x"}},
    {"kind": "Binding", "metadata": {"annotations": None}},
], ids=["no-annotations", "empty", "other-keys", "no-metadata", "metadata-list",
        "annotations-list", "annotations-string", "annotations-null"])
def test_other_bindings_are_allowed(b):
    check_binding(b, rules(), "system:kube-scheduler")


@pytest.mark.parametrize("meta, user, words", [
    ({"annotations": dict.fromkeys(KEYS, "x")}, "alice", [f"annotation {KEYS[0]} ", "bind a pod"]),
    ({"name": ["x"], "annotations": {"hami.io/bind-phase": "x"}}, "alice", ["bind a pod"]),
    ({"name": "p", "annotations": {"hami.io/bind-phase": "x"}}, "", ["anonymous may not bind pod 'p'"]),
])
def test_binding_denial_messages(meta, user, words):
    with pytest.raises(InvalidRequest) as e:
        check_binding({"kind": "Binding", "metadata": meta}, rules(), user)
    assert all(w in e.value.message for w in words), e.value.message


@pytest.mark.parametrize("raw, shown", [
    ("1e1000000", '"1e1000000"'),
    ("9" * 1_000_000, f'"{"9" * 64}"... (1000000 characters)'),
    ("1" + "0" * 100_000 + "Gi", f'"1{"0" * 63}"... (100003 characters)'),
    (10**5000, "an integer of more than 4,200 digits"),
    (10**30, "an integer of 31 digits"),
], ids=["1e1000000", "a million 9s", "a long Gi", "10^5000", "10^30"])
def test_a_quantity_of_any_size_is_denied_in_a_short_message(raw, shown):
    """Issue 46, finding 1, on the admission side: the value is read by a bounded pattern, and
    the denial quotes it short (it repeated the whole megabyte, and raised ValueError on an
    integer past 4,300 digits)."""
    p = pod(c("train", 1, 2))
    p["spec"]["containers"][0]["resources"]["limits"][MEMORY] = raw  # as JSON gave it
    e = denial(p)
    assert e.rule == 1 and e.message == (f'container "train": {MEMORY}={shown} is not valid; it must be '
                                         f"a plain positive integer (at most 2147483647)")
