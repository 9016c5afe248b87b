#!/usr/bin/env bash
# Issue the webhook's serving certificate without cert-manager, store it in the Secret the
# Deployment mounts, and put its CA into the caBundle of both webhook configurations.
# Run it after `kubectl apply -k manifests/overlays/<fleet>`, and again to rotate.
# ca.key stays in the output directory: it never goes into the cluster.
#
# Rotation order matters with failurePolicy Fail: the caBundle first gets the new CA *and*
# the one in the current Secret, then the Secret changes. The API server thus trusts both
# the old and the new serving certificate while the kubelet refreshes the mounted files.
set -euo pipefail

NAMESPACE=kube-system
SERVICE=mthreads-webhook
SECRET=mthreads-webhook-tls
CONFIG_NAME=mthreads-webhook
OUT=""
KUBECTL=(kubectl)
CERTS_CMD=${MTHREADS_WEBHOOK:-mthreads-webhook}

usage() {
  cat <<EOF
usage: $0 [--kubeconfig FILE] [--context NAME] [--namespace NS] [--service NAME] [--out DIR]
  KUBECONFIG in the environment is honoured as usual by kubectl.
  --out DIR keeps the generated files, CA key included (default: a temporary directory,
            removed at exit). A later run with the same DIR reuses that CA, so only the serving
            certificate changes; without it every run makes a new CA. Keep DIR private.
  MTHREADS_WEBHOOK names the command that runs 'certs' (default: mthreads-webhook).
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --kubeconfig) KUBECTL+=(--kubeconfig "$2"); shift 2 ;;
    --kubeconfig=*) KUBECTL+=(--kubeconfig "${1#*=}"); shift ;;
    --context) KUBECTL+=(--context "$2"); shift 2 ;;
    --context=*) KUBECTL+=(--context "${1#*=}"); shift ;;
    -n|--namespace) NAMESPACE=$2; shift 2 ;;
    --namespace=*) NAMESPACE=${1#*=}; shift ;;
    --service) SERVICE=$2; shift 2 ;;
    --service=*) SERVICE=${1#*=}; shift ;;
    --out) OUT=$2; shift 2 ;;
    --out=*) OUT=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

k() { "${KUBECTL[@]}" "$@"; }
b64() { base64 | tr -d '\n'; }   # GNU and BSD base64 both

if [[ -z "$OUT" ]]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"

# Without this label a webhook outage blocks pod creation in kube-system (failurePolicy Fail).
# (Also the first API call: stop here if the cluster cannot be reached.)
label=$(k get namespace kube-system -o jsonpath='{.metadata.labels.hami\.io/webhook}')
if [[ "$label" != "ignore" ]]; then
  echo "warning: namespace kube-system is not labelled hami.io/webhook=ignore;" \
       "run: kubectl label namespace kube-system hami.io/webhook=ignore" >&2
fi

# shellcheck disable=SC2086  # MTHREADS_WEBHOOK may be a command with arguments
$CERTS_CMD certs --out "$OUT" --service "$SERVICE" --namespace "$NAMESPACE"
for f in ca.crt tls.crt tls.key; do
  [[ -s "$OUT/$f" ]] || { echo "error: $OUT/$f was not written" >&2; exit 1; }
done

# New CA plus the CA of the certificate being replaced (if any).
bundle="$OUT/ca-bundle.crt"
cp "$OUT/ca.crt" "$bundle"
old_ca=$(k -n "$NAMESPACE" get secret "$SECRET" -o jsonpath='{.data.ca\.crt}' --ignore-not-found)
if [[ -n "$old_ca" ]]; then
  printf '%s' "$old_ca" | base64 -d > "$OUT/old-ca.crt"
  if ! cmp -s "$OUT/old-ca.crt" "$OUT/ca.crt"; then
    cat "$OUT/old-ca.crt" >> "$bundle"
  fi
fi
ca_bundle=$(b64 < "$bundle")

patched=0
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
  if ! names=$(k get "$kind" "$CONFIG_NAME" -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' 2>/dev/null); then
    echo "warning: $kind/$CONFIG_NAME not found; apply the manifests, then run this again" >&2
    continue
  fi
  ops="" i=0
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    ops+="${ops:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$ca_bundle\"}"
    i=$((i + 1))
  done <<<"$names"
  if [[ $i -gt 0 ]]; then
    k patch "$kind" "$CONFIG_NAME" --type=json -p "[$ops]"
    patched=$((patched + 1))
  fi
done

k -n "$NAMESPACE" create secret generic "$SECRET" --type=kubernetes.io/tls \
  --from-file=tls.crt="$OUT/tls.crt" --from-file=tls.key="$OUT/tls.key" --from-file=ca.crt="$OUT/ca.crt" \
  --dry-run=client -o yaml | k apply -f -

echo "Secret $NAMESPACE/$SECRET updated; caBundle written to $patched webhook configuration(s)."
echo "The webhook re-reads the mounted files (the kubelet syncs Secrets within about a minute)."
