#!/usr/bin/env bash
# Ensure what the one-node cluster needs beside the binaries of hack/kube-assets.sh (which it
# runs): Debian's containerd, runc, CNI plugins, iptables and nft (to remove the tables it
# made), and the two images no registry gives here, made from the built binaries as one-layer
# OCI archives for `ctr images import`:
#   pause.tar           registry.k8s.io/pause:3.2 (the tree's build/pause, static)
#   kube-scheduler.tar  registry.k8s.io/kube-scheduler:v1.20.2 (the chart's extender mode)
# Prints the directory holding kube-assets' binaries and the archives (KUBE=..., IMAGES=...)
# as the last two lines of stdout; progress goes to stderr. Cached per binaries' hash.
set -euo pipefail

KUBE_VERSION="1.20.2"
PACKAGES=(containerd runc containernetworking-plugins iptables conntrack nftables)
PAUSE_REF="registry.k8s.io/pause:3.2"
SCHEDULER_REF="registry.k8s.io/kube-scheduler:v$KUBE_VERSION"
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "node-assets: $*" >&2; }
die() { log "error: $*"; exit 1; }

# as_root, ensure_packages
source "$REPO_ROOT/hack/lib.sh"

oci_archive() {  # oci_archive OUT REF ROOTFS ENTRYPOINT... : a one-layer OCI image archive
  local out=$1 ref=$2 rootfs=$3 work layer config manifest
  shift 3
  work=$(mktemp -d "$out.XXXXXX")
  mkdir -p "$work/blobs/sha256"
  tar -C "$rootfs" --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -cf "$work/layer.tar" .
  layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  mv "$work/layer.tar" "$work/blobs/sha256/$layer"
  local entry
  entry=$(printf '"%s",' "$@")
  printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"Entrypoint":[%s],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "${entry%,}" "$layer" >"$work/config.json"
  config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%d}]}' \
    "$config" "$(stat -c %s "$work/config.json")" "$layer" "$(stat -c %s "$work/blobs/sha256/$layer")" \
    >"$work/manifest.json"
  mv "$work/config.json" "$work/blobs/sha256/$config"
  manifest=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$(stat -c %s "$work/manifest.json")" "$ref" "${ref##*:}" >"$work/index.json"
  mv "$work/manifest.json" "$work/blobs/sha256/$manifest"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
  tar -C "$work" -cf "$out.new" oci-layout index.json blobs
  mv "$out.new" "$out"
  rm -rf "$work"
}

main() {
  local kube root key dest rootfs
  ensure_packages "${PACKAGES[@]}"
  kube=$("$REPO_ROOT/hack/kube-assets.sh" | tail -n 1)
  if [[ ! -x $kube/kubelet || ! -x $kube/pause || ! -f $kube/deviceplugin-v1beta1.proto ]]; then
    # a KUBEBUILDER_ASSETS of the API server alone: the node's binaries are built as without it
    log "$kube has not the node's binaries: building them into the cache"
    kube=$(env -u KUBEBUILDER_ASSETS "$REPO_ROOT/hack/kube-assets.sh" | tail -n 1)
  fi
  [[ -x $kube/kubelet && -x $kube/pause ]] || die "$kube has no kubelet or pause"
  root=${XDG_CACHE_HOME:-$HOME/.cache}/mthreads-webhook
  key=$(cat "$kube/pause" "$kube/kube-scheduler" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
  dest=$root/node-images-$key
  exec 9>"$root/.node-images.lock"
  flock -n 9 || { log "waiting for another run to finish..."; flock 9; }
  if [[ ! -f $dest/pause.tar || ! -f $dest/kube-scheduler.tar ]]; then
    rm -rf "$root"/node-images-*  # older binaries' images
    mkdir -p "$dest"
    rootfs=$(mktemp -d "$dest/.rootfs.XXXXXX")
    install -D -m 0755 "$kube/pause" "$rootfs/pause/pause"
    oci_archive "$dest/pause.tar" "$PAUSE_REF" "$rootfs/pause" /pause
    install -D -m 0755 "$kube/kube-scheduler" "$rootfs/scheduler/usr/local/bin/kube-scheduler"
    oci_archive "$dest/kube-scheduler.tar" "$SCHEDULER_REF" "$rootfs/scheduler" /usr/local/bin/kube-scheduler
    rm -rf "$rootfs"
    log "made $dest/pause.tar ($PAUSE_REF) and $dest/kube-scheduler.tar ($SCHEDULER_REF)"
  fi
  echo "KUBE=$kube"
  echo "IMAGES=$dest"
}

main "$@"
