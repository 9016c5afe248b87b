#!/usr/bin/env bash
# Ensure kube-apiserver, kube-scheduler and etcd exist for the local test cluster, with the
# node's kubelet, kube-controller-manager, kube-proxy and pause (tests/node, hack/node.py), and
# print the directory holding them as the last line of stdout (progress goes to stderr).
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
#
# The node's binaries come from the same tree and the same `make WHAT=...` (all five at once
# from nothing); a cache made before them gains the missing ones alone. `pause` is the tree's
# build/pause/linux/pause.c compiled statically: the sandbox image's one program. And the
# kubelet's device-plugin API, deviceplugin-v1beta1.proto (its gogoproto options taken out),
# which tests/harness/device_plugin.py compiles with grpcio-tools: nothing of it is in the repo.
set -euo pipefail

DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
KUBE_VERSION="1.20.2"
SUITE="bookworm"
BINARIES=(kube-apiserver kube-scheduler kubelet kube-controller-manager kube-proxy)
ETCD=/usr/bin/etcd
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
BUILD_PACKAGES=(golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev gcc libc6-dev)
SCHEDULER_FIX=.kube-scheduler-calls-preempt-extenders
DEVICE_PLUGIN_PROTO=deviceplugin-v1beta1.proto
EXTRAS=(pause "$DEVICE_PLUGIN_PROTO")  # made from the tree beside the binaries

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

build() {  # build WORK [NAME...] : compile NAMEs from WORK/src into WORK/out, with EXTRAS
  local work=$1 src=$1/src vendored=$1/src/vendor/github.com/modern-go/reflect2 bin
  shift
  local names=("$@")
  mkdir "$work/out"
  extras "$src" "$work/out"
  ((${#names[@]})) || return 0
  fix_scheduler "$src"
  # The vendored reflect2 1.0.1 crashes under Go >= 1.18 ("fatal error: fault" in mapiterinit,
  # on the first mutating-webhook patch); Debian's 1.0.2 has the same API and works.
  rm -f "$vendored"/*.go "$vendored"/*.s
  cp "$REFLECT2"/*.go "$REFLECT2"/*.s "$vendored"/
  rm -f "$vendored"/*_test.go
  # Go's caches inside WORK, so that removing WORK leaves nothing big behind.
  (cd "$src" && env CGO_ENABLED=0 GOFLAGS=-mod=vendor GOPATH="$work/gopath" \
    GOCACHE="$work/gocache" make WHAT="${names[*]/#/cmd/}") >&2
  for bin in "${names[@]}"; do cp "$src/_output/bin/$bin" "$work/out/"; done
  ln -s "$ETCD" "$work/out/etcd"
  touch "$work/out/$SCHEDULER_FIX"
}

extras() {  # extras SRC OUT : the EXTRAS from the tree
  local src=$1 out=$2 proto=$1/staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto
  # The sandbox's one program, static: its image is this file alone (hack/node-assets.sh).
  gcc -Os -static -DVERSION="v$KUBE_VERSION-mthreads" -o "$out/pause" "$src/build/pause/linux/pause.c" >&2
  # gogoproto's options change only Go's generated code; protoc without gogo.proto needs them gone.
  [[ -f $proto ]] || die "no device-plugin API at $proto"
  sed -e '/import "github.com\/gogo\/protobuf\/gogoproto\/gogo.proto";/d' -e '/^option (gogoproto\./d' \
    "$proto" >"$out/$DEVICE_PLUGIN_PROTO"
  ! grep -q gogoproto "$out/$DEVICE_PLUGIN_PROTO" || die "gogoproto options left in $out/$DEVICE_PLUGIN_PROTO"
}

has_extras() { [[ -x $1/pause && -f $1/$DEVICE_PLUGIN_PROTO ]]; }

missing() {  # missing DEST : the binaries DEST lacks (kube-scheduler without the fix counts)
  local dest=$1 name
  for name in "${BINARIES[@]}"; do
    if [[ ! -x $dest/$name ]] || [[ $name == kube-scheduler && ! -e $dest/$SCHEDULER_FIX ]]; then
      echo "$name"
    fi
  done
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
  local names
  mapfile -t names < <(missing "$dest")
  if ((${#names[@]})) || ! has_extras "$dest"; then
    ensure_packages "${BUILD_PACKAGES[@]}"
    rm -rf "$root/.build-$KUBE_VERSION".*  # left by a run that was killed; we hold the lock
    work=$(mktemp -d "$root/.build-$KUBE_VERSION.XXXXXX")  # global: the EXIT trap reads it
    trap 'rm -rf "$work"' EXIT
    if ((${#names[@]})); then
      log "building ${names[*]} $KUBE_VERSION from Debian source (about 5 to 15 minutes on 2 cores, once)..."
    else
      log "making ${EXTRAS[*]} from the $KUBE_VERSION source (a minute, once)..."
    fi
    fetch_source "$work"
    build "$work" "${names[@]}"
    if [[ -d $dest ]]; then
      # Each file renamed over the old one: a running binary keeps its own copy, and a
      # concurrent reader never sees half a file.
      local file
      for file in "$work/out"/* "$work/out/$SCHEDULER_FIX"; do
        [[ -e $file ]] || continue
        [[ -e $dest/$(basename "$file") && $(basename "$file") == etcd ]] && continue
        cp -P "$file" "$dest/.$(basename "$file").new"
        mv -f "$dest/.$(basename "$file").new" "$dest/$(basename "$file")"
      done
    else
      mv -T "$work/out" "$dest"  # only a complete set of binaries ever appears under $dest
    fi
    log "built into $dest"
  fi
  echo "$dest"
}

main "$@"
