"""Render the plain manifests under manifests/ from the chart (the one source of truth).

For clusters without helm: `kubectl apply -k manifests/<dir>`. Each directory is
`helm template` of manifests/hami for Kubernetes 1.20 with a few values; its certificate is
an existing Secret (filled, with the caBundles, by hack/install-certs.sh) or cert-manager's.
`make manifests` writes them; tests/test_manifests.py fails when they are stale.
Usage: render_manifests.py [--check]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.harness.kubectl import HELM  # noqa: E402  the project's pinned helm

CHART = ROOT / "manifests" / "hami"
KUBE_VERSION = "1.20.2"
SECRET = ["--set", "certificates.mode=secret"]
# directory under manifests/ -> values; a config.yaml beside it for the fleets' programs.
VARIANTS = {
    "base": SECRET,
    "overlays/s4000": [*SECRET, "--set", "devices.mthreads.memoryPerCard={96}"],
    "overlays/s5000": [*SECRET, "--set", "devices.mthreads.memoryPerCard={160}"],
    "overlays/mixed": [*SECRET, "--set", "devices.mthreads.memoryPerCard={96,160}"],
    "cert-manager": ["--set", "certificates.mode=certManager"],
    "extender": [*SECRET, "--set", "mode=extender"],
}
HEADER = ("# Generated from manifests/hami by `make manifests` (helm template, Kubernetes {v},\n"
          "# {args}). Do not edit: change the chart and run `make manifests`.\n")


def helm_template(values: list[str]) -> str:
    proc = subprocess.run([HELM, "template", "hami", str(CHART), "--namespace", "kube-system",
                           "--kube-version", KUBE_VERSION, *values],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"helm template {' '.join(values)} failed:\n{proc.stderr}")
    return proc.stdout


def render_all() -> dict[str, str]:
    """Path under manifests/ -> the file's text."""
    files = {}
    for directory, values in VARIANTS.items():
        header = HEADER.format(v=KUBE_VERSION, args=" ".join(values[1::2]))
        rendered = helm_template(values)
        files[f"{directory}/hami.yaml"] = header + rendered
        files[f"{directory}/kustomization.yaml"] = header + yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": ["hami.yaml"]}, sort_keys=False)
        (config_map,) = [d for d in yaml.safe_load_all(rendered)
                         if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "mthreads-webhook-config"]
        files[f"{directory}/config.yaml"] = (
            header + "# The config file the pods read, for running the programs by hand.\n"
            + config_map["data"]["config.yaml"])
    return files


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = []
    for rel, text in render_all().items():
        path = ROOT / "manifests" / rel
        if path.exists() and path.read_text() == text:
            continue
        stale.append(rel)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if check and stale:
        print("stale (run `make manifests`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
