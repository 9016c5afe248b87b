"""Realistic AdmissionReviews for the benchmark: a pod made by a Deployment.

What the API server sends a mutating webhook when the ReplicaSet controller
creates a pod: `generateName` but no name yet, the ReplicaSet as owner, the
template's labels with `pod-template-hash`, the defaults the API server has
filled in, the projected service-account token volume that the ServiceAccount
admission plugin adds before any webhook runs, and the two tolerations that
DefaultTolerationSeconds adds. About 4 KB of JSON.

Two variants differ only in the first container's resources: `mthreads` asks
for a slice of a card (vgpu 1, sgpu-memory 32, sgpu-core 8), `plain` for CPU
and memory alone.

    python -m bench.pods --out DIR   # writes mthreads.json and plain.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

VARIANTS = ("mthreads", "plain")

_HASH = "7d9f8b6c5"
_RS_UID = "3f6c1c2a-9b1e-4d7a-8c55-0e4f3a2b1d90"
_LABELS = {
    "app.kubernetes.io/name": "trainer",
    "app.kubernetes.io/instance": "trainer-llama-ft",
    "app.kubernetes.io/component": "worker",
    "app.kubernetes.io/part-of": "ml-platform",
    "team": "research",
    "pod-template-hash": _HASH,
}


def _container(variant: str) -> dict:
    limits = {"cpu": "8", "memory": "32Gi"}
    requests = {"cpu": "4", "memory": "24Gi"}
    if variant == "mthreads":
        limits.update({"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "32",
                       "mthreads.com/sgpu-core": "8"})
    return {
        "name": "trainer",
        "image": "registry.example/ml/trainer:2.4.1",
        "command": ["python", "-m", "trainer.main"],
        "args": ["--config", "/etc/trainer/config.yaml", "--epochs", "3"],
        "ports": [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                             "fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                  "fieldPath": "metadata.namespace"}}},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                              "fieldPath": "spec.nodeName"}}},
            {"name": "MODEL_DIR", "value": "/data/models"},
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "OMP_NUM_THREADS", "value": "4"},
        ],
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/trainer", "readOnly": True},
            {"name": "data", "mountPath": "/data"},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "kube-api-access-x7k2p", "readOnly": True,
             "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 9100, "scheme": "HTTP"},
                           "initialDelaySeconds": 5, "timeoutSeconds": 1, "periodSeconds": 10,
                           "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "runAsUser": 1000, "capabilities": {"drop": ["ALL"]}},
    }


def pod(variant: str) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": f"trainer-llama-ft-{_HASH}-",
            "namespace": "research",
            "creationTimestamp": None,
            "labels": dict(_LABELS),
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": f"trainer-llama-ft-{_HASH}", "uid": _RS_UID,
                "controller": True, "blockOwnerDeletion": True,
            }],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "time": "2024-05-14T09:12:03Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}},
                                            "f:ownerReferences": {".": {}}},
                             "f:spec": {"f:containers": {}, "f:volumes": {}}},
            }],
        },
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "trainer-data"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt",
                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
            "containers": [_container(variant)],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"node.kubernetes.io/instance-type": "gpu-s4000"},
            "serviceAccountName": "trainer",
            "serviceAccount": "trainer",
            "securityContext": {"fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "mthreads.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }


def review(variant: str, uid: str | None = None) -> dict:
    """The AdmissionReview (v1) for a CREATE of the variant's pod."""
    obj = pod(variant)
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid or ("0b6f3c1e-5a2d-4c8e-9f7a-1d2e3f4a5b6c" if variant == "mthreads"
                           else "0b6f3c1e-5a2d-4c8e-9f7a-1d2e3f4a5b6d"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "research",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "8d1f0c3b-2e4a-4b6c-9d8e-7f6a5b4c3d2e",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                           "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def body(variant: str) -> bytes:
    """The review as the API server sends it: compact JSON."""
    return json.dumps(review(variant), separators=(",", ":")).encode()


def write(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for v in VARIANTS:
        paths[v] = out / f"{v}.json"
        paths[v].write_bytes(body(v))
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for mthreads.json and plain.json")
    args = p.parse_args(argv)
    for v, path in write(Path(args.out)).items():
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
