#!/usr/bin/env bash
# Build the image from the project's Dockerfile with buildah, and print its reference as the
# last line of stdout (progress goes to stderr).
#
#   hack/image.sh          the Dockerfile's default base (python:3.11-slim) if the image store
#                          has it (`podman pull python:3.11-slim` where a registry is reachable),
#                          else the local base: Debian bookworm made by debootstrap, cached
#   IMAGE_BASE=python:3.11-slim hack/image.sh   any base a registry can give, pulled if missing
#   IMAGE_CA_BUNDLE=FILE   the CA bundle pip trusts in the build (default: the system's; empty: none)
#
# No registry is reachable on the project's CI machines, so by default the base is made from
# Debian's own packages once, trimmed of what a runtime does not read (docs, man pages, locales,
# apt lists), cached as a rootfs tarball outside the repo and imported with buildah. The image
# is tagged mthreads-webhook:<version> (what the chart deploys) and mthreads-webhook:src-<hash>,
# a hash of the base and of the build context: an unchanged tree reuses the image it built.
set -euo pipefail

SUITE="bookworm"
REGISTRY_BASE=$(sed -n 's/^ARG BASE=//p' "$(dirname "$0")/../Dockerfile" | head -n 1)  # python:3.11-slim
BASE_PACKAGES=(python3 python3-venv ca-certificates)
# Inside the rootfs: what a Python runtime never reads. /usr/share/doc keeps the copyright files.
TRIM=(usr/share/man usr/share/info usr/share/locale usr/share/lintian usr/share/linda
  var/lib/apt/lists var/cache/apt var/cache/debconf/templates.dat-old var/log etc/machine-id
  etc/resolv.conf etc/hostname)
NAME="mthreads-webhook"
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO_ROOT/hack/containers.conf}

log() { echo "image: $*" >&2; }
die() { log "error: $*"; exit 1; }

# as_root, ensure_packages, debian_archive
source "$REPO_ROOT/hack/lib.sh"

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

make_rootfs() {  # make_rootfs TARBALL : debootstrap, trim and pack a rootfs
  local tarball=$1 work entry uri signed
  entry=$(debian_archive)
  [[ -n $entry ]] || die "no 'deb' entry for $SUITE main in the system's apt sources"
  IFS=$'\t' read -r uri signed <<<"$entry"
  work=$(mktemp -d "$(dirname "$tarball")/.rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  log "making the base: debootstrap $SUITE from $uri (about a minute, once)..."
  as_root debootstrap --variant=minbase --include="$(IFS=,; echo "${BASE_PACKAGES[*]}")" \
    ${signed:+--keyring="$signed"} "$SUITE" "$work/rootfs" "$uri" >&2
  (cd "$work/rootfs" && rm -rf "${TRIM[@]}" && mkdir -p var/log var/cache/apt var/lib/apt/lists)
  find "$work/rootfs/usr/share/doc" -type f ! -name copyright -delete
  find "$work/rootfs/usr/share/doc" -depth -type d -empty -delete
  tar -C "$work/rootfs" --numeric-owner -cf "$work/rootfs.tar" .
  mv "$work/rootfs.tar" "$tarball"  # only a finished tarball appears under its name
  rm -rf "$work"
  trap - EXIT
}

local_base() {  # local_base CACHE : print the local base's image reference, made when missing
  local cache=$1 key tarball ref ctr
  key=$(printf '%s\n' "$SUITE" "${BASE_PACKAGES[@]}" "${TRIM[@]}" | sha256sum | cut -c1-12)
  ref="localhost/$NAME-base:$SUITE-$key"
  if ! image_exists "$ref"; then
    tarball=$cache/base-$SUITE-$key.tar
    [[ -f $tarball ]] || make_rootfs "$tarball"
    log "importing $tarball as $ref"
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$tarball" / >/dev/null
    buildah config --cmd /bin/bash "$ctr"
    buildah commit --quiet --rm "$ctr" "$ref" >/dev/null
  fi
  echo "$ref"
}

context_hash() {  # context_hash BASE-ID : what the build reads, the files .dockerignore lets through
  local include=() path
  while read -r path; do
    [[ -e $REPO_ROOT/$path ]] && include+=("$path")
  done < <(sed -n 's/^!\(.*\)/\1/p' "$REPO_ROOT/.dockerignore")
  {
    echo "$1"
    cd "$REPO_ROOT"
    find Dockerfile .dockerignore "${include[@]}" -type f ! -name '*.pyc' ! -name '*.so' ! -path '*/__pycache__/*' \
      -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

main() {
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/mthreads-webhook base version hash ref
  local ca_bundle=${IMAGE_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
  [[ -z $ca_bundle || -s $ca_bundle ]] || ca_bundle=""
  mkdir -p "$cache"
  # One build at a time: a concurrent run waits here, then finds the finished image.
  exec 9>"$cache/.image.lock"
  flock -n 9 || { log "waiting for another build to finish..."; flock 9; }
  ensure_packages buildah podman runc debootstrap
  if [[ -n ${IMAGE_BASE:-} ]]; then
    base=$IMAGE_BASE
    image_exists "$base" || buildah pull --quiet "$base" >/dev/null
  elif image_exists "$REGISTRY_BASE"; then  # never pulled here: this script sends nothing to a registry
    base=$REGISTRY_BASE
  else
    base=$(local_base "$cache")
  fi
  version=$(python3 -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$REPO_ROOT/pyproject.toml")
  hash=$(context_hash "$(buildah inspect --type image --format '{{.FromImageID}}' "$base")")
  ref="localhost/$NAME:src-$hash"
  if image_exists "$ref"; then
    log "$ref is up to date"
  else
    log "building $ref from $base (pip reaches PyPI; a few minutes the first time)..."
    # Host network: the build's RUN steps need no network of their own, only PyPI; and
    # the host's CA bundle, which trusts whatever proxy stands between this machine and PyPI.
    buildah bud --quiet --network host --layers=false --build-arg BASE="$base" \
      ${ca_bundle:+--secret id=ca-bundle,src="$ca_bundle"} \
      -f "$REPO_ROOT/Dockerfile" -t "$ref" "$REPO_ROOT" >&2
  fi
  buildah tag "$ref" "localhost/$NAME:$version"
  # Keep the three newest source builds (other checkouts may be testing theirs), drop the rest.
  podman images --noheading --sort created --format '{{.Repository}}:{{.Tag}}' "localhost/$NAME" \
    | grep ":src-" | grep -vx "$ref" | tail -n +3 | xargs -r podman rmi >/dev/null 2>&1 || true
  local size base_size
  size=$(podman image inspect --format '{{.Size}}' "$ref")
  base_size=$(podman image inspect --format '{{.Size}}' "$base")
  log "$ref = localhost/$NAME:$version: $((size / 1000000)) MB, of which the base $base" \
    "$((base_size / 1000000)) MB and the image's own layers $(((size - base_size) / 1000000)) MB"
  echo "$ref"
}

main "$@"
