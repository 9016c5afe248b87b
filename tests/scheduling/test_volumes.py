"""A pod's claims against the nodes (webhook/scheduling/volumes.py): kube-scheduler 1.20's
VolumeBinding and VolumeZone, and the allocator's refusal of WaitForFirstConsumer claims."""

import pytest

from tests.scheduling.rules_support import HOST, ZONE, cache_of, node, pod, reasons_for
from webhook.scheduling.reasons import DELAYED_BINDING

NODES = [node("n1", "z1"), node("n2", "z2"), node("n3", None)]


def claim(name, volume=None, cls=None, completed=True, ns="a", **meta):
    ann = {"pv.kubernetes.io/bind-completed": "yes"} if volume and completed else {}
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec["volumeName"] = volume
    if cls is not None:
        spec["storageClassName"] = cls
    return {"metadata": {"name": name, "namespace": ns, "annotations": ann, **meta}, "spec": spec}


def volume(name, hosts=None, zone=None):
    spec = {"capacity": {"storage": "1Gi"}}
    if hosts:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": HOST, "operator": "In", "values": hosts}]}]}}
    return {"metadata": {"name": name, "labels": {ZONE: zone} if zone else {}}, "spec": spec}


def klass(name, mode):
    return {"metadata": {"name": name}, "provisioner": "example.com/disk", "volumeBindingMode": mode}


def using(*claims):
    return pod("q", volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                             for i, c in enumerate(claims)])


FAST = klass("fast", "Immediate")
LOCAL = klass("local", "WaitForFirstConsumer")
CONFLICT = "node(s) had volume node affinity conflict"
ZONE_CONFLICT = "node(s) had no available volume zone"


@pytest.mark.parametrize("case, claims, volumes, p, want", [
    ("no claims", [], [], pod("q"), {"n1": None, "n2": None, "n3": None}),
    ("local volume on n2", [claim("c", "pv1")], [volume("pv1", ["n2"])], using("c"),
     {"n1": CONFLICT, "n2": None, "n3": CONFLICT}),
    ("zonal volume in z1", [claim("c", "pv1")], [volume("pv1", zone="z1")], using("c"),
     {"n1": None, "n2": ZONE_CONFLICT, "n3": None}),  # a node without zone labels is not refused
    ("zone set z1__z2", [claim("c", "pv1")], [volume("pv1", zone="z1__z2")], using("c"),
     {"n1": None, "n2": None, "n3": None}),
    ("two claims, both rules", [claim("c", "pv1"), claim("d", "pv2")],
     [volume("pv1", ["n1", "n2"]), volume("pv2", zone="z2")], using("c", "d"),
     {"n1": ZONE_CONFLICT, "n2": None, "n3": CONFLICT}),
    ("claim not found", [], [], using("nope"),
     dict.fromkeys(("n1", "n2", "n3"), 'persistentvolumeclaim "nope" not found')),
    ("claim in another namespace", [claim("c", "pv1", ns="b")], [volume("pv1")], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), 'persistentvolumeclaim "c" not found')),
    ("claim being deleted", [claim("c", "pv1", deletionTimestamp="2026-01-01T00:00:00Z")],
     [volume("pv1")], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), 'persistentvolumeclaim "c" is being deleted')),
    ("unbound, no class", [claim("c")], [], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), "pod has unbound immediate PersistentVolumeClaims")),
    ("unbound, Immediate class", [claim("c", cls="fast")], [], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), "pod has unbound immediate PersistentVolumeClaims")),
    ("names a volume, binding not completed", [claim("c", "pv1", completed=False)], [volume("pv1")],
     using("c"), dict.fromkeys(("n1", "n2", "n3"), "pod has unbound immediate PersistentVolumeClaims")),
    ("bound to a volume that does not exist", [claim("c", "gone")], [], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), "pvc(s) bound to non-existent pv(s)")),
    ("WaitForFirstConsumer", [claim("c", cls="local")], [], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), DELAYED_BINDING)),
    ("WaitForFirstConsumer by the beta annotation",
     [claim("c", annotations={"volume.beta.kubernetes.io/storage-class": "local"})], [], using("c"),
     dict.fromkeys(("n1", "n2", "n3"), DELAYED_BINDING)),
])
def test_claims_table(case, claims, volumes, p, want):
    assert reasons_for(p, cache_of(NODES, claims=claims, volumes=volumes, classes=[FAST, LOCAL])) == want, case


def test_a_claim_appearing_lets_the_pod_in_and_bumps_the_generation():
    c = cache_of(NODES, classes=[FAST])
    assert reasons_for(using("c"), c)["n1"] == 'persistentvolumeclaim "c" not found'
    before = c.generation
    c.apply("pv", "ADDED", volume("pv1", ["n1"]))
    c.apply("pvc", "ADDED", claim("c", "pv1"))
    assert c.generation > before
    assert reasons_for(using("c"), c) == {"n1": None, "n2": CONFLICT, "n3": CONFLICT}
    c.apply("pvc", "DELETED", claim("c", "pv1"))
    assert reasons_for(using("c"), c)["n1"] == 'persistentvolumeclaim "c" not found'


def test_a_generic_ephemeral_volume_names_its_own_claim_owned_by_the_pod():
    p = pod("q", volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
    owned = claim("q-scratch", "pv1", ownerReferences=[{"uid": "uid-a-q", "controller": True,
                                                        "kind": "Pod", "name": "q", "apiVersion": "v1"}])
    assert reasons_for(p, cache_of(NODES, claims=[owned], volumes=[volume("pv1", ["n1"])]))["n1"] is None
    stranger = claim("q-scratch", "pv1")
    assert reasons_for(p, cache_of(NODES, claims=[stranger], volumes=[volume("pv1")]))["n1"] == \
        'persistentvolumeclaim "q-scratch" was not created for the pod'


def test_with_kube_schedulers_volume_binder_a_wait_for_first_consumer_claim_refuses_no_node():
    from webhook.scheduling.feasible import node_checks
    c = cache_of(NODES, claims=[claim("c", cls="local")], classes=[LOCAL])
    checks = c.read(lambda state: node_checks(using("c"), state, binder=True))
    assert checks.refusal is None
    assert c.read(lambda state: [checks.reason(info, state) for info in state.nodes.values()]) == \
        [None, None, None]
