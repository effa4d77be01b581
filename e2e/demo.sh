#!/usr/bin/env bash
# make demo: from a fresh clone to a completed OpenWOP run on the local mini-cluster.
#   1. build the operator, worker, CLI and node agent (cargo);
#   2. bring up the mini-cluster (e2e/cluster/cluster.sh up; builds the control plane once);
#   3. helm install charts/openwop (the operator runs as a pod through the node agent);
#   4. apply examples/01-hello-workflow.yaml and a Run, tail its events live until it ends;
#   5. print the Run's status.
# Re-running is fine: the release is upgraded and the demo Run recreated.
#
# Environment: DEMO_NAMESPACE (default openwop-demo), RELEASE_NAMESPACE (openwop-system),
# CARGO_TARGET_DIR (~/.cache/openwop/target), and everything cluster.sh reads.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openwop/target}"
demo_ns="${DEMO_NAMESPACE:-openwop-demo}"
release_ns="${RELEASE_NAMESPACE:-openwop-system}"
release=openwop
run=hello-run

step() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { echo "demo: ERROR: $*" >&2; exit 1; }

command -v cargo >/dev/null || die "cargo is missing (rustup: https://rustup.rs)"
command -v kubectl >/dev/null || die "kubectl is missing"

step "building openwop-operator, openwop-worker, kubectl-openwop and the node agent"
(cd "$repo" && cargo build -q -p openwop-operator -p openwop-worker -p kubectl-openwop \
  -p openwop-e2e --bins) || die "cargo build failed"
bin="$CARGO_TARGET_DIR/debug"

step "starting the mini-cluster (first run builds kube-apiserver, etcd, helm, nats-server: ~20 min)"
export OPENWOP_NODE_AGENT_BIN="$bin/openwop-node-agent"
eval "$(bash "$here/cluster/cluster.sh" up | grep '^export ')"
: "${KUBECONFIG:?cluster.sh printed no KUBECONFIG}" "${OPENWOP_NATS_URL:?cluster.sh printed no NATS URL}"
helm="$(bash "$here/cluster/build-binaries.sh")/helm"

step "helm upgrade --install $release charts/openwop (namespace $release_ns, NATS $OPENWOP_NATS_URL)"
"$helm" upgrade --install "$release" "$repo/charts/openwop" -n "$release_ns" --create-namespace \
  -f "$here/helm/mini-cluster-values.yaml" --set "nats.external.url=$OPENWOP_NATS_URL" \
  --wait --timeout 3m
kubectl -n "$release_ns" rollout status deployment -l app.kubernetes.io/component=operator --timeout=120s

step "applying examples/01-hello-workflow.yaml in namespace $demo_ns"
kubectl create namespace "$demo_ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$demo_ns" apply -f "$repo/examples/01-hello-workflow.yaml"
kubectl -n "$demo_ns" wait --for=condition=Ready workflow/hello --timeout=60s \
  || { kubectl -n "$demo_ns" get workflow hello -o yaml >&2; die "the Workflow did not become Ready"; }

step "starting Run $run (a fresh one each time)"
kubectl -n "$demo_ns" delete run "$run" --ignore-not-found --wait=true >/dev/null
kubectl -n "$demo_ns" apply -f "$repo/examples/03-run-by-id.yaml"

step "tailing the run's events (kubectl openwop events $run -n $demo_ns -f)"
timeout 180 "$bin/kubectl-openwop" events "$run" -n "$demo_ns" -f --nats-url "$OPENWOP_NATS_URL" \
  || die "the event stream did not reach the end of the run within 180 s"

step "Run status"
kubectl -n "$demo_ns" wait --for=jsonpath='{.status.phase}'=completed "run/$run" --timeout=60s \
  || { kubectl -n "$demo_ns" get run "$run" -o yaml >&2; die "the Run did not complete"; }
"$bin/kubectl-openwop" describe "$run" -n "$demo_ns"

cat >&2 <<EOF

Done. The cluster keeps running:
  export KUBECONFIG=$KUBECONFIG OPENWOP_NATS_URL=$OPENWOP_NATS_URL
  kubectl get workflows,runs -n $demo_ns
  $bin/kubectl-openwop events $run -n $demo_ns
  make cluster-down      # stop everything
EOF
