#!/usr/bin/env bash
# Ensure what `pip install` needs to compile the scheduling core with mypyc (setup.py): a C
# compiler and the headers of the Python that builds the venv (Debian's python3-dev for
# Debian's own python3; a Python built from source has its headers already).
# Usage: hack/compiler.sh PYTHON (make install, and the Dockerfile's build stage). Nothing to
# do when MTHREADS_PURE_PYTHON is set.
set -euo pipefail

PYTHON=${1:-python3}

log() { echo "compiler: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"  # as_root, ensure_packages

[[ -z ${MTHREADS_PURE_PYTHON:-} ]] || exit 0
headers() { "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }

packages=()
command -v cc >/dev/null || packages+=(gcc libc6-dev)
headers || packages+=(python3-dev)
((${#packages[@]})) || exit 0
command -v apt-get >/dev/null || die "missing ${packages[*]} (not a Debian-like system): install a C \
compiler and Python's headers, or set MTHREADS_PURE_PYTHON=1 to build without compiling"
ensure_packages "${packages[@]}"
headers || die "$PYTHON has no Python.h even with python3-dev installed (is it Debian's python3?); \
install its headers, or set MTHREADS_PURE_PYTHON=1"
