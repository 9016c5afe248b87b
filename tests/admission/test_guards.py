"""Issue 17's ways past the rules, as tables: rule 8 by other names and for ephemeral
containers, the mirror exemption (identity x annotation x operation x subresource), the
opt-out label, a vendor card beside a slice, what is held after CREATE; and issue 13's checks
of the annotations users type (rule 13)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.builders import ALLOCATED, ephemeral_update, pod, review
from tests.builders import container as c
from webhook.admission import privilege
from webhook.admission import review as rv
from webhook.admission.decide import decide
from webhook.admission.validate import Rules, check_create, check_update
from webhook.model.config import Config
from webhook.model.pods import InvalidRequest

RULES = Rules.of(Config())
ALLOCATOR = "system:serviceaccount:kube-system:mthreads-allocator"
KUBELET = "system:node:node-1"
NODES = ("system:nodes", "system:authenticated")
MIRROR = {"kubernetes.io/config.mirror": "abc"}
TO_ALLOCATE = {"hami.io/mthreads-vgpu-devices-to-allocate": ",Mthreads,16384,8:;"}


def denied(p: dict, user: str = "alice", groups: tuple = ()) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as e:
        check_create(p, RULES, user, groups)
    return e.value


def with_spec(p: dict, **spec) -> dict:
    p = copy.deepcopy(p)
    p["spec"].update(spec)
    return p


def secured(name: str, sc: dict | None = None, mounts: list | None = None, **kw) -> dict:
    out = c(name, **kw)
    if sc is not None:
        out["securityContext"] = sc
    if mounts is not None:
        out["volumeMounts"] = [{"name": m, "mountPath": "/x"} for m in mounts]
    return out


def host(name: str, path: str) -> dict:
    return {"name": name, "hostPath": {"path": path}}


# -- rule 8: privilege by other names ----------------------------------------------------------

SLICE = c("train", 1, 32, 8)
PRIVILEGED = [
    ("privileged", pod(SLICE, secured("side", {"privileged": True})), "privileged: true"),
    ("SYS_ADMIN", pod(secured("train", {"capabilities": {"add": ["SYS_ADMIN"]}}, count=1, memory=32)),
     "capabilities.add SYS_ADMIN"),
    ("ALL", pod(SLICE, secured("side", {"capabilities": {"add": ["NET_ADMIN", "ALL"]}})),
     "capabilities.add ALL"),
    ("CAP_ and lower case", pod(SLICE, secured("side", {"capabilities": {"add": ["cap_sys_admin"]}})),
     "capabilities.add cap_sys_admin"),
    ("init container", pod(SLICE, init=(secured("setup", {"privileged": True}),)), '"setup"'),
    ("hostPath /dev", with_spec(pod(secured("train", mounts=["dev"], count=1, memory=32)),
                                volumes=[host("dev", "/dev")]), "mounting hostPath '/dev'"),
    ("hostPath below /dev", with_spec(pod(SLICE, secured("side", mounts=["card"])),
                                      volumes=[host("card", "/dev/mtgpu0")]), "'/dev/mtgpu0'"),
    ("hostPath / holds /dev", with_spec(pod(SLICE, secured("side", mounts=["root"])),
                                        volumes=[host("root", "/")]), "hostPath '/'"),
    ("hostPath spelled oddly", with_spec(pod(SLICE, secured("side", mounts=["d"])),
                                         volumes=[host("d", "//dev/./")]), "'//dev/./'"),
    ("as a block device", with_spec(pod(SLICE, {**c("side"), "volumeDevices": [
        {"name": "d", "devicePath": "/dev/xvda"}]}), volumes=[host("d", "/dev")]), '"side"'),
    ("ephemeral container", with_spec(pod(SLICE), ephemeralContainers=[
        secured("debug", {"privileged": True})]), '"debug"'),
]


@pytest.mark.parametrize("what, p, words", PRIVILEGED, ids=[w for w, _, _ in PRIVILEGED])
def test_what_reaches_every_card_is_refused_in_an_mthreads_pod(what, p, words):
    e = denied(p)
    assert e.rule == 8, e.message
    assert words in e.message and "reach every card of the node" in e.message, e.message


ALLOWED_ACCESS = [
    ("other capabilities", pod(SLICE, secured("side", {"capabilities": {"add": ["NET_ADMIN"]}}))),
    ("capabilities dropped", pod(SLICE, secured("side", {"capabilities": {"drop": ["ALL"]}}))),
    ("privileged: false", pod(SLICE, secured("side", {"privileged": False}))),
    ("other hostPath", with_spec(pod(SLICE, secured("side", mounts=["logs"])),
                                 volumes=[host("logs", "/var/log"), host("devices", "/device")])),
    ("hostPID and hostNetwork (Pod Security's)", with_spec(pod(SLICE), hostPID=True,
                                                           hostNetwork=True)),
]


@pytest.mark.parametrize("what, p", ALLOWED_ACCESS, ids=[w for w, _ in ALLOWED_ACCESS])
def test_other_host_access_is_left_to_pod_security(what, p):
    assert check_create(p, RULES, "alice") is not None


def test_a_device_volume_is_refused_even_unmounted():
    """An ephemeral container could mount it later, and on 1.20-1.21 the webhook does not
    see the pod's volumes then."""
    e = denied(with_spec(pod(SLICE), volumes=[host("dev", "/dev")]))
    assert e.rule == 8 and "volume 'dev'" in e.message and "hostPath '/dev'" in e.message


# hostPath volumes, read as the kubelet reads the path (Go's filepath.Clean): refused at or
# below /dev and /proc, and /; (path, refused). Issue 32: /proc/<pid>/root is the host's /.
HOST_PATHS = [
    ("/proc/1/root/dev", True), ("/proc/1/root", True), ("/proc/self/root/dev", True),
    ("/proc", True), ("/proc/", True), ("//proc", True), ("/./proc/1", True),
    ("/dev/../proc", True), ("/proc/1/root/", True), ("proc/1/root", True),
    ("/var/../dev/mthreads0", True), ("/dev/", True), ("/dev//mtgpu0/", True), ("//", True),
    ("/.", True), ("/", True), ("/dev", True), ("dev", True), (".", True),
    ("/data", False), ("/procfoo", False), ("/devices", False), ("/var/lib/x", False),
    ("/opt/proc", False), ("/opt/dev/", False), ("/proc-data/1", False), ("/var/lib/../log", False),
]


@pytest.mark.parametrize("path, refused", HOST_PATHS, ids=[p for p, _ in HOST_PATHS])
def test_a_host_path_volume_reaching_every_card_is_refused(path, refused):
    """Mounted by a container, which the denial names, and declared alone, naming the volume;
    both with the path as given."""
    mounted = with_spec(pod(SLICE, secured("side", mounts=["h"])), volumes=[host("h", path)])
    unmounted = with_spec(pod(SLICE), volumes=[host("h", path)])
    for p, words in ((mounted, 'container "side"'), (unmounted, "volume 'h'")):
        if refused:
            e = denied(p)
            assert e.rule == 8, e.message
            assert words in e.message and f"hostPath {path!r}" in e.message, e.message
        else:
            assert check_create(p, RULES, "alice") is not None


@pytest.mark.parametrize("path, why", [
    ("/proc/1/root", "/proc/<pid>/root is the host's /"),
    ("/dev/mtgpu0", "the host's /dev holds every card's device file"),
    ("//", "the host's / holds /dev"),
])
def test_the_denial_says_why_the_path_reaches_every_card(path, why):
    for p in (with_spec(pod(SLICE, secured("side", mounts=["h"])), volumes=[host("h", path)]),
              with_spec(pod(SLICE), volumes=[host("h", path)])):
        assert f"reach every card of the node: {why})" in denied(p).message


@pytest.mark.parametrize("path, read", [
    ("/proc/", "/proc"), ("//proc", "/proc"), ("///proc//1/", "/proc/1"),
    ("/./proc/./1", "/proc/1"),
    ("/dev/../proc", "/proc"), ("/../..", "/"), ("//", "/"), ("/.", "/"), ("", "/"),
    ("proc/1/root", "/proc/1/root"), ("./dev", "/dev"), ("/var/lib/x", "/var/lib/x"),
])
def test_host_path_reads_the_path_as_go_filepath_clean_from_the_root(path, read):
    assert privilege.host_path(path) == read


@pytest.mark.parametrize("p", [
    pod(c("web"), c("side", privileged=True)),
    with_spec(pod(secured("web", {"capabilities": {"add": ["ALL"]}}, mounts=["d"])),
              volumes=[host("d", "/dev")]),
], ids=["privileged", "all-and-dev"])
def test_plain_pods_may_be_privileged(p):
    assert check_create(p, RULES, "alice") is None


# -- ephemeral containers (pods/ephemeralcontainers UPDATE) ------------------------------------

RUNNING = pod(SLICE, node="node-1", name="train", annotations={**TO_ALLOCATE, **ALLOCATED})
PLAIN = pod(c("web"), node="node-1", name="web", annotations={})


def outcome(body: dict):
    return decide(rv.decode(json.dumps(body).encode()), RULES, False)


@pytest.mark.parametrize("legacy", [False, True], ids=["pod", "EphemeralContainers"])
@pytest.mark.parametrize("debug, target, result", [
    (secured("debug", {"privileged": True}), RUNNING, "denied"),
    (secured("debug", {"capabilities": {"add": ["SYS_ADMIN"]}}), RUNNING, "denied"),
    (c("debug"), RUNNING, "allowed"),  # a plain debug container stays allowed
    (secured("debug", {"privileged": True}), PLAIN, "allowed"),  # not an Mthreads pod
], ids=["privileged", "sys-admin", "plain-debug", "other-pod"])
def test_ephemeral_containers_of_an_mthreads_pod_are_held_to_rule_8(debug, target, result, legacy):
    out = outcome(ephemeral_update(target, debug, legacy))
    assert out.result == result, out.response
    if result == "denied":
        assert out.rule == 8 and '"debug"' in out.response["response"]["status"]["message"]


@pytest.mark.parametrize("path", ["/proc/1/root/dev", "/proc/self/root", "//dev/"])
def test_an_ephemeral_container_mounting_a_card_volume_is_refused(path):
    """1.22+: the review's Pod has its volumes (a pod admitted before this rule could hold
    one); before 1.22 the webhook cannot see them, which is why CREATE refuses the volume."""
    target = with_spec(RUNNING, volumes=[host("h", path)])
    out = outcome(ephemeral_update(target, secured("debug", mounts=["h"])))
    assert out.result == "denied" and out.rule == 8, out.response
    message = out.response["response"]["status"]["message"]
    assert '"debug"' in message and f"hostPath {path!r}" in message, message


# -- mirror pods: identity x annotation x operation x subresource --------------------------------

MIRROR_POD = pod(SLICE, node="node-1", name="static", annotations={**MIRROR, **ALLOCATED})
MIRROR_CASES = [(KUBELET, NODES, True), (KUBELET, (), False),  # no group: not a node
                ("alice", NODES, False), ("alice", (), False), ("system:node:", NODES, False)]


@pytest.mark.parametrize("user, groups, exempt", MIRROR_CASES)
def test_only_a_kubelet_creates_a_mirror_pod_unchecked(user, groups, exempt):
    if exempt:
        assert check_create(MIRROR_POD, RULES, user, groups) is None
    else:
        assert denied(MIRROR_POD, user, groups).rule == 10  # its forged allocation


@pytest.mark.parametrize("sub", ["", "status"])
@pytest.mark.parametrize("old_mirror, user, groups, allowed", [
    (True, KUBELET, NODES, True),  # a kubelet updating its mirror pod
    (True, "alice", (), False),
    (False, KUBELET, NODES, False),  # the annotation added on UPDATE exempts nothing
    (False, "alice", (), False),
])
def test_the_mirror_exemption_on_update(old_mirror, user, groups, allowed, sub):
    old = pod(SLICE, node="node-1", annotations={**(MIRROR if old_mirror else {}), **ALLOCATED})
    new = copy.deepcopy(old)
    new["metadata"]["annotations"].update({**MIRROR, "hami.io/bind-phase": "success"})
    body = review(new, "UPDATE", old, user=user, sub_resource=sub or None)
    body["request"]["userInfo"]["groups"] = list(groups)
    assert (outcome(body).result == "allowed") is allowed


def test_a_normal_users_fake_mirror_pod_is_refused_for_what_it_carries():
    """The review's pod: a node, a forged allocation, a privileged container, a bad value."""
    fake = pod(c("train", 1, 3, privileged=True), node="node-1", annotations={**MIRROR, **ALLOCATED})
    assert outcome(review(fake)).result == "denied"
    fake["metadata"]["annotations"] = dict(MIRROR)
    assert outcome(review(fake)).rule == 2  # no longer exempt: every rule applies


# -- the opt-out label ---------------------------------------------------------------------------

def labelled(p: dict) -> dict:
    p = copy.deepcopy(p)
    p["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    return p


@pytest.mark.parametrize("p", [pod(SLICE), pod(c("train", 2)), pod(c("side"), init=(SLICE,))],
                         ids=["slice", "whole", "init"])
def test_the_opt_out_label_is_refused_on_an_mthreads_pod(p):
    e = denied(labelled(p))
    assert e.rule == 12 and "hami.io/webhook=ignore" in e.message


def test_the_opt_out_label_stays_for_other_pods():
    assert check_create(labelled(pod(c("webhook"))), RULES, "alice") is None
    check_update(PLAIN, labelled(PLAIN), RULES, "alice")


def test_the_opt_out_label_added_on_update_is_refused_on_an_mthreads_pod():
    with pytest.raises(InvalidRequest) as e:
        check_update(RUNNING, labelled(RUNNING), RULES, "alice")
    assert e.value.rule == 12
    check_update(labelled(RUNNING), labelled(RUNNING), RULES, "alice")  # already there: unchanged


# -- rule 6 across containers ----------------------------------------------------------------------

@pytest.mark.parametrize("p, rule", [
    (pod(c("a", extra={"mthreads.com/gpu": "1"}), SLICE), 6),
    (pod(SLICE, init=(c("setup", extra={"mthreads.com/gpu": "1"}),)), 6),
    (pod(c("a", extra={"mthreads.com/gpu": "1"}), c("b", 1)), None),  # whole cards: no sharing
])
def test_a_vendor_whole_card_beside_a_slice_is_refused(p, rule):
    if rule is None:
        assert check_create(p, RULES, "alice") is not None
    else:
        e = denied(p)
        assert e.rule == 6 and "mthreads.com/gpu" in e.message and '"train"' in e.message


def test_a_denial_names_a_few_containers_not_all():
    many = pod(*[c(f"c{i}", 1, 64) for i in range(20000)])
    e = denied(many)
    assert e.rule == 7 and '"c0", "c1", "c2" and 19997 more' in e.message
    assert len(e.message) < 500


# -- what is held to rule 10's writers after CREATE -------------------------------------------------

PENDING = pod(SLICE, name="train", annotations={
    **TO_ALLOCATE, "mthreads.com/card-model": "MTT-S4000", "hami.io/node-scheduler-policy": "spread"})
BOUND = with_spec(PENDING, nodeName="node-1")


def changed(p: dict, key: str, value) -> dict:
    p = copy.deepcopy(p)
    if value is None:
        p["metadata"]["annotations"].pop(key, None)
    else:
        p["metadata"]["annotations"][key] = value
    return p


HELD = [
    (PENDING, "hami.io/mthreads-vgpu-devices-to-allocate", ",Mthreads,49152,16:;"),
    (PENDING, "hami.io/mthreads-vgpu-devices-to-allocate", None),
    (PENDING, "mthreads.com/card-model", "MTT-S5000"),
    (PENDING, "mthreads.com/card-model", None),
    (PENDING, "mthreads.com/request-gpu-num", "8"),
    (BOUND, "hami.io/node-scheduler-policy", "binpack"),
    (BOUND, "hami.io/gpu-scheduler-policy", "binpack"),
    (BOUND, "mthreads.ai/use-gpuuuid", "node-1-mthreads-0"),
    (BOUND, "mthreads.ai/nouse-gpuuuid", "node-1-mthreads-0"),
]


@pytest.mark.parametrize("old, key, value", HELD, ids=[f"{k}={v}" for _, k, v in HELD])
@pytest.mark.parametrize("sub", ["", "status"])
def test_what_was_set_at_create_is_held_to_the_writers(old, key, value, sub):
    new = changed(old, key, value)
    out = outcome(review(new, "UPDATE", old, sub_resource=sub or None))
    assert (out.result, out.rule) == ("denied", 10), out.response
    assert key in out.response["response"]["status"]["message"]
    check_update(old, new, RULES, ALLOCATOR)  # the allocator may


def test_a_bound_plain_pods_placement_annotations_are_held_too():
    """The allocator places plain pods too (node policy): once bound, the choice is made."""
    with pytest.raises(InvalidRequest) as e:
        check_update(PLAIN, changed(PLAIN, "hami.io/node-scheduler-policy", "spread"), RULES, "alice")
    assert e.value.rule == 10 and "the pod is bound (to 'node-1')" in e.value.message


def test_a_pending_pods_placement_annotations_stay_editable_with_valid_values():
    check_update(PENDING, changed(PENDING, "hami.io/node-scheduler-policy", "binpack"), RULES, "alice")
    check_update(PENDING, changed(PENDING, "mthreads.ai/use-gpuuuid", "n-mthreads-1"), RULES, "alice")
    with pytest.raises(InvalidRequest) as e:
        check_update(PENDING, changed(PENDING, "hami.io/node-scheduler-policy", "fast"), RULES, "bob")
    assert e.value.rule == 13


# -- rule 13: the annotations users type (issue 13, item 3) -------------------------------------------

USER_VALUES = [
    ("hami.io/node-scheduler-policy", "binpack", None),
    ("hami.io/node-scheduler-policy", "spread", None),
    ("hami.io/gpu-scheduler-policy", "binpack", None),
    ("hami.io/gpu-scheduler-policy", "spread", None),
    ("hami.io/node-scheduler-policy", "Binpack", "valid values are binpack, spread"),
    ("hami.io/gpu-scheduler-policy", "topology", "valid values are binpack, spread"),
    ("hami.io/gpu-scheduler-policy", "", "valid values are binpack, spread"),
    ("hami.io/node-scheduler-policy", 1, "valid values are binpack, spread"),
    ("mthreads.ai/use-gpuuuid", "node-1-mthreads-0", None),
    ("mthreads.ai/use-gpuuuid", "node-1-mthreads-0,node-1-mthreads-7", None),
    ("mthreads.ai/nouse-gpuuuid", "gpu.example.com-mthreads-12, n2-mthreads-3", None),
    ("mthreads.ai/use-gpuuuid", "GPU-1234-abcd", "'GPU-1234-abcd' is not a card id"),
    ("mthreads.ai/use-gpuuuid", "node-1-mthreads-0,", "'' is not a card id"),
    ("mthreads.ai/nouse-gpuuuid", "node-1-mthreads-x", "'node-1-mthreads-x' is not a card id"),
    ("mthreads.ai/nouse-gpuuuid", "node-1-mthreads-01", "is not a card id"),
    ("mthreads.ai/nouse-gpuuuid", "Node-1-mthreads-0", "is not a card id"),
    ("mthreads.ai/use-gpuuuid", "", "'' is not a card id"),
    ("mthreads.ai/use-gpuuuid", ["node-1-mthreads-0"], "is not a card id"),
]


@pytest.mark.parametrize("key, value, words", USER_VALUES,
                         ids=[f"{k.split('/')[1]}={v!r}" for k, v, _ in USER_VALUES])
def test_the_annotations_users_type_are_checked(key, value, words):
    p = pod(SLICE, annotations={key: value})
    if words is None:
        assert check_create(p, RULES, "alice") is not None
        return
    e = denied(p)
    assert e.rule == 13 and key in e.message and words in e.message, e.message
    if "card id" in words:
        assert "<node>-mthreads-<index> separated by commas" in e.message


def test_other_pods_annotations_are_not_read():
    """The hot path: a plain pod is allowed whatever it carries (it is never placed by us)."""
    assert check_create(pod(c("web"), annotations={"hami.io/node-scheduler-policy": "x"}),
                        RULES, "alice") is None
