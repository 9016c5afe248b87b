"""The patch of SPEC 3: applied with jsonpatch, its result must validate and be a fixed point."""

import jsonpatch
import pytest

from tests.builders import CORE, COUNT, MEMORY, pod
from tests.builders import container as c
from webhook.admission.mutate import escape, patch_for
from webhook.admission.validate import Rules, check_create
from webhook.model.config import Config, MthreadsConfig

TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
GPU_NUM = "mthreads.com/request-gpu-num"
S4000, S5000, MIXED = (96,), (160,), (96, 160)


def rules(memory=S4000, force=True) -> Rules:
    return Rules.of(Config(force_overwrite_default_scheduler=force,
                           mthreads=MthreadsConfig(memory_per_card=memory)))


def mutate(p, r):
    request = check_create(p, r, "alice")
    ops = patch_for(p, request, r)
    return jsonpatch.apply_patch(p, ops), ops


# (memoryPerCard, pod, to-allocate annotation, request-gpu-num, {container: (memory, cores)} written)
CASES = [
    (S4000, pod(c("gpushare-pod-1", 1, 32, 8)), ",Mthreads,16384,8:;", None, {}),
    (S4000, pod(c("train", 1, 32, 8), c("sidecar")), ",Mthreads,16384,8:;;", None, {}),
    (S4000, pod(c("train", 1, 32)), ",Mthreads,16384,0:;", None, {}),
    (S4000, pod(c("train", 1)), ",Mthreads,49152,16:;", None, {"train": ("96", "16")}),
    (S4000, pod(c("train", 2)), ",Mthreads,49152,16:,Mthreads,49152,16:;", "2", {"train": ("192", "32")}),
    (S5000, pod(c("train", 1)), ",Mthreads,81920,16:;", None, {"train": ("160", "16")}),
    (S5000, pod(c("train", 1, 128, 8)), ",Mthreads,65536,8:;", None, {}),
    (MIXED, pod(c("train", 1)), ",Mthreads,49152,16:;", None, {"train": ("96", "16")}),
    (MIXED, pod(c("train", 1), annotations={"mthreads.com/card-model": "MTT-S5000"}),
     ",Mthreads,81920,16:;", None, {"train": ("160", "16")}),
    (S4000, pod(c("a", 1, 16, 4), init=(c("setup", 1, 8, 2),)),
     ",Mthreads,4096,2:;,Mthreads,8192,4:;", None, {}),
    (S4000, pod(c("a", 1), c("b", 2), init=(c("setup"),)),
     ";,Mthreads,49152,16:;,Mthreads,49152,16:,Mthreads,49152,16:;", "3",
     {"a": ("96", "16"), "b": ("192", "32")}),
    (S4000, pod(c("train", "1", requests_only=True)), ",Mthreads,49152,16:;", None, {"train": ("96", "16")}),
    # a user's own values of the webhook's annotations are rewritten
    (S4000, pod(c("train", 1, 32, 8), annotations={TO_ALLOCATE: "forged", GPU_NUM: "5"}),
     ",Mthreads,16384,8:;", None, {}),
    (S4000, pod(c("train", 2), annotations={GPU_NUM: "7", "keep": "me"}),
     ",Mthreads,49152,16:,Mthreads,49152,16:;", "2", {"train": ("192", "32")}),
]


@pytest.mark.parametrize("memory, p, encoded, gpu_num, written", CASES)
def test_mutation(memory, p, encoded, gpu_num, written):
    r = rules(memory)
    out, _ = mutate(p, r)
    ann = out["metadata"]["annotations"]
    assert ann[TO_ALLOCATE] == encoded
    assert ann.get(GPU_NUM) == gpu_num
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    for ctr in out["spec"].get("initContainers", []) + out["spec"]["containers"]:
        if ctr["name"] in written:
            mem, cores = written[ctr["name"]]
            for part in ("limits", "requests"):
                assert ctr["resources"][part][MEMORY] == mem
                assert ctr["resources"][part][CORE] == cores
    for k, v in p["metadata"].get("annotations", {}).items():
        if k not in (TO_ALLOCATE, GPU_NUM):
            assert ann[k] == v  # others are left alone
    # the result passes validation unchanged, and a second pass patches nothing
    again = check_create(out, r, "alice")
    assert again is not None
    assert patch_for(out, again, r) == []


@pytest.mark.parametrize("scheduler, force, expected", [
    (None, True, "hami-scheduler"),
    ("", True, "hami-scheduler"),
    ("default-scheduler", True, "hami-scheduler"),
    ("default-scheduler", False, "default-scheduler"),
    ("volcano", True, "volcano"),  # somebody else's scheduler is left alone
    ("hami-scheduler", True, "hami-scheduler"),
])
def test_scheduler_name(scheduler, force, expected):
    out, _ = mutate(pod(c("train", 1, 32), scheduler=scheduler), rules(force=force))
    assert out["spec"]["schedulerName"] == expected


def test_other_scheduler_pods_are_still_validated():
    with pytest.raises(Exception, match="=3 is not valid"):
        check_create(pod(c("train", 1, 3), scheduler="volcano"), rules(), "alice")


def test_patch_paths_are_escaped():
    p = pod(c("train", 1))
    _, ops = mutate(p, rules())
    paths = {o["path"] for o in ops}
    assert "/spec/containers/0/resources/limits/mthreads.com~1sgpu-memory" in paths
    assert "/metadata/annotations" in paths  # the pod had none: the map is added whole
    assert escape("a~b/c") == "a~0b~1c"


def test_patch_adds_missing_requests_map():
    p = pod({"name": "t", "resources": {"limits": {COUNT: "1"}}})
    out, _ = mutate(p, rules())
    assert out["spec"]["containers"][0]["resources"]["requests"] == {MEMORY: "96", CORE: "16"}
