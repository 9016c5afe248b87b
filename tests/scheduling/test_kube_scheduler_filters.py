"""The scheduling core's node rules against the real kube-scheduler 1.20 (issue 34).

A private etcd + kube-apiserver, kube-scheduler 1.20 with its default filters
(`percentageOfNodesToScore: 100`: every node is filtered) and a recording extender
(tests/harness/recording_extender.py), on random clusters (tests/harness/random_cluster.py).
One pod at a time: the cluster as the API server holds it (nodes, live pods, claims, volumes,
classes) is read, the pod is created, and kube-scheduler either calls the extender with the
nodes that passed its filters (and binds the pod) or marks it Unschedulable without calling it
(no node passed, or a PreFilter refused the pod: the empty set; the pod is then deleted so that
it never lands later). The core, `node_reasons(pod, state)` on a SchedulerCache fed that same
state, must let exactly those nodes through.

The extender lets one of the passing nodes through, picked from the cluster's seed and the pod's
name, so kube-scheduler binds the pod there: the same seeds give the same run.
Seeds: KUBE_FILTERS_SEED (default 3400) + the cluster's index.
"""

from __future__ import annotations

import copy
import os
import random
import re
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

import pytest
import requests
import yaml

from tests.builders import CSI_DRIVER, csinode
from tests.harness.kube import ADMIN, LocalCluster, unschedulable_condition
from tests.harness.random_cluster import (
    FEATURES,
    HOSTNAME,
    Cluster,
    _claim,
    _volume,
    features,
    make_cluster,
    runtime_class,
)
from tests.harness.recording_extender import RecordingExtender, start_recording_scheduler
from tests.harness.wait import wait_for
from webhook.model.config import MthreadsConfig
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.feasible import node_reasons
from webhook.scheduling.node_selector import selection_of
from webhook.scheduling.pod_status import LIVE_PODS
from webhook.scheduling.reasons import MAX_VOLUME_COUNT, SPREAD
from webhook.scheduling.reasons import VOLUME_NODE_CONFLICT as NODE_CONFLICT
from webhook.scheduling.resources import node_allocatable, pod_requests
from webhook.scheduling.topology_spread import constraints_of

SCHEDULER = "filters-under-test"
CLUSTERS = max(20, int(os.environ.get("KUBE_FILTERS_CLUSTERS", "20")))
PODS_PER_CLUSTER = 26
FEATURE_AT_LEAST = 5  # pods of each feature in a run, or the run checks too little
DEFAULT_SEED = 3400
BASE_SEED = int(os.environ.get("KUBE_FILTERS_SEED", str(DEFAULT_SEED)))
DETAILS = 12  # differences printed in full (at least one of each kind)
# Each of these refuses every node for some pods of the default seeds (kube-scheduler's message
# when no node passed names it): the generated clusters reach every filter.
KUBE_REASONS = (
    "node(s) were unschedulable", "that the pod didn't tolerate", "didn't match Pod's node affinity",
    "didn't have free ports for the requested pod ports", "Insufficient cpu", "Insufficient memory",
    "Insufficient ephemeral-storage", "Insufficient hugepages-2Mi", "Insufficient example.com/rdma",
    "Too many pods", "didn't match pod affinity rules", "didn't match pod anti-affinity rules",
    "didn't satisfy existing pods anti-affinity rules", "didn't match pod topology spread constraints",
    "had volume node affinity conflict", "had no available volume zone",
    "pod has unbound immediate PersistentVolumeClaims", "not found", "is being deleted",
    "pvc(s) bound to non-existent pv(s)", "node(s) exceed max volume count",
)


class RawApi:
    """The API server's JSON as it sends it (as the allocator's watches see it): no typed
    models, one keep-alive session."""

    def __init__(self, cluster: LocalCluster):
        self.base = cluster.url
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE and proxies would win over these
        self.session.verify = str(cluster.ca_file)
        self.session.headers["Authorization"] = f"Bearer {cluster.token(ADMIN)}"

    def _check(self, r: requests.Response, ok=(200, 201, 202)) -> dict:
        if r.status_code not in ok:
            raise AssertionError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else {}

    def get(self, path: str, **params) -> dict:
        return self._check(self.session.get(self.base + path, params=params, timeout=30))

    def items(self, path: str, **params) -> list[dict]:
        return self.get(path, **params)["items"]

    def create(self, path: str, body: dict, ok=(200, 201, 202)) -> dict:
        return self._check(self.session.post(self.base + path, json=body, timeout=30), ok)

    def patch(self, path: str, body: dict) -> dict:
        return self._check(self.session.patch(
            self.base + path, json=body, timeout=30,
            headers={"Content-Type": "application/merge-patch+json"}))

    def delete(self, path: str, grace: int | None = 0, missing_ok: bool = True) -> dict:
        body = {} if grace is None else {"gracePeriodSeconds": grace}
        r = self.session.delete(self.base + path, json=body, timeout=30)
        if r.status_code == 404 and missing_ok:
            return {}
        return self._check(r)


def pods_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def claims_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/persistentvolumeclaims" + (f"/{name}" if name else "")


# -- the cluster on the API server -------------------------------------------------------------


def ready_condition() -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "fake node written by the tests", "lastHeartbeatTime": now,
            "lastTransitionTime": now}


def build(api: RawApi, c: Cluster) -> None:
    """Write the cluster: namespaces, classes, claims, volumes (claims and volumes bound as the
    volume controller binds them), nodes (Ready, as make_fake_node writes them), the pods
    already there; then delete what is to be terminating."""
    for ns in c.namespaces:
        api.create("/api/v1/namespaces", {"metadata": {"name": ns}}, ok=(201, 409))
    for n in c.csinodes:
        api.create("/apis/storage.k8s.io/v1/csinodes", n)
    for cls in c.classes:
        api.create("/apis/storage.k8s.io/v1/storageclasses", cls)
    uids = {}
    for claim in c.claims:
        meta = claim["metadata"]
        made = api.create(claims_path(meta["namespace"]),
                          {"metadata": meta, "spec": claim["spec"]})
        uids[(meta["namespace"], meta["name"])] = made["metadata"]["uid"]
        if claim["status"]["phase"] != "Pending":
            api.patch(claims_path(meta["namespace"], meta["name"]) + "/status",
                      {"status": claim["status"]})
    for pv in c.volumes:
        body = {"metadata": pv["metadata"], "spec": dict(pv["spec"])}
        ref = body["spec"].get("claimRef")
        if ref:
            body["spec"]["claimRef"] = dict(ref, uid=uids[(ref["namespace"], ref["name"])])
        api.create("/api/v1/persistentvolumes", body)
        api.patch(f"/api/v1/persistentvolumes/{pv['metadata']['name']}/status",
                  {"status": pv["status"]})
    for ns, name in c.deleting_claims:
        api.delete(claims_path(ns, name), grace=None)
        held = api.get(claims_path(ns, name))  # its protection finalizer keeps it
        assert held["metadata"].get("deletionTimestamp"), held["metadata"]
    for node in c.nodes:
        name = node["metadata"]["name"]
        api.create("/api/v1/nodes", {"metadata": node["metadata"], "spec": node["spec"]})
        # The NodeTaint admission plugin adds node.kubernetes.io/not-ready; the node lifecycle
        # controller (absent here) would take it off a Ready node.
        api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": node["spec"]["taints"] or None}})
        status = dict(node["status"], conditions=[ready_condition()])
        api.patch(f"/api/v1/nodes/{name}/status", {"status": status})
    for p in c.existing:
        api.create(pods_path(p["metadata"]["namespace"]), p)
    for ns, name in c.terminating:
        api.delete(pods_path(ns, name), grace=30)
        held = api.get(pods_path(ns, name))  # bound: kept until its (absent) kubelet confirms
        assert held["metadata"].get("deletionTimestamp"), held["metadata"]


def tear_down(api: RawApi, c: Cluster) -> None:
    """Remove what the cluster made (finalizers first: no controller would ever lift them)."""
    for ns in c.namespaces:
        for p in api.items(pods_path(ns)):
            api.delete(pods_path(ns, p["metadata"]["name"]))
        for claim in api.items(claims_path(ns)):
            path = claims_path(ns, claim["metadata"]["name"])
            api.patch(path, {"metadata": {"finalizers": None}})
            api.delete(path, grace=None)
    for pv in c.volumes:
        path = f"/api/v1/persistentvolumes/{pv['metadata']['name']}"
        api.patch(path, {"metadata": {"finalizers": None}})
        api.delete(path, grace=None)
    for cls in c.classes:
        api.delete(f"/apis/storage.k8s.io/v1/storageclasses/{cls['metadata']['name']}", grace=None)
    for node in c.nodes:
        api.delete(f"/api/v1/nodes/{node['metadata']['name']}", grace=None)
    for n in c.csinodes:
        api.delete(f"/apis/storage.k8s.io/v1/csinodes/{n['metadata']['name']}", grace=None)


@dataclass
class State:
    nodes: list[dict]
    pods: list[dict]
    claims: list[dict]
    volumes: list[dict]
    classes: list[dict]
    csinodes: list[dict] = field(default_factory=list)


def read_state(api: RawApi) -> State:
    return State(api.items("/api/v1/nodes"), api.items("/api/v1/pods", fieldSelector=LIVE_PODS),
                 api.items("/api/v1/persistentvolumeclaims"), api.items("/api/v1/persistentvolumes"),
                 api.items("/apis/storage.k8s.io/v1/storageclasses"),
                 api.items("/apis/storage.k8s.io/v1/csinodes"))


def core_reasons(pod: dict, state: State) -> dict[str, str | None]:
    """The core's answer for every node, on a cache fed the state as the watches list it."""
    cache = SchedulerCache(MthreadsConfig())
    cache.apply("node", "RESET", state.nodes)
    cache.apply("pod", "RESET", state.pods)
    cache.apply("pvc", "RESET", state.claims)
    cache.apply("pv", "RESET", state.volumes)
    cache.apply("storageclass", "RESET", state.classes)
    cache.apply("csinode", "RESET", state.csinodes)
    return cache.read(lambda s: node_reasons(pod, s))


def decided(api: RawApi, ns: str, name: str) -> dict:
    """The pod once bound or marked unschedulable by kube-scheduler."""
    def check():
        p = api.get(pods_path(ns, name))
        return p if p["spec"].get("nodeName") or unschedulable_condition(p) else None
    return wait_for(check, 30, 0.02, what=f"{ns}/{name} bound or unschedulable")


def probe(api: RawApi, extender: RecordingExtender, c: Cluster, attempt: int) -> bool:
    """Has kube-scheduler seen the cluster as written? A pod that tolerates everything and that
    the extender lets nowhere: its FitError counts kube-scheduler's nodes ("0/N nodes"), and the
    extender hears which of them passed."""
    ns, name = c.namespaces[0], f"{c.tag}-probe-{attempt}"
    made = api.create(pods_path(ns), {"metadata": {"name": name, "namespace": ns}, "spec": {
        "schedulerName": SCHEDULER, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "busybox:1.36"}]}})
    p = decided(api, ns, name)
    api.delete(pods_path(ns, name))
    cond = unschedulable_condition(p)
    assert cond is not None, f"the probe was bound: {p['spec'].get('nodeName')}"
    m = re.match(r"0/(\d+) nodes are available", cond.get("message") or "")
    names = {n["metadata"]["name"] for n in c.nodes}
    seen = set().union(*extender.calls(made["metadata"]["uid"]))
    return bool(m) and int(m.group(1)) == len(names) and seen <= names


def settle(api: RawApi, extender: RecordingExtender, c: Cluster) -> None:
    attempt = 0

    def synced():
        nonlocal attempt
        attempt += 1
        return probe(api, extender, c, attempt)
    wait_for(synced, 30, 0.2, what=f"kube-scheduler sees cluster {c.tag} as written")
    time.sleep(0.2)  # the other watches (claims, volumes, pods) were written before the nodes


# -- one pod, both answers ---------------------------------------------------------------------


@dataclass
class Outcome:
    cluster: Cluster
    pod: dict  # as the API server stored it at creation
    asked: dict  # as generated (features are read from it: the API server adds tolerations)
    passed: set[str]  # the nodes that passed kube-scheduler's filters
    reasons: dict[str, str | None] | str  # the core's answer per node, or its traceback
    message: str = ""  # kube-scheduler's reasons when no node passed
    node: str = ""  # where kube-scheduler bound it
    anomalies: list[str] = field(default_factory=list)
    state: State | None = None  # what both decided on, kept when they differ


def run_pod(api: RawApi, extender: RecordingExtender, c: Cluster, pod: dict) -> Outcome:
    state = read_state(api)
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    made = api.create(pods_path(ns), pod)
    try:
        reasons: dict[str, str | None] | str = core_reasons(made, state)
    except Exception:
        reasons = traceback.format_exc()
    p = decided(api, ns, name)
    calls = extender.calls(made["metadata"]["uid"])
    out = Outcome(c, made, pod, set(calls[0]) if calls else set(), reasons)
    if len(calls) > 1:
        out.anomalies.append(f"kube-scheduler filtered the pod {len(calls)} times: {calls}")
    if p["spec"].get("nodeName"):
        out.node = p["spec"]["nodeName"]
        if name in c.terminate_when_bound:  # kept, terminating, until its (absent) kubelet confirms
            api.delete(pods_path(ns, name), grace=30)
        if not calls:
            out.anomalies.append("bound without a call of the extender")
        elif out.node not in out.passed:
            out.anomalies.append(f"bound to {out.node}, which the extender did not hear of")
    else:
        out.message = (unschedulable_condition(p) or {}).get("message", "")
        api.delete(pods_path(ns, name))  # so that it never lands later
        if calls:
            out.anomalies.append(f"unschedulable after the extender heard {calls}: {out.message}")
    if differences(out):
        out.state = state
    return out


@dataclass
class Difference:
    outcome: Outcome
    node: str  # "*" when the core raised
    kube: bool  # the node passed kube-scheduler's filters
    core: str | None | Exception  # the core's reason (None: it passed), or what it raised

    def kind(self) -> str:
        if isinstance(self.core, Exception):
            return "the core raised"
        if self.kube:
            return f"kube-scheduler passes, core refuses: {self.core}"
        return "kube-scheduler refuses, core passes" + (
            f" (no node passed: {re.sub(r'[0-9]+', 'N', self.outcome.message)})"
            if not self.outcome.passed else "")

    def line(self) -> str:
        o = self.outcome
        core = "passes" if self.core is None else f"refuses ({self.core})"
        node = _node_of(o.state, self.node)
        allocatable = ",".join(sorted(((node.get("status") or {}).get("allocatable") or {})))
        return (f"  {o.cluster.seed} {_name(o.pod)} {self.node}: "
                f"{'passes' if self.kube else 'refuses'} / {core}; "
                f"{','.join(sorted(features(o.asked)))}; the node's allocatable lists {allocatable}")

    def describe(self) -> str:
        o = self.outcome
        kube = "passed its filters" if self.kube else "did not pass its filters"
        if not o.passed and o.message:
            kube += f" (no node passed: {o.message})"
        elif o.node:
            kube += f" (the pod was bound to {o.node})"
        core = "None (passes)" if self.core is None else repr(self.core)
        return (f"seed {o.cluster.seed} (cluster {o.cluster.tag}) pod {_name(o.pod)} node {self.node}\n"
                f"  kube-scheduler: {kube}\n  core: {core}\n"
                f"  features: {sorted(features(o.asked))}\n"
                f"  pod:\n{indent(pod_yaml(o.pod), 4)}\n"
                f"  node {self.node}:\n{indent(node_summary(_node_of(o.state, self.node)), 4)}\n"
                f"  the pods on it:\n{indent(pods_on(o.state, self.node), 4)}"
                + (f"\n  its claims:\n{indent(claims_of(o.state, o.pod), 4)}"
                   if any("persistentVolumeClaim" in v for v in o.pod["spec"].get("volumes") or ())
                   else ""))


def stricter_by_design(d: Difference) -> bool:
    """The one place the core refuses what kube-scheduler 1.20 lets through, on purpose: a
    bound volume pinned by `matchFields` (metadata.name). kube-scheduler 1.20 matches a
    volume's node affinity against a node made of the labels alone and skips `matchFields`
    for a node without a name, so such a volume accepts every node and the pod lands where its
    volume is not; later releases match the name. The core keeps the pod with its volume."""
    if not d.kube or d.core != NODE_CONFLICT or d.outcome.state is None:
        return False
    ns = d.outcome.pod["metadata"]["namespace"]
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in d.outcome.state.claims}
    volumes = {v["metadata"]["name"]: v for v in d.outcome.state.volumes}
    for v in d.outcome.pod["spec"].get("volumes") or ():
        claim = claims.get((ns, (v.get("persistentVolumeClaim") or {}).get("claimName")))
        pv = volumes.get(((claim or {}).get("spec") or {}).get("volumeName") or "")
        terms = ((((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}) \
            .get("nodeSelectorTerms") or ()
        if any(t.get("matchFields") for t in terms):
            return True
    return False


def newer_spread_rule(d: Difference) -> bool:
    """The rule of today the core applies where kube-scheduler 1.20 did not, on the fields a
    1.20 API server keeps: from 1.24 a spread constraint counts only the pods on the nodes it
    includes (that pass the pod's nodeSelector and required node affinity and carry every
    constraint's key); 1.20 counted every pod on a node whose pair was eligible. A difference
    is that rule's when the node's spread answers by the two countings differ, kube-scheduler's
    is 1.20's and the core's is 1.24's."""
    o = d.outcome
    if d.core not in (None, SPREAD) or o.state is None or d.node == "*":
        return False
    old, new = (spread_passes(o.pod, o.state, d.node, since_1_24) for since_1_24 in (False, True))
    return old != new and old == d.kube and new == (d.core is None)


def spread_passes(pod: dict, state: State, name: str, since_1_24: bool) -> bool:
    """kube-scheduler's PodTopologySpread filter for the pod on the node, on the fields a 1.20
    API server keeps: the pairs of the nodes the pod's selector and affinity accept that carry
    every key, each with the matching pods (the pod's namespace, not terminating) of every node
    with that pair (`since_1_24`: of those nodes only)."""
    constraints = constraints_of(pod)
    assert isinstance(constraints, tuple), constraints
    nodes = {n["metadata"]["name"]: n for n in state.nodes}
    labels = {n: node["metadata"].get("labels") or {} for n, node in nodes.items()}
    selection = selection_of(pod["spec"])
    keys = [c.topology_key for c in constraints]
    counts: Counter[tuple[str, str]] = Counter({
        (k, node_labels[k]): 0 for n, node_labels in labels.items()
        if all(k in node_labels for k in keys) and selection.matches(nodes[n]) for k in keys})
    ns = pod["metadata"]["namespace"]
    for p in state.pods:
        where = p["spec"].get("nodeName") or ""
        on = labels.get(where)
        if on is None or p["metadata"].get("namespace") != ns or p["metadata"].get("deletionTimestamp"):
            continue
        if since_1_24 and not (all(k in on for k in keys) and selection.matches(nodes[where])):
            continue
        for c in constraints:
            pair = (c.topology_key, on.get(c.topology_key, ""))
            if pair in counts and c.selector.matches(p["metadata"].get("labels") or {}):
                counts[pair] += 1
    for c in constraints:
        value = labels[name].get(c.topology_key)
        if value is None:
            return False
        domains = [m for (k, _), m in counts.items() if k == c.topology_key]
        self_match = c.selector.matches(pod["metadata"].get("labels") or {})
        if domains and counts[(c.topology_key, value)] + self_match - min(domains) > c.max_skew:
            return False
    return True


def newer_fit_rule(d: Difference) -> bool:
    """The rule of today the core applies where kube-scheduler 1.20 did not: from 1.28
    NodeResourcesFit compares with allocatable only the resources the pod requests (and the
    pod count); 1.20 compared cpu, memory and ephemeral storage whenever the pod requested
    anything, so a node where bound pods hold more of one than allocatable refused every pod
    that requests something else. A difference is that rule's when kube-scheduler refused the
    node, the core let it through, and 1.20's comparison refuses it for a resource the pod does
    not request."""
    o = d.outcome
    if d.kube or d.core is not None or o.state is None or d.node == "*":
        return False
    return refused_by_1_20_fit_alone(o.pod, o.state, d.node)


def refused_by_1_20_fit_alone(pod: dict, state: State, name: str) -> bool:
    """Whether 1.20's NodeResourcesFit refuses the node for a resource the pod does not request:
    the pod requests something, and of cpu, memory or ephemeral storage, one it does not
    request is over allocatable on the node."""
    cache = SchedulerCache(MthreadsConfig())
    cache.apply("node", "RESET", state.nodes)
    cache.apply("pod", "RESET", state.pods)
    wants = pod_requests(pod)
    if not (wants.cpu_milli or wants.memory_bytes or wants.other):
        return False
    requested = cache.read(lambda s: s.requested_on(name))
    allocatable = node_allocatable(_node_of(state, name))
    storage = "ephemeral-storage"
    return any(not want and have < used for want, have, used in (
        (wants.cpu_milli, allocatable.cpu_milli, requested.cpu_milli),
        (wants.memory_bytes, allocatable.memory_bytes, requested.memory_bytes),
        (wants.amount(storage), allocatable.amount(storage), requested.amount(storage))))


def differences(o: Outcome) -> list[Difference]:
    """Each node one answer lets through and the other does not (every node the core knows
    and every node kube-scheduler let through)."""
    if isinstance(o.reasons, str):
        return [Difference(o, "*", bool(o.passed), RuntimeError(o.reasons))]
    nodes = set(o.reasons) | o.passed
    return [Difference(o, n, n in o.passed, o.reasons.get(n, "(a node the core does not know)"))
            for n in sorted(nodes) if (n in o.passed) != (n in o.reasons and o.reasons[n] is None)]


def _name(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _node_of(state: State | None, name: str) -> dict:
    for n in state.nodes if state else ():
        if n["metadata"]["name"] == name:
            return n
    return {"metadata": {"name": name}}


def indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def _dump(obj) -> str:
    return yaml.safe_dump(obj, default_flow_style=None, width=110, sort_keys=True).rstrip()


def node_summary(node: dict) -> str:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    return _dump({"labels": node["metadata"].get("labels"), "taints": spec.get("taints"),
                  "unschedulable": spec.get("unschedulable"),
                  "allocatable": status.get("allocatable")})


def pod_yaml(pod: dict) -> str:
    """The pod as created, without what the API server adds that no filter reads."""
    p = {"metadata": {k: v for k, v in pod["metadata"].items()
                      if k in ("name", "namespace", "labels")},
         "spec": {k: copy.deepcopy(v) for k, v in pod["spec"].items()
                  if k not in ("schedulerName", "terminationGracePeriodSeconds", "dnsPolicy",
                               "restartPolicy", "securityContext", "enableServiceLinks",
                               "preemptionPolicy", "priority")}}
    for c in p["spec"].get("containers", []) + p["spec"].get("initContainers", []):
        for k in ("terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "command"):
            c.pop(k, None)
    return _dump(p)


def pods_on(state: State | None, node: str) -> str:
    """One line per pod bound to the node: what the filters read of it."""
    lines = []
    for p in state.pods if state else ():
        if p["spec"].get("nodeName") != node:
            continue
        spec = p["spec"]
        requests = [(c.get("resources") or {}).get("requests") for c in spec.get("containers") or ()]
        ports = [f"{q.get('hostIP', '')}:{q['hostPort']}/{q.get('protocol', 'TCP')}"
                 for c in spec.get("containers") or () for q in c.get("ports") or ()
                 if q.get("hostPort")]
        anti = (spec.get("affinity") or {}).get("podAntiAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        lines.append(f"{_name(p)} labels={p['metadata'].get('labels', {})}"
                     + (" terminating" if p["metadata"].get("deletionTimestamp") else "")
                     + (f" hostPorts={ports}" if ports else "")
                     + (f" requests={requests}" if any(requests) else "")
                     + (f" overhead={spec['overhead']}" if spec.get("overhead") else "")
                     + (f" antiAffinity={anti}" if anti else ""))
    return "\n".join(lines) or "(none)"


def claims_of(state: State | None, pod: dict) -> str:
    """The pod's claims as the API server held them, and their volumes."""
    if state is None:
        return ""
    ns = pod["metadata"]["namespace"]
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in state.claims}
    volumes = {v["metadata"]["name"]: v for v in state.volumes}
    out = []
    for v in pod["spec"].get("volumes") or ():
        name = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if not name:
            continue
        claim = claims.get((ns, name))
        if claim is None:
            out.append(f"{name}: not found")
            continue
        pv = volumes.get(claim["spec"].get("volumeName") or "")
        meta = claim["metadata"]
        out.append(f"{name}:\n" + indent(_dump({
            "annotations": meta.get("annotations"), "deleting": bool(meta.get("deletionTimestamp")),
            "spec": claim["spec"], "phase": (claim.get("status") or {}).get("phase")}), 2))
        if pv is not None:
            out.append(f"  its volume {pv['metadata']['name']}:\n" + indent(_dump({
                "labels": pv["metadata"].get("labels"),
                "nodeAffinity": pv["spec"].get("nodeAffinity")}), 4))
    return "\n".join(out)


def reasons_of(message: str) -> list[str]:
    """kube-scheduler 1.20's FitError, "0/N nodes are available: 3 Insufficient cpu, 1 node(s)
    had taint {a: b}, that the pod didn't tolerate.", as its reasons without their counts (a
    PreFilter's refusal is one reason for every node)."""
    body = message.split(": ", 1)[1] if ": " in message else message
    return [re.sub(r"^\d+ ", "", part).rstrip(".") for part in re.split(r", (?=\d+ )", body)]


# -- the test ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A private API server (this test owns every node, volume and class in it), the
    recording extender and kube-scheduler; each stopped by its PID at the end."""
    workdir = tmp_path_factory.mktemp("kube-filters")
    cluster = LocalCluster(workdir / "kube").start()
    extender = RecordingExtender().start()
    scheduler = None
    try:
        api = RawApi(cluster)
        api.create("/apis/node.k8s.io/v1/runtimeclasses", runtime_class())
        scheduler = start_recording_scheduler(cluster, workdir, cluster.kubeconfig(ADMIN),
                                              extender.url, SCHEDULER)
        wait_for(scheduler.healthy, 60, what="kube-scheduler /healthz")
        yield api, extender, scheduler
    finally:
        if scheduler is not None:
            scheduler.stop()
            print(f"--- {scheduler.log_path.name} (tail) ---\n{scheduler.tail(20)}")
        extender.stop()
        cluster.stop()


def chooser(seed: int):
    """The extender's pick: one of the nodes that passed, from the seed and the pod's name (the
    probe: none)."""
    def choose(pod: dict, names: list[str]) -> list[str]:
        if "-probe-" in pod["metadata"]["name"]:
            return []
        return [random.Random(f"{seed}/{pod['metadata']['name']}").choice(sorted(names))]
    return choose


@pytest.mark.cluster
def test_the_core_lets_through_the_nodes_kube_scheduler_lets_through(stack):
    api, extender, scheduler = stack
    started = time.monotonic()
    outcomes: list[Outcome] = []
    seeds = [BASE_SEED + i for i in range(CLUSTERS)]
    print(f"\nseeds {seeds[0]}..{seeds[-1]} (KUBE_FILTERS_SEED={BASE_SEED}, "
          f"KUBE_FILTERS_CLUSTERS={CLUSTERS})")
    for index, seed in enumerate(seeds):
        c = make_cluster(seed, index, PODS_PER_CLUSTER, SCHEDULER)
        extender.choose = chooser(seed)
        build(api, c)
        try:
            settle(api, extender, c)
            outcomes += [run_pod(api, extender, c, pod) for pod in c.pods]
        finally:
            tear_down(api, c)
        assert scheduler.running(), f"kube-scheduler exited:\n{scheduler.tail()}"
    took = time.monotonic() - started

    every = [d for o in outcomes for d in differences(o)]
    newer = [d for d in every if newer_spread_rule(d)]
    newer_fit = [d for d in every if newer_fit_rule(d) and not newer_spread_rule(d)]
    found = [d for d in every
             if not stricter_by_design(d) and not newer_spread_rule(d) and not newer_fit_rule(d)]
    stricter = len(every) - len(found) - len(newer) - len(newer_fit)
    wrong = {id(d.outcome) for d in found}
    by_feature = Counter(f for o in outcomes for f in features(o.asked))
    wrong_by_feature = Counter(f for o in outcomes if id(o) in wrong for f in features(o.asked))
    bound = [o for o in outcomes if o.passed]
    partial = [o for o in bound if not isinstance(o.reasons, str) and len(o.passed) < len(o.reasons)]
    refused = [o for o in outcomes if not o.passed]
    kube_reasons = Counter(re.sub(r'\{[^}]*\}|"[^"]*"', "...", r)
                           for o in refused for r in reasons_of(o.message))
    core_reasons_seen = Counter(re.sub(r'"[^"]*"', "...", r) for o in outcomes
                                if not isinstance(o.reasons, str)
                                for r in o.reasons.values() if r is not None)
    print(f"{len(outcomes)} pods over {len(seeds)} clusters in {took:.0f} s: {len(bound)} bound "
          f"({len(partial)} of them with some nodes filtered out), {len(refused)} on no node; "
          f"{len(found)} node answers differ, on {len(wrong)} pods; {stricter} refused by the core "
          "on purpose (volumes pinned by matchFields: stricter_by_design); "
          f"{len(newer)} by the spread counting of 1.24 (newer_spread_rule), on "
          f"{len({id(d.outcome) for d in newer})} pods; "
          f"{len(newer_fit)} by NodeResourcesFit of 1.28 (newer_fit_rule), on "
          f"{len({id(d.outcome) for d in newer_fit})} pods")
    for d in newer:  # shown, not hidden: each answer the counting of 1.24 changes
        print("by the spread counting of 1.24:" + d.line())
    for d in newer_fit:  # shown, not hidden: each answer the fit of 1.28 changes
        print("by NodeResourcesFit of 1.28:" + d.line())
    print("pods per feature (with a difference): " + ", ".join(
        f"{f} {by_feature[f]} ({wrong_by_feature[f]})" for f in FEATURES))
    print("kube-scheduler's reasons when no node passed (pods): " + "; ".join(
        f"{r} ×{n}" for r, n in kube_reasons.most_common()))
    print("the core's reasons (nodes): " + "; ".join(
        f"{r} ×{n}" for r, n in core_reasons_seen.most_common()))

    problems = []
    # what makes a pass mean something: enough pods, every feature, both outcomes, every filter
    if len(outcomes) < 500 or len(seeds) < 20:
        problems.append(f"only {len(outcomes)} pods over {len(seeds)} clusters")
    problems += [f"only {by_feature[f]} pods with {f}" for f in FEATURES
                 if by_feature[f] < FEATURE_AT_LEAST]
    if len(bound) < 100 or len(partial) < 50 or len(refused) < 50:
        problems.append(f"outcomes too uniform: {len(bound)} bound ({len(partial)} with some nodes "
                        f"filtered out), {len(refused)} on no node")
    problems += [f"no pod was refused for {r!r}" for r in KUBE_REASONS
                 if BASE_SEED == DEFAULT_SEED and not any(r in k for k in kube_reasons)]
    problems += [f"{o.cluster.tag} {o.pod['metadata']['name']}: {a}" for o in outcomes
                 for a in o.anomalies]
    if extender.errors:
        problems.append(f"the extender failed: {extender.errors[:5]}")
    if found:
        kinds = Counter(d.kind() for d in found)
        problems.append(f"{len(found)} node answers differ, on {len(wrong)} of {len(outcomes)} pods:\n"
                        + "\n".join(f"  {n:4d}  {k}" for k, n in kinds.most_common()))
        problems.append("each difference (seed pod node: kube-scheduler / core; the pod's features; "
                        "what the node's allocatable lists):\n"
                        + "\n".join(d.line() for d in found[:100])
                        + (f"\n  ... and {len(found) - 100} more" if len(found) > 100 else ""))
        shown = list({d.kind(): d for d in reversed(found)}.values())[::-1]  # one of each kind
        shown += [d for d in found if all(d is not s for s in shown)][:max(0, DETAILS - len(shown))]
        problems += [d.describe() for d in shown]
    assert not problems, "\n\n".join(problems)


# -- CSI attach limits: one cluster made for them ----------------------------------------------

CSI_OTHER = "other.example.com"


def csi_cluster() -> Cluster:
    """Four nodes: k0 attaches 1 volume of the driver, k1 2, k2's CSINode lists the driver
    without a count (and 0 of the other driver), k3 has no CSINode (csi_nodes); six CSI
    volumes bound to claims c0..c5 and one of the other driver (c6); pods already using
    c0 (on k0), c1 (on k1), c2 and c3 (on k2)."""
    tag, ns = "csi", "csi-a"
    nodes = [{"metadata": {"name": f"{tag}-k{i}", "labels": {HOSTNAME: f"{tag}-k{i}"}},
              "spec": {"taints": []},
              "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                         "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
             for i in range(4)]
    claims, volumes = [], []
    for i in range(7):
        driver = CSI_OTHER if i == 6 else CSI_DRIVER
        claims.append(_claim(ns, f"c{i}", "", f"{tag}-pv{i}", True))
        volumes.append(_volume(f"{tag}-pv{i}", "", {"csi": {"driver": driver,
                                                            "volumeHandle": f"h{i}"}}, (ns, f"c{i}")))
    c = Cluster(0, tag, [ns], nodes, [], claims, volumes, [], [], [], csinodes=csi_nodes(tag))
    c.existing = [_csi_pod(f"e{i}", ns, claims, f"{tag}-k{k}")
                  for i, (k, claims) in enumerate([(0, ["c0"]), (1, ["c1"]), (2, ["c2", "c3"])])]
    c.pods = [_csi_pod(name, ns, claims) for name, claims in [
        ("q-new", ["c4"]),  # k0 is full
        ("q-shared", ["c0"]),  # the volume k0 has attached counts once there
        ("q-two", ["c4", "c5"]),  # two more: over k0's limit and, with one there, k1's
        ("q-plain", []),  # no volume: every node
        ("q-other", ["c6"]),  # the other driver: k2 attaches none of it
        ("q-again", ["c5"]),
    ]]
    return c


def csi_nodes(tag: str) -> list[dict]:
    return [csinode(f"{tag}-k0", {CSI_DRIVER: 1}), csinode(f"{tag}-k1", {CSI_DRIVER: 2}),
            csinode(f"{tag}-k2", {CSI_DRIVER: None, CSI_OTHER: 0})]


def _csi_pod(name: str, ns: str, claims: list[str], node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox:1.36"}],
                  "volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                              for i, c in enumerate(claims)]}
    if node is None:
        spec["schedulerName"] = SCHEDULER
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


@pytest.mark.cluster
def test_the_core_and_kube_scheduler_agree_on_csi_attach_limits(stack):
    """kube-scheduler 1.20's NodeVolumeLimits (CSINode counts) and the core's csi_limits.py,
    pod by pod on the same state."""
    api, extender, scheduler = stack
    c = csi_cluster()
    extender.choose = chooser(47)
    try:
        build(api, c)
        settle(api, extender, c)
        outcomes = [run_pod(api, extender, c, pod) for pod in c.pods]
    finally:
        tear_down(api, c)
    found = [d for o in outcomes for d in differences(o)]
    assert not found, "\n\n".join(d.describe() for d in found)
    assert not [a for o in outcomes for a in o.anomalies]
    limited = [o for o in outcomes if not isinstance(o.reasons, str)
               and MAX_VOLUME_COUNT in o.reasons.values()]
    assert {_name(o.pod) for o in limited} >= {"csi-a/q-new", "csi-a/q-two"}, \
        [(o.pod["metadata"]["name"], o.reasons) for o in outcomes]
    assert all(o.passed for o in limited)  # kube-scheduler bound them elsewhere: the limit, per node


# -- the comparison itself, without a cluster --------------------------------------------------


def _outcome(passed: set[str], reasons, message: str = "") -> Outcome:
    cluster = make_cluster(BASE_SEED, 0, 1, SCHEDULER)
    pod = cluster.pods[0]
    made = copy.deepcopy(pod)
    made["metadata"]["uid"] = "u-1"
    state = State([{"metadata": {"name": "n1", "labels": {"zone": "a"}},
                    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                    "status": {"allocatable": {"cpu": "2"}}}],
                  [{"metadata": {"name": "old", "namespace": "x", "labels": {"app": "web"}},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}], [], [], [])
    return Outcome(cluster, made, pod, passed, reasons, message, state=state)


def test_a_node_one_answer_lets_through_and_the_other_not_is_a_difference():
    same = _outcome({"n1"}, {"n1": None, "n2": "node(s) were unschedulable"})
    assert differences(same) == []
    assert differences(_outcome(set(), {"n1": "Too many pods"}, "0/1 nodes are available: 1 Too many pods.")) == []
    o = _outcome({"n1"}, {"n1": "node(s) had untolerated taint", "n2": None})
    assert [(d.node, d.kube, d.core) for d in differences(o)] == [
        ("n1", True, "node(s) had untolerated taint"), ("n2", False, None)]
    unknown = _outcome({"n3"}, {"n1": None})
    assert [(d.node, d.kube) for d in differences(unknown)] == [("n1", False), ("n3", True)]
    raised = differences(_outcome(set(), "Traceback ...\nKeyError: 'spec'"))
    assert len(raised) == 1 and raised[0].kind() == "the core raised"


def test_a_difference_prints_the_seed_the_pod_the_node_and_both_answers():
    o = _outcome(set(), {"n1": None}, "0/1 nodes are available: 1 Too many pods.")
    (d,) = differences(o)
    text = d.describe()
    assert f"seed {BASE_SEED} " in text and f"pod {_name(o.pod)} node n1" in text
    assert "kube-scheduler: did not pass its filters (no node passed: 0/1 nodes are available: 1 Too many pods.)" in text
    assert "core: None (passes)" in text
    assert f"name: {o.pod['metadata']['name']}" in text and "containers:" in text  # the pod's YAML
    assert "taints:" in text and "x/old labels={'app': 'web'}" in text  # the node and its pods
    assert d.kind() == "kube-scheduler refuses, core passes (no node passed: N/N nodes are available: N Too many pods.)"
    assert f"{BASE_SEED} {_name(o.pod)} n1: refuses / passes;" in d.line()


def test_kube_schedulers_message_is_read_as_its_reasons():
    assert reasons_of("0/7 nodes are available: 2 Insufficient cpu, 1 node(s) had taint "
                      "{dedicated: gpu}, that the pod didn't tolerate, 4 node(s) didn't match "
                      "Pod's node affinity.") == [
        "Insufficient cpu", "node(s) had taint {dedicated: gpu}, that the pod didn't tolerate",
        "node(s) didn't match Pod's node affinity"]
    assert reasons_of('0/5 nodes are available: 5 persistentvolumeclaim "c-missing-0" not found.') == [
        'persistentvolumeclaim "c-missing-0" not found']


def test_a_difference_shows_the_pods_claims_and_their_volumes():
    o = _outcome(set(), {"n1": None})
    o.pod["spec"]["volumes"] = [{"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                                {"name": "b", "persistentVolumeClaim": {"claimName": "gone"}}]
    ns = o.pod["metadata"]["namespace"]
    o.state.claims = [{"metadata": {"name": "data", "namespace": ns}, "spec": {"volumeName": "pv-1"},
                       "status": {"phase": "Bound"}}]
    o.state.volumes = [{"metadata": {"name": "pv-1", "labels": {"topology.kubernetes.io/zone": "z"}},
                        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": []}}}}]
    text = differences(o)[0].describe()
    assert "its claims:" in text and "data:" in text and "volumeName: pv-1" in text
    assert "its volume pv-1:" in text and "topology.kubernetes.io/zone: z" in text
    assert "gone: not found" in text


def test_only_a_volume_pinned_by_matchfields_makes_a_refusal_stricter_by_design():
    o = _outcome({"n1"}, {"n1": NODE_CONFLICT})
    ns = o.pod["metadata"]["namespace"]
    o.pod["spec"]["volumes"] = [{"name": "a", "persistentVolumeClaim": {"claimName": "data"}}]
    o.state.claims = [{"metadata": {"name": "data", "namespace": ns}, "spec": {"volumeName": "pv-1"}}]
    pinned = {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}
    o.state.volumes = [{"metadata": {"name": "pv-1"}, "spec": pinned}]
    (d,) = differences(o)
    assert stricter_by_design(d)
    o.state.volumes = [{"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}}]
    assert not stricter_by_design(differences(o)[0])  # a label: kube-scheduler would refuse too
    assert not stricter_by_design(differences(_outcome({"n1"}, {"n1": "Too many pods"}))[0])


def test_only_a_count_that_1_20_made_on_a_node_the_pod_refuses_is_the_newer_spread_rule():
    """A pod of zone a, spread by zone, with its affinity refusing n2: the matching pod on n2
    counted for zone a in 1.20 (n1 refused, n3 passes), not from 1.24 (n1 passes, n3 too)."""
    o = _outcome({"n3"}, {"n1": None, "n2": "node(s) didn't match Pod's node affinity", "n3": None})
    o.pod["metadata"].update(namespace="x", labels={"app": "web"})
    o.pod["spec"] = {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n2"]}]}]}}}}

    def node(name, zone):
        return {"metadata": {"name": name, "labels": {"zone": zone, "kubernetes.io/hostname": name}},
                "spec": {}, "status": {"allocatable": {"cpu": "2"}}}
    o.state.nodes = [node("n1", "a"), node("n2", "a"), node("n3", "b")]
    o.state.pods = [{"metadata": {"name": "w", "namespace": "x", "labels": {"app": "web"}},
                     "spec": {"nodeName": "n2", "containers": [{"name": "c"}]}}]
    (d,) = differences(o)
    assert (d.node, d.kube, d.core) == ("n1", False, None) and newer_spread_rule(d)
    o.reasons = {"n1": SPREAD, "n2": "node(s) didn't match Pod's node affinity", "n3": None}
    assert differences(o) == []  # the core counting as 1.20 would agree: no difference
    o.reasons = {"n1": None, "n2": "node(s) didn't match Pod's node affinity", "n3": SPREAD}
    o.passed = {"n1", "n3"}
    (d,) = differences(o)  # n3: a difference 1.20's counting does not explain
    assert d.node == "n3" and not newer_spread_rule(d)
    o.state.pods[0]["spec"]["nodeName"] = "n1"  # on a node the pod accepts: counted by both
    o.passed, o.reasons = {"n3"}, {"n1": None, "n2": "node(s) didn't match Pod's node affinity",
                                   "n3": None}
    (d,) = differences(o)
    assert d.node == "n1" and not newer_spread_rule(d)


def test_only_a_node_over_allocatable_in_what_the_pod_does_not_request_is_the_newer_fit_rule():
    """n1 (2 cpus, 1Gi) holds a pod of 512Mi beyond its 1Gi: kube-scheduler 1.20 refused there
    a pod asking 1 cpu and no memory; today's fit (and the core) let it in."""
    o = _outcome(set(), {"n1": None}, "0/1 nodes are available: 1 Insufficient memory.")
    o.pod["spec"] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    o.state.nodes = [{"metadata": {"name": "n1"}, "spec": {},
                      "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"}}}]
    o.state.pods = [{"metadata": {"name": "big", "namespace": "x", "uid": "u-big"},
                     "spec": {"nodeName": "n1", "containers": [
                         {"name": "c", "resources": {"requests": {"memory": "1536Mi"}}}]}}]
    (d,) = differences(o)
    assert (d.node, d.kube, d.core) == ("n1", False, None) and newer_fit_rule(d)
    o.pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Mi"
    assert not newer_fit_rule(differences(o)[0])  # it asks memory: 1.20 and today both refuse
    o.pod["spec"]["containers"][0]["resources"] = {}
    assert not newer_fit_rule(differences(o)[0])  # it asks nothing: 1.20 let it in too
    o.pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    o.state.pods[0]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "512Mi"
    assert not newer_fit_rule(differences(o)[0])  # nothing over allocatable: not this rule
    assert not newer_fit_rule(differences(_outcome({"n1"}, {"n1": "Insufficient cpu"}))[0])
