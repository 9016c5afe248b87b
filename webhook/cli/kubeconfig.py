"""Which cluster a command talks to (SPEC 5), found in kubectl's and client-go's places.

In this order: `--kubeconfig FILE`; else `$KUBECONFIG`; else the in-cluster config (the
service account's token and `KUBERNETES_SERVICE_HOST`/`_PORT`); else `~/.kube/config`.
kubectl itself looks at `~/.kube/config` before the in-cluster config; SPEC puts the pod's
own service account first, so a kubeconfig left in an image never wins over it.

`$KUBECONFIG` is read as client-go reads it: a colon-separated list whose missing files are
skipped, merged with the first file's cluster, user or context of a given name winning. The
kubernetes Python client does the merge; where the files name different current contexts it
takes the last one (kubectl takes the first): give one file, or one current-context, to be sure.
A `$KUBECONFIG` none of whose files exists is an error, not a reason to try the next place:
it would be another cluster than the one the operator pointed at.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..base.startup import StartupError
from ..kube.client_config import IN_CLUSTER_DIR


@dataclass(frozen=True)
class ClusterSource:
    """Where the API server and credentials come from.

    `kubeconfig` is what the kubernetes client's loader takes: a file or a colon-separated
    list of files; None means the in-cluster config.
    """
    kubeconfig: str | None
    description: str


def find_cluster(flag: str | None, environ: Mapping[str, str] = os.environ,
                 in_cluster_dir: str = IN_CLUSTER_DIR) -> ClusterSource:
    if flag:
        if not os.path.isfile(flag):
            raise StartupError(f"--kubeconfig {flag}: no such file")
        return ClusterSource(flag, f"--kubeconfig {flag}")
    tried = ["--kubeconfig (not given)"]

    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths = [p for p in listed.split(os.pathsep) if p]
        if not any(os.path.isfile(os.path.expanduser(p)) for p in paths):
            raise StartupError(f"$KUBECONFIG={listed}: none of its files exists")
        return ClusterSource(listed, f"$KUBECONFIG={listed}")
    tried.append("$KUBECONFIG (not set)")

    token = os.path.join(in_cluster_dir, "token")
    if not (environ.get("KUBERNETES_SERVICE_HOST") and environ.get("KUBERNETES_SERVICE_PORT")):
        tried.append("the in-cluster config (KUBERNETES_SERVICE_HOST/PORT not set)")
    elif not os.path.isfile(token):
        tried.append(f"the in-cluster config ({token}: no such file)")
    else:
        return ClusterSource(None, "the in-cluster config")

    home = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".kube", "config")
    if os.path.isfile(home):
        return ClusterSource(home, home)
    tried.append(f"{home} (no such file)")
    raise StartupError("no cluster to talk to; tried " + ", ".join(tried))
