#!/usr/bin/env bash
# Ensure kube-apiserver, kube-scheduler and etcd exist for the local test cluster, and print the
# directory holding them as the last line of stdout (progress goes to stderr).
#
# No package registry ships kube-apiserver, so it is built once from Debian bookworm's
# `kubernetes` source package (the full 1.20.2 tree with its vendor/, builds offline) and cached
# per version outside the repo; etcd is Debian's etcd-server.
#
# KUBEBUILDER_ASSETS (the envtest convention) wins when it holds kube-apiserver and etcd.
#
# kube-scheduler 1.20.2 gets one fix of a later 1.20 patch release: it never called an
# extender's preempt verb (its scheduling framework was built without the extenders;
# kubernetes issue 102971, fixed on the 1.20 branch by the cherry-pick PR 103030). The fix is one
# option where the framework is made; a cache built before it gains the stamp file
# $SCHEDULER_FIX by rebuilding kube-scheduler alone.
set -euo pipefail

DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
KUBE_VERSION="1.20.2"
SUITE="bookworm"
BINARIES=(kube-apiserver kube-scheduler)
ETCD=/usr/bin/etcd
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
BUILD_PACKAGES=(golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev)
SCHEDULER_FIX=.kube-scheduler-calls-preempt-extenders

log() { echo "kube-assets: $*" >&2; }
die() { log "error: $*"; exit 1; }

# as_root, ensure_packages, debian_archive
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

has_all() {  # has_all DIR NAME... : every NAME is an executable in DIR
  local dir=$1 name
  shift
  for name in "$@"; do [[ -x $dir/$name ]] || return 1; done
}

fetch_source() {  # fetch_source WORK : unpack the Debian source into WORK/src
  local work=$1 apt=$1/apt entry uri signed
  entry=$(debian_archive)
  [[ -n $entry ]] || die "no 'deb' entry for $SUITE main in the system's apt sources"
  IFS=$'\t' read -r uri signed <<<"$entry"
  mkdir -p "$apt/sources" "$apt/lists/partial" "$apt/cache/archives/partial"
  {
    printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\n' "$uri" "$SUITE"
    [[ -z $signed ]] || printf 'Signed-By: %s\n' "$signed"
  } >"$apt/sources/deb-src.sources"
  # Private source list, lists and caches: the system's apt configuration and state stay as they
  # are. The sandbox user _apt could not enter a private dir under the caller's home.
  local opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt/sources"
    -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq >&2
  (cd "$work" && apt-get "${opts[@]}" source -qq --download-only "kubernetes=$DEB_VERSION") >&2
  dpkg-source -x "$work"/kubernetes_*.dsc "$work/src" >&2
}

fix_scheduler() {  # fix_scheduler SRC : kube-scheduler's framework gets the extenders (see top)
  local factory=$1/pkg/scheduler/factory.go option='frameworkruntime.WithExtenders(extenders),'
  grep -q "$option" "$factory" && return
  sed -i "s|^\t\tframeworkruntime.WithCaptureProfile(frameworkruntime.CaptureProfile(c.frameworkCapturer)),\$|&\n\t\t$option|" "$factory"
  grep -q "$option" "$factory" || die "could not give kube-scheduler's framework the extenders ($factory)"
}

build() {  # build WORK [NAME...] : compile NAMEs (default BINARIES) from WORK/src into WORK/out
  local work=$1 src=$1/src vendored=$1/src/vendor/github.com/modern-go/reflect2 bin
  shift
  local names=("$@")
  ((${#names[@]})) || names=("${BINARIES[@]}")
  fix_scheduler "$src"
  # The vendored reflect2 1.0.1 crashes under Go >= 1.18 ("fatal error: fault" in mapiterinit,
  # on the first mutating-webhook patch); Debian's 1.0.2 has the same API and works.
  rm -f "$vendored"/*.go "$vendored"/*.s
  cp "$REFLECT2"/*.go "$REFLECT2"/*.s "$vendored"/
  rm -f "$vendored"/*_test.go
  # Go's caches inside WORK, so that removing WORK leaves nothing big behind.
  (cd "$src" && env CGO_ENABLED=0 GOFLAGS=-mod=vendor GOPATH="$work/gopath" \
    GOCACHE="$work/gocache" make WHAT="${names[*]/#/cmd/}") >&2
  mkdir "$work/out"
  for bin in "${names[@]}"; do cp "$src/_output/bin/$bin" "$work/out/"; done
  ln -s "$ETCD" "$work/out/etcd"
  touch "$work/out/$SCHEDULER_FIX"
}

main() {
  if [[ -n ${KUBEBUILDER_ASSETS:-} ]] && has_all "$KUBEBUILDER_ASSETS" kube-apiserver etcd; then
    echo "$KUBEBUILDER_ASSETS"
    return
  fi
  local root=${XDG_CACHE_HOME:-$HOME/.cache}/mthreads-webhook
  local dest=$root/kube-$KUBE_VERSION
  mkdir -p "$root"
  # One build at a time: a concurrent run waits here, then finds the finished binaries.
  exec 9>"$root/.kube-$KUBE_VERSION.lock"
  flock -n 9 || { log "waiting for another run to finish..."; flock 9; }
  ensure_packages etcd-server
  if has_all "$dest" "${BINARIES[@]}" etcd && [[ ! -e $dest/$SCHEDULER_FIX ]]; then
    ensure_packages "${BUILD_PACKAGES[@]}"
    rm -rf "$root/.build-$KUBE_VERSION".*
    work=$(mktemp -d "$root/.build-$KUBE_VERSION.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    log "rebuilding kube-scheduler $KUBE_VERSION with the extender preemption fix (once)..."
    fetch_source "$work"
    build "$work" kube-scheduler
    # Renamed over the old file: a running kube-scheduler keeps its own copy.
    cp "$work/out/kube-scheduler" "$dest/.kube-scheduler.new"
    mv -f "$dest/.kube-scheduler.new" "$dest/kube-scheduler"
    touch "$dest/$SCHEDULER_FIX"
    log "rebuilt $dest/kube-scheduler"
  fi
  if ! has_all "$dest" "${BINARIES[@]}" etcd; then
    ensure_packages "${BUILD_PACKAGES[@]}"
    rm -rf "$root/.build-$KUBE_VERSION".*  # left by a run that was killed; we hold the lock
    work=$(mktemp -d "$root/.build-$KUBE_VERSION.XXXXXX")  # global: the EXIT trap reads it
    trap 'rm -rf "$work"' EXIT
    log "building kube-apiserver $KUBE_VERSION from Debian source (5 to 15 minutes on 2 cores, once)..."
    fetch_source "$work"
    build "$work"
    # Only a complete set of binaries ever appears under $dest: rename is atomic.
    rm -rf "$dest"
    mv -T "$work/out" "$dest"
    log "built into $dest"
  fi
  echo "$dest"
}

main "$@"
