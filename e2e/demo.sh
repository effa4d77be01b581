#!/usr/bin/env bash
# make demo: from a fresh clone to an AI workflow run on the local mini-cluster, no API key needed.
#   1. build the operator, worker, CLI and node agent (cargo);
#   2. bring up the mini-cluster (e2e/cluster/cluster.sh up; builds the control plane once);
#   3. helm install charts/openwop (the operator runs as a pod through the node agent), allowing
#      provider mocks in the demo namespace;
#   4. apply examples/05-ai-triage.yaml: a Workflow of two LLM nodes (a structuredOutput node
#      whose first answer is truncated and retried with a doubled budget, then a node that asks
#      a clarification question) and a Run that scripts their provider calls (spec.providerMocks);
#   5. wait until the run asks its question, show it (kubectl openwop describe), answer it
#      (kubectl openwop resume), then follow the whole timeline to the end, reasoning in its lane;
#   6. print the run's outputs and status.
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
run=triage-run
example=examples/05-ai-triage.yaml

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
  --set "conformance.providerMockNamespaces={j-*,$demo_ns}" \
  --wait --timeout 3m
kubectl -n "$release_ns" rollout status deployment -l app.kubernetes.io/component=operator --timeout=120s

step "applying $example in namespace $demo_ns"
kubectl create namespace "$demo_ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# A fresh Run each time: a Run re-created under the same name is a new run (new runId, new log).
kubectl -n "$demo_ns" delete run "$run" --ignore-not-found --wait=true >/dev/null
kubectl -n "$demo_ns" apply -f "$repo/$example"
kubectl -n "$demo_ns" wait --for=condition=Ready workflow/ticket-triage --timeout=60s \
  || { kubectl -n "$demo_ns" get workflow ticket-triage -o yaml >&2; die "the Workflow did not become Ready"; }

# Polls the Run's phase until it is one of $@; dies on a terminal phase not asked for.
wait_phase() {
  local phase="" deadline=$((SECONDS + 180))
  while ((SECONDS < deadline)); do
    phase="$(kubectl -n "$demo_ns" get run "$run" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
    for want in "$@"; do [[ "$phase" == "$want" ]] && return 0; done
    case "$phase" in
      completed | failed | cancelled)
        "$bin/kubectl-openwop" describe "$run" -n "$demo_ns" >&2 || true
        die "the Run ended $phase while waiting for: $*" ;;
    esac
    sleep 0.5
  done
  kubectl -n "$demo_ns" get run "$run" -o yaml >&2
  die "the Run did not reach $* within 180 s (phase: ${phase:-none})"
}

step "Run $run: extract (structured output) then plan (asks a question); waiting for the question"
wait_phase waiting-input
"$bin/kubectl-openwop" describe "$run" -n "$demo_ns"

step "answering it: kubectl openwop resume $run -n $demo_ns --answer refund=now"
"$bin/kubectl-openwop" resume "$run" -n "$demo_ns" --answer refund=now

step "the run's timeline (kubectl openwop events $run -n $demo_ns -f; reasoning indented in its own lane)"
timeout 180 "$bin/kubectl-openwop" events "$run" -n "$demo_ns" -f --nats-url "$OPENWOP_NATS_URL" \
  || die "the event stream did not reach the end of the run within 180 s"

step "Run status and outputs"
wait_phase completed
kubectl -n "$demo_ns" get run "$run"
if command -v jq >/dev/null; then
  "$bin/kubectl-openwop" events "$run" -n "$demo_ns" --json --no-reasoning --nats-url "$OPENWOP_NATS_URL" \
    | jq 'select(.message.type == "run.completed") | .message.payload.outputs | map_values(.output)'
fi

step "the web UI: a ServiceAccount that may follow, answer and cancel runs in $demo_ns, and a token for it"
kubectl -n "$demo_ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: openwop-ui}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: openwop-ui}
rules:
  - {apiGroups: [openwop.dev], resources: [runs], verbs: [get, list, create, patch]}
  - {apiGroups: [openwop.dev], resources: [workflows], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: openwop-ui}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: openwop-ui}
subjects: [{kind: ServiceAccount, name: openwop-ui}]
EOF
# Pods share the host network here: the operator's port is the host's.
ui_port="$(kubectl -n "$release_ns" get deployment -l app.kubernetes.io/component=operator \
  -o jsonpath='{.items[0].spec.template.spec.containers[0].ports[0].containerPort}')"
run_id="$(kubectl -n "$demo_ns" get run "$run" -o jsonpath='{.metadata.uid}')"
token_file="${OPENWOP_STATE_DIR:-$HOME/.cache/openwop/cluster}/demo-ui-token"
mkdir -p "$(dirname "$token_file")"
(umask 077 && kubectl -n "$demo_ns" create token openwop-ui --duration 8h >"$token_file")
ui_url="http://127.0.0.1:$ui_port/ui/runs/$run_id"
curl -fsS -o /dev/null "$ui_url" || die "the web UI does not answer at $ui_url"

cat >&2 <<EOF

Done. The cluster keeps running:
  export KUBECONFIG=$KUBECONFIG OPENWOP_NATS_URL=$OPENWOP_NATS_URL
  kubectl get workflows,runs -n $demo_ns
  $bin/kubectl-openwop events $run -n $demo_ns              # the timeline again (--json for machines)
  make cluster-down      # stop everything

The run in the web UI: log in with the token in $token_file
(or: kubectl -n $demo_ns create token openwop-ui), then follow, inspect and answer runs there.
EOF
echo "$ui_url"
