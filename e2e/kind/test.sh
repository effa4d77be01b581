#!/usr/bin/env bash
# Runs the portable e2e suite (e2e/tests/journeys.rs) against the kind cluster made by up.sh,
# in attach mode: the journeys use the release up.sh installed and reach NATS through a
# NodePort published on 127.0.0.1. Extra arguments go to the test binary (e.g. a journey name filter).
set -euo pipefail
# shellcheck source=e2e/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The offline path (up.sh with OPENWOP_KIND_OFFLINE=1) keeps kind, kubectl and helm here.
[ -d "$STATE_DIR/bin" ] && export PATH="$STATE_DIR/bin:$PATH"
need kind kubectl cargo jq
cluster_exists || die "no kind cluster $CLUSTER_NAME: run e2e/kind/up.sh first"
[ -f "$KIND_KUBECONFIG" ] || kind get kubeconfig --name "$CLUSTER_NAME" >"$KIND_KUBECONFIG"
export KUBECONFIG="$KIND_KUBECONFIG"

nats_svc="$(kubectl -n "$NAMESPACE" get svc \
  -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=nats \
  -o jsonpath='{range .items[?(@.spec.clusterIP!="None")]}{.metadata.name}{end}')"
[ -n "$nats_svc" ] || die "no NATS Service of release $RELEASE in $NAMESPACE (chart installed with nats.enabled?)"

# A NodePort Service in front of the pods of Service $1 (its port named $2, port $3 on
# NodePort $4), published by Docker on 127.0.0.1 (cluster.yaml's extraPortMappings). It follows
# the pods through restarts (journeys delete them), which a kubectl port-forward does not.
publish() {
  log "NodePort $4 for svc/$1"
  kubectl -n "$NAMESPACE" get svc "$1" -o json \
    | jq --arg name "$1-e2e" --arg port "$2" --argjson p "$3" --argjson np "$4" '{apiVersion: "v1", kind: "Service",
        metadata: {name: $name, namespace: .metadata.namespace, labels: {"app.kubernetes.io/part-of": "openwop-e2e"}},
        spec: {type: "NodePort", selector: .spec.selector,
               ports: [{name: $port, port: $p, targetPort: $port, nodePort: $np}]}}' \
    | kubectl apply -f - >/dev/null
}

# Waits until `$1` (a command) succeeds, else dies with $2.
until_ok() {
  for _ in $(seq 1 100); do
    if eval "$1"; then return 0; fi
    sleep 0.3
  done
  eval "$1" || die "$2 (cluster created without cluster.yaml's extraPortMappings? re-create it with down.sh + up.sh)"
}

# NATS for the journeys (on 127.0.0.1:$NATS_LOCAL_PORT).
publish "$nats_svc" client 4222 30422
until_ok '[[ "$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$NATS_LOCAL_PORT && head -c 4 <&3" 2>/dev/null || true)" == INFO ]]' \
  "NATS does not answer on 127.0.0.1:$NATS_LOCAL_PORT"

# The operator's REST API (on 127.0.0.1:$OPERATOR_LOCAL_PORT): the REST journeys call it through
# the Service, so both replicas answer, also while a journey restarts them.
op_svc="$(kubectl -n "$NAMESPACE" get svc \
  -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=operator -o jsonpath='{.items[0].metadata.name}')"
[ -n "$op_svc" ] || die "no operator Service of release $RELEASE in $NAMESPACE"
publish "$op_svc" http 8080 30480
until_ok 'curl -fsS -o /dev/null "http://127.0.0.1:$OPERATOR_LOCAL_PORT/.well-known/openwop" 2>/dev/null' \
  "the operator does not answer on 127.0.0.1:$OPERATOR_LOCAL_PORT"

# The suite attaches to this cluster instead of starting the local mini-cluster.
export OPENWOP_E2E_KUBECONFIG="$KIND_KUBECONFIG"
export OPENWOP_E2E_NATS_URL="nats://127.0.0.1:$NATS_LOCAL_PORT"
export OPENWOP_E2E_OPERATOR_PORT="$OPERATOR_LOCAL_PORT"
export OPENWOP_E2E_RELEASE="$RELEASE"
export OPENWOP_E2E_RELEASE_NAMESPACE="$NAMESPACE"
export OPENWOP_NATS_URL="$OPENWOP_E2E_NATS_URL"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openwop/target}"
cd "$ROOT"
# The journeys read events with the CLI.
cargo build -p kubectl-openwop
log "running the portable journeys"
cargo test -p openwop-e2e --test journeys -- --test-threads=1 "$@"
