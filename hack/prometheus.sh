#!/usr/bin/env bash
# Ensure Prometheus and promtool (Debian's `prometheus` package) are installed, and print the
# directory holding them as the last line of stdout (progress goes to stderr). Idempotent: a
# machine that has both already installs nothing.
#
# PROMETHEUS_BIN (a directory with `prometheus` and `promtool`) wins when it holds both.
set -euo pipefail

log() { echo "prometheus: $*" >&2; }
as_root() { if ((EUID == 0)); then "$@"; else sudo "$@"; fi; }

has_both() { [[ -x $1/prometheus && -x $1/promtool ]]; }

if [[ -n ${PROMETHEUS_BIN:-} ]] && has_both "$PROMETHEUS_BIN"; then
  echo "$PROMETHEUS_BIN"
  exit 0
fi
if ! has_both /usr/bin; then
  log "installing Debian's prometheus package (prometheus, promtool)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  # policy-rc.d 101: the package must not start a Prometheus service of its own here.
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    made_policy=1
  fi
  status=0
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus >&2 || status=$?
  [[ -n $made_policy ]] && as_root rm -f "$policy"
  ((status == 0)) || { log "error: apt-get install prometheus failed ($status)"; exit 1; }
fi
has_both /usr/bin || { log "error: /usr/bin/prometheus or /usr/bin/promtool is missing"; exit 1; }
log "$(/usr/bin/promtool --version 2>&1 | head -1)"
echo /usr/bin
