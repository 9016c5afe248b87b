"""A pod's claims against the nodes (webhook/scheduling/volumes.py): kube-scheduler 1.20's
VolumeBinding and VolumeZone, and the allocator's refusal of WaitForFirstConsumer claims; and
today's rules on them: ReadWriteOncePod (volume_access.py) and the CSI attach limits
(csi_limits.py), their rows upstream's test tables' situations."""

import pytest

from tests.builders import CSI_DRIVER, csi_volume, csinode
from tests.harness.schema import valid_at
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


# ReadWriteOncePod claims (VolumeRestrictions, 1.29 GA: volume_access.py); a 1.20 API server
# refuses the access mode, so these claims are checked against 1.37's schema (valid_at).
RWOP = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
EVERY = ("n1", "n2", "n3")


def once_pod(name, volume_name="pv1", ns="a"):
    c = claim(name, volume_name, ns=ns)
    c["spec"]["accessModes"] = ["ReadWriteOncePod"]
    return valid_at({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **c})


def user(name, on, *claims, ns="a", **meta):
    p = pod(name, on=on, ns=ns, volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                                         for i, c in enumerate(claims)])
    p["metadata"].update(meta)
    return p


def ended(p, phase="Succeeded"):
    p["status"]["phase"] = phase
    return p


CORDONED = node("n3", None, spec={"unschedulable": True})


@pytest.mark.parametrize("case, claims, pods, p, want", [
    ("unused", [once_pod("c")], [], using("c"), dict.fromkeys(EVERY)),
    ("used by a pod on the same node", [once_pod("c")], [user("o", "n1", "c")], using("c"),
     dict.fromkeys(EVERY, RWOP)),
    ("used by a pod on another node: every node refuses", [once_pod("c")], [user("o", "n2", "c")],
     using("c"), dict.fromkeys(EVERY, RWOP)),
    ("used by a pod that ended", [once_pod("c")], [ended(user("o", "n1", "c"))], using("c"),
     dict.fromkeys(EVERY)),
    ("used by a pod that failed", [once_pod("c")], [ended(user("o", "n1", "c"), "Failed")],
     using("c"), dict.fromkeys(EVERY)),
    ("used by a pod being deleted: it still counts", [once_pod("c")],
     [user("o", "n1", "c", deletionTimestamp="2026-01-01T00:00:00Z")], using("c"),
     dict.fromkeys(EVERY, RWOP)),
    ("a ReadWriteOnce claim is shared", [claim("c", "pv1")], [user("o", "n1", "c")], using("c"),
     dict.fromkeys(EVERY)),
    ("the same name in another namespace", [once_pod("c"), once_pod("c", ns="b")],
     [user("o", "n1", "c", ns="b")], using("c"), dict.fromkeys(EVERY)),
    ("two claims, the second in use", [once_pod("c"), once_pod("d", "pv2")],
     [user("o", "n2", "d")], using("c", "d"), dict.fromkeys(EVERY, RWOP)),
    ("claim not found", [], [user("o", "n1", "c")], using("c"),
     dict.fromkeys(EVERY, 'persistentvolumeclaim "c" not found')),
])
def test_read_write_once_pod_table(case, claims, pods, p, want):
    c = cache_of(NODES, pods, claims=claims, volumes=[volume("pv1"), volume("pv2")])
    assert reasons_for(p, c) == want, case


def test_read_write_once_pod_comes_after_the_nodes_own_rules():
    c = cache_of(NODES[:2] + [CORDONED], [user("o", "n1", "c")], claims=[once_pod("c")],
                 volumes=[volume("pv1")])
    assert reasons_for(using("c"), c) == {"n1": RWOP, "n2": RWOP, "n3": "node(s) were unschedulable"}


def test_a_read_write_once_pod_claim_is_free_again_when_its_pod_goes():
    o = user("o", "n1", "c")
    c = cache_of(NODES, [o], claims=[once_pod("c")], volumes=[volume("pv1")])
    assert reasons_for(using("c"), c)["n1"] == RWOP
    c.apply("pod", "DELETED", o)
    assert reasons_for(using("c"), c)["n1"] is None


# CSI attach limits (NodeVolumeLimits, csi_limits.py): three nodes, n1 with a limit of 2 for
# the driver, n2 with a CSINode that lists the driver without a limit, n3 without a CSINode
LIMITS = [csinode("n1", {CSI_DRIVER: 2, "other.example.com": 1}), csinode("n2", {CSI_DRIVER: None})]
MAX = "node(s) exceed max volume count"
CSI_CLASS = {"metadata": {"name": "csi"}, "provisioner": CSI_DRIVER,
             "volumeBindingMode": "WaitForFirstConsumer"}
VOLUMES = [csi_volume(f"pv{i}") for i in range(1, 5)] + [csi_volume("o1", "other.example.com")]
CLAIMS = [claim(f"c{i}", f"pv{i}") for i in range(1, 5)] + [claim("o1", "o1"), claim("u", cls="csi"),
                                                           claim("u2", cls="csi"), claim("nc")]


def volumes_of(*specs):
    return [{"name": f"v{i}", **s} for i, s in enumerate(specs)]


def pvc(name):
    return {"persistentVolumeClaim": {"claimName": name}}


def on_n1(*claims, name="o"):
    return user(name, "n1", *claims)


EBS = {"awsElasticBlockStore": {"volumeID": "aws://z1/vol-1"}}


@pytest.mark.parametrize("case, pods, p, want", [
    ("under the limit", [], using("c1"), None),
    ("at the limit", [on_n1("c1")], using("c2"), None),
    ("over the limit", [on_n1("c1", "c2")], using("c3"), MAX),
    ("two new volumes over the limit", [on_n1("c1")], using("c2", "c3"), MAX),
    ("the same volume as a pod there counts once", [on_n1("c1", "c2")], using("c1"), None),
    ("a volume two pods share counts once", [on_n1("c1", name="o"), on_n1("c1", name="o2")],
     using("c2"), None),
    ("another driver's volumes count apart", [on_n1("o1")], using("c1", "c2"), None),
    ("the other driver's own limit", [on_n1("o1")], using("o1", "c1"), None),
    ("unbound claim with the driver's class counts", [on_n1("c1", "u2")], using("c2"), MAX),
    ("unbound claim without a class counts nothing", [on_n1("c1", "nc")], using("c2"), None),
    ("an existing pod's claim not found counts nothing", [on_n1("c1", "gone")], using("c2"), None),
    ("a pod without volumes passes a full node", [on_n1("c1", "c2")], pod("q"), None),
    ("a CSI inline volume is not counted", [on_n1("c1", "c2")],
     pod("q", volumes=volumes_of({"csi": {"driver": CSI_DRIVER}})), None),
    ("a generic ephemeral volume's claim counts", [on_n1("c1", "c2")],
     pod("q", volumes=volumes_of({"ephemeral": {"volumeClaimTemplate": {"spec": {}}}})), MAX),
    ("an in-tree EBS volume not migrated counts nothing", [on_n1("c1", "c2")],
     pod("q", volumes=volumes_of(EBS)), None),
])
def test_csi_limits_on_a_node_with_a_limit(case, pods, p, want):
    claims = CLAIMS + [_owned(claim("q-v0", "pv4"))]
    c = cache_of(NODES, pods, claims=claims, volumes=VOLUMES, classes=[CSI_CLASS], csinodes=LIMITS)
    got = reasons_for(p, c)
    assert got["n1"] == want, case
    assert got["n2"] is None and got["n3"] is None, case  # no limit there


def test_csi_limits_count_the_pods_own_unbound_claim_when_kube_scheduler_binds_it():
    """mode=extender: kube-scheduler's volume binder provisions the WaitForFirstConsumer claim
    (the allocator refuses it before: DELAYED_BINDING), and its class names the driver."""
    from webhook.scheduling.feasible import node_checks
    c = cache_of(NODES, [on_n1("c1", "c2")], claims=CLAIMS, volumes=VOLUMES, classes=[CSI_CLASS],
                 csinodes=LIMITS)
    checks = c.read(lambda state: node_checks(using("u"), state, binder=True))
    assert c.read(lambda state: {n: checks.reason(i, state) for n, i in state.nodes.items()}) == \
        {"n1": MAX, "n2": None, "n3": None}


def _owned(c, pod_name="q"):
    c["metadata"]["ownerReferences"] = [{"uid": f"uid-a-{pod_name}", "controller": True,
                                         "kind": "Pod", "name": pod_name, "apiVersion": "v1"}]
    return c


@pytest.mark.parametrize("case, limits, allocatable, want", [
    ("the CSINode's count", [csinode("n1", {CSI_DRIVER: 1})], {}, MAX),
    ("a count of 0", [csinode("n1", {CSI_DRIVER: 0})], {}, MAX),
    ("no CSINode", [], {}, None),
    ("the driver not listed", [csinode("n1", {"other.example.com": 1})], {}, None),
    ("the driver listed without a count", [csinode("n1", {CSI_DRIVER: None})], {}, None),
    ("the node's allocatable (old kubelets)", [], {f"attachable-volumes-csi-{CSI_DRIVER}": "1"}, MAX),
    ("the CSINode's count over the node's allocatable", [csinode("n1", {CSI_DRIVER: 5})],
     {f"attachable-volumes-csi-{CSI_DRIVER}": "1"}, None),
])
def test_csi_limits_where_the_limit_comes_from(case, limits, allocatable, want):
    nodes = [node("n1", "z1", allocatable=allocatable)]
    c = cache_of(nodes, [on_n1("c1")], claims=CLAIMS, volumes=VOLUMES, csinodes=limits)
    assert reasons_for(using("c2"), c)["n1"] == want, case


EBS_DRIVER = "ebs.csi.aws.com"


@pytest.mark.parametrize("case, migrated, want", [
    ("migrated: the inline EBS volumes count with the CSI ones", "kubernetes.io/aws-ebs", MAX),
    ("not migrated on the node", "kubernetes.io/gce-pd", None),
])
def test_csi_limits_count_in_tree_volumes_migrated_on_the_node(case, migrated, want):
    limits = [csinode("n1", {EBS_DRIVER: 2}, migrated=migrated)]
    ebs_pv = {"metadata": {"name": "e1"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-2"}}}
    there = [user("o", "n1", "e1"), pod("o2", on="n1", volumes=volumes_of(EBS))]
    c = cache_of(NODES, there, claims=[claim("e1", "e1")], volumes=[ebs_pv], csinodes=limits)
    new = pod("q", volumes=volumes_of({"awsElasticBlockStore": {"volumeID": "vol-3"}}))
    assert reasons_for(new, c)["n1"] == want, case
    same = pod("q", volumes=volumes_of({"awsElasticBlockStore": {"volumeID": "vol-1"}}))
    assert reasons_for(same, c)["n1"] is None, case  # aws://z1/vol-1 is vol-1: attached already


def test_csi_limits_come_before_the_volumes_node_affinity():
    """NodeVolumeLimits is before VolumeBinding in kube-scheduler's order."""
    local = csi_volume("pv3")
    local["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": HOST, "operator": "In", "values": ["n2"]}]}]}}
    c = cache_of(NODES, [on_n1("c1", "c2")], claims=CLAIMS, volumes=VOLUMES[:2] + [local],
                 csinodes=LIMITS)
    assert reasons_for(using("c3"), c) == {"n1": MAX, "n2": None, "n3": CONFLICT}


def test_a_csinode_appearing_or_changing_applies_at_once():
    c = cache_of(NODES, [on_n1("c1", "c2")], claims=CLAIMS, volumes=VOLUMES)
    assert reasons_for(using("c3"), c)["n1"] is None
    before = c.generation
    c.apply("csinode", "ADDED", csinode("n1", {CSI_DRIVER: 2}))
    assert c.generation > before
    assert reasons_for(using("c3"), c)["n1"] == MAX
    c.apply("csinode", "MODIFIED", csinode("n1", {CSI_DRIVER: 3}))
    assert reasons_for(using("c3"), c)["n1"] is None


def test_builders_csinode_and_csi_volume_are_objects_the_api_server_takes():
    valid_at(csinode("n1", {CSI_DRIVER: 2, "other.example.com": None}, migrated="kubernetes.io/aws-ebs"))
    valid_at(csi_volume("pv1", claim=("a", "c1")))


def test_a_pod_without_volumes_costs_nothing_new():
    """Its facts hold the one empty tuple, as before these rules; a pod with claims holds them."""
    from webhook.scheduling.pod_facts import facts_of
    empty = tuple()
    assert facts_of(pod("q")).disks is empty
    assert facts_of(using("c")).disks == (("claim", "a", "c"),)


def test_a_claims_reading_is_kept_until_the_storage_changes():
    """csi_limits keeps what each claim of the node's pods attaches (read once, not per
    decision); a volume, claim, class or CSINode event drops it."""
    c = cache_of(NODES, [on_n1("c1", "c2")], claims=CLAIMS, volumes=VOLUMES, csinodes=LIMITS)
    assert reasons_for(using("c3"), c)["n1"] == MAX
    assert reasons_for(using("c3"), c)["n1"] == MAX  # from what was kept
    c.apply("pv", "MODIFIED", csi_volume("pv2", "other.example.com"))
    assert reasons_for(using("c3"), c)["n1"] is None  # pv2 is the other driver's now
