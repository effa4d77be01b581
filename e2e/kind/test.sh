#!/usr/bin/env bash
# Runs the portable e2e suite (e2e/tests/journeys.rs) against the kind cluster made by up.sh,
# in attach mode: the journeys use the release up.sh installed and reach NATS through a
# port-forward. Extra arguments go to the test binary (e.g. a journey name filter).
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
# Restarted when it exits: a journey restarts the NATS pod, which ends a port-forward.
(
  while true; do
    kubectl -n "$NAMESPACE" port-forward "svc/$nats_svc" "$NATS_LOCAL_PORT:4222" >>"$STATE_DIR/port-forward.log" 2>&1 || true
    sleep 1
  done
) &
pf_loop=$!
stop_port_forward() {
  # The loop's subshell, then the kubectl it runs (its child).
  local kids
  kids="$(pgrep -P "$pf_loop" 2>/dev/null || true)"
  kill "$pf_loop" 2>/dev/null || true
  [ -z "$kids" ] || kill $kids 2>/dev/null || true
}
trap stop_port_forward EXIT
for _ in $(seq 1 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$NATS_LOCAL_PORT") 2>/dev/null; then break; fi
  kill -0 "$pf_loop" 2>/dev/null || die "port-forward loop exited: $(tail -n 5 "$STATE_DIR/port-forward.log")"
  sleep 0.2
done

# The suite attaches to this cluster instead of starting the local mini-cluster.
export OPENWOP_E2E_KUBECONFIG="$KIND_KUBECONFIG"
export OPENWOP_E2E_NATS_URL="nats://127.0.0.1:$NATS_LOCAL_PORT"
export OPENWOP_E2E_RELEASE="$RELEASE"
export OPENWOP_E2E_RELEASE_NAMESPACE="$NAMESPACE"
export OPENWOP_NATS_URL="$OPENWOP_E2E_NATS_URL"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openwop/target}"
cd "$ROOT"
# The journeys read events with the CLI.
cargo build -p kubectl-openwop
log "running the portable journeys"
cargo test -p openwop-e2e --test journeys -- --test-threads=1 "$@"
