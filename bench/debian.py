"""Debian packages the bench needs (wrk, valgrind), installed when missing, as the tests'
hack/kube-assets.sh installs theirs: `make bench` on a fresh machine needs nothing by hand."""

from __future__ import annotations

import os
import shutil
import subprocess


def ensure(package: str, *commands: str) -> list[str]:
    """The paths of `commands`, installing `package` first if one is missing (as root;
    apt-get update only if the first install fails, as the lists may be stale)."""
    paths = [shutil.which(c) for c in commands]
    if all(paths):
        return paths
    if os.geteuid() != 0:
        raise SystemExit(f"bench: {', '.join(commands)} not installed; run: "
                         f"apt-get install -y {package} (as root)")
    print(f"bench: installing {package} (Debian package)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", package]
    if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
        r = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"bench: apt-get install {package} failed:\n{r.stderr[-2000:]}")
    paths = [shutil.which(c) for c in commands]
    if not all(paths):
        raise SystemExit(f"bench: {', '.join(commands)} still not found after installing "
                         f"{package}")
    return paths
