"""The random clusters of tests/scheduling/test_kube_scheduler_filters.py
(tests/harness/random_cluster.py): the same seed gives the same cluster, and the seeds that test
runs generate every feature it claims to compare, so a pass means something."""

from collections import Counter

from tests.harness.random_cluster import (
    CLAIM_KINDS,
    FEATURES,
    HOSTNAME,
    OTHER_SCHEDULER,
    ZONE,
    ZONE_BETA,
    claim_kind,
    features,
    make_cluster,
)
from tests.scheduling.test_kube_scheduler_filters import (
    BASE_SEED,
    CLUSTERS,
    FEATURE_AT_LEAST,
    PODS_PER_CLUSTER,
    SCHEDULER,
)

SEEDS = [BASE_SEED + i for i in range(CLUSTERS)]
RUN = [make_cluster(seed, i, PODS_PER_CLUSTER, SCHEDULER) for i, seed in enumerate(SEEDS)]


def test_the_same_seed_gives_the_same_cluster():
    assert make_cluster(BASE_SEED, 0, 30, SCHEDULER) == make_cluster(BASE_SEED, 0, 30, SCHEDULER)
    assert make_cluster(BASE_SEED, 0, 30, SCHEDULER) != make_cluster(BASE_SEED + 1, 0, 30, SCHEDULER)


def test_enough_pods_and_clusters_as_the_issue_asks():
    assert len(RUN) >= 20 and sum(len(c.pods) for c in RUN) >= 500
    for c in RUN:
        names = [p["metadata"]["name"] for p in c.pods]
        assert len(set(names)) == len(names)
        assert all(p["spec"]["schedulerName"] == SCHEDULER for p in c.pods)
        assert all(p["metadata"]["namespace"] in c.namespaces for p in c.pods)


def test_every_feature_is_generated_often():
    counts = Counter(f for c in RUN for p in c.pods for f in features(p))
    assert {f: counts[f] for f in FEATURES if counts[f] < FEATURE_AT_LEAST} == {}
    assert set(counts) <= set(FEATURES)


def test_the_clusters_vary_as_the_issue_asks():
    nodes = [n for c in RUN for n in c.nodes]
    assert {len(c.nodes) for c in RUN} <= set(range(4, 11)) and len({len(c.nodes) for c in RUN}) >= 4
    assert {len(c.namespaces) for c in RUN} == {2, 3}
    assert all(n["metadata"]["labels"][HOSTNAME] == n["metadata"]["name"] for n in nodes)
    labels = [n["metadata"]["labels"] for n in nodes]
    assert sum(ZONE not in x and ZONE_BETA not in x for x in labels) >= 5  # no zone at all
    assert sum((ZONE in x) != (ZONE_BETA in x) for x in labels) >= 5  # one of the two
    assert sum(x.get(ZONE) == "" for x in labels) >= 2  # the empty value
    effects = Counter(t["effect"] for n in nodes for t in n["spec"]["taints"])
    assert min(effects[e] for e in ("NoSchedule", "NoExecute", "PreferNoSchedule")) >= 5, effects
    assert sum(bool(n["spec"].get("unschedulable")) for n in nodes) >= 5
    allocatable = Counter(k for n in nodes for k in n["status"]["allocatable"])
    assert allocatable["hugepages-2Mi"] >= 10 and allocatable["example.com/rdma"] >= 10
    assert allocatable["ephemeral-storage"] < len(nodes)  # some nodes list none
    assert len({n["status"]["allocatable"].get("pods") for n in nodes}) >= 3


def test_the_state_before_the_pods_varies():
    existing = [p for c in RUN for p in c.existing]
    bound = [p for p in existing if p["spec"].get("nodeName")]
    assert len(bound) >= 60 and all(p["spec"]["schedulerName"] == OTHER_SCHEDULER for p in existing)
    assert sum(1 for p in bound if "podAntiAffinity" in (p["spec"].get("affinity") or {})) >= 15
    assert sum(1 for p in bound if "host-ports" in features(p)) >= 15
    assert sum(1 for p in bound if "inline-disk" in features(p)) >= 5
    assert sum(len(c.terminating) for c in RUN) >= 5
    assert sum(len(c.terminate_when_bound) for c in RUN) >= 30
    assert sum(1 for p in existing if not p["spec"].get("nodeName")) >= 10  # another scheduler's
    kinds = Counter(claim_kind(cl["metadata"]["name"]) for c in RUN for cl in c.claims)
    assert {k: kinds[k] for k in CLAIM_KINDS if kinds[k] < 5} == {}
    assert sum(len(c.deleting_claims) for c in RUN) == kinds["deleting"]
    volumes = [v for c in RUN for v in c.volumes]
    assert sum("__" in "".join(v["metadata"]["labels"].values()) for v in volumes) >= 5
    assert sum("matchFields" in str(v["spec"].get("nodeAffinity")) for v in volumes) >= 3


def test_claims_are_found_by_the_pods_that_name_them():
    for c in RUN:
        claims = {(cl["metadata"]["namespace"], cl["metadata"]["name"]) for cl in c.claims}
        for p in c.pods:
            for v in p["spec"].get("volumes") or ():
                name = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if name is None:
                    continue
                found = (p["metadata"]["namespace"], name) in claims
                assert found == (claim_kind(name) != "missing"), (p["metadata"]["name"], name)
