#!/usr/bin/env bash
# Runs the e2e suite against the kind cluster made by up.sh. NATS is reached through a
# port-forward. Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
# shellcheck source=e2e/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

need kind kubectl cargo
cluster_exists || die "no kind cluster $CLUSTER_NAME: run e2e/kind/up.sh first"
[ -f "$KIND_KUBECONFIG" ] || kind get kubeconfig --name "$CLUSTER_NAME" >"$KIND_KUBECONFIG"
export KUBECONFIG="$KIND_KUBECONFIG"

nats_svc="$(kubectl -n "$NAMESPACE" get svc \
  -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=nats \
  -o jsonpath='{range .items[?(@.spec.clusterIP!="None")]}{.metadata.name}{end}')"
[ -n "$nats_svc" ] || die "no NATS Service of release $RELEASE in $NAMESPACE (chart installed with nats.enabled?)"

log "port-forwarding svc/$nats_svc to 127.0.0.1:$NATS_LOCAL_PORT"
kubectl -n "$NAMESPACE" port-forward "svc/$nats_svc" "$NATS_LOCAL_PORT:4222" >"$STATE_DIR/port-forward.log" 2>&1 &
pf_pid=$!
trap 'kill "$pf_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$NATS_LOCAL_PORT") 2>/dev/null; then break; fi
  kill -0 "$pf_pid" 2>/dev/null || die "port-forward exited: $(cat "$STATE_DIR/port-forward.log")"
  sleep 0.2
done

# The suite attaches to this cluster instead of starting the local mini-cluster.
export OPENWOP_E2E_KUBECONFIG="$KIND_KUBECONFIG"
export OPENWOP_E2E_NATS_URL="nats://127.0.0.1:$NATS_LOCAL_PORT"
export OPENWOP_E2E_NAMESPACE="$E2E_NAMESPACE"
export OPENWOP_NATS_URL="$OPENWOP_E2E_NATS_URL"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openwop/target}"
log "running the e2e suite"
cd "$ROOT"
cargo test -p openwop-e2e "$@"
