#!/usr/bin/env bash
# Creates (or reuses) a kind cluster, builds the operator and worker images, loads them into
# kind and installs the chart with the e2e values. Prints `export KUBECONFIG=...` last.
set -euo pipefail
# shellcheck source=e2e/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

need docker kind kubectl helm
docker info >/dev/null 2>&1 || die "cannot talk to Docker (is the daemon running, may you use it?)"
mkdir -p "$STATE_DIR"

if cluster_exists; then
  log "cluster $CLUSTER_NAME exists; reusing it"
  kind get kubeconfig --name "$CLUSTER_NAME" >"$KIND_KUBECONFIG"
else
  log "creating cluster $CLUSTER_NAME ($KIND_NODE_IMAGE)"
  kind create cluster --name "$CLUSTER_NAME" --image "$KIND_NODE_IMAGE" \
    --kubeconfig "$KIND_KUBECONFIG" --wait 180s
fi
export KUBECONFIG="$KIND_KUBECONFIG"

log "building $OPERATOR_IMAGE and $WORKER_IMAGE"
export DOCKER_BUILDKIT=1
docker build -f "$ROOT/docker/Dockerfile" --target operator -t "$OPERATOR_IMAGE" "$ROOT"
docker build -f "$ROOT/docker/Dockerfile" --target worker -t "$WORKER_IMAGE" "$ROOT"

log "loading the images into kind"
kind load docker-image --name "$CLUSTER_NAME" "$OPERATOR_IMAGE" "$WORKER_IMAGE"

log "installing the chart (release $RELEASE in $NAMESPACE)"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# Helm installs CRDs only on first install; apply them so a re-run picks up CRD changes.
kubectl apply --server-side --force-conflicts -f "$ROOT/charts/openwop/crds/openwop.dev_crds.yaml" >/dev/null
helm upgrade --install "$RELEASE" "$ROOT/charts/openwop" -n "$NAMESPACE" \
  -f "$ROOT/e2e/kind/values.yaml" \
  --set operator.image.repository="${OPERATOR_IMAGE%:*}" --set operator.image.tag="$IMAGE_TAG" \
  --set worker.image.repository="${WORKER_IMAGE%:*}" --set worker.image.tag="$IMAGE_TAG" \
  --wait --timeout 5m

log "ready"
echo "export KUBECONFIG=$KIND_KUBECONFIG"
