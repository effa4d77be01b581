#!/usr/bin/env bash
# Creates (or reuses) a kind cluster, builds the operator and worker images, loads them into
# kind and installs the chart with the e2e values. Prints `export KUBECONFIG=...` last.
#
# Two ways (see README.md):
#   registry access (default): kind, kubectl and helm from your PATH, the pinned kindest/node
#     image, and docker/Dockerfile's own builder stage (Rust and distroless images pulled);
#   OPENWOP_KIND_OFFLINE=1 (what `make kind-test` and CI use): nothing is pulled. kind, the node
#     image and its control-plane images are built by build-node-image.sh, the operator, worker
#     and NATS images by build-images.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kind/common.sh
source "$here/common.sh"
t_start=$(date +%s)
step() { log "[$(( $(date +%s) - t_start ))s] $*"; }
mkdir -p "$STATE_DIR"

if [[ "$OFFLINE" == 1 ]]; then
  bash "$here/docker-up.sh"
  step "node image (build-node-image.sh)"
  KIND_NODE_IMAGE="$(bash "$here/build-node-image.sh" | tail -n 1)"
  kind_bin="$(bash "$here/build-node-image.sh" --print-kind)"
  mc_bin="$(bash "$ROOT/e2e/cluster/build-binaries.sh" | tail -n 1)"
  # kind, kubectl (the node's) and helm (the mini-cluster's) from the caches, ahead of PATH.
  mkdir -p "$STATE_DIR/bin"
  ln -sf "$kind_bin" "$STATE_DIR/bin/kind"
  ln -sf "$(dirname "$kind_bin")/kubectl" "$STATE_DIR/bin/kubectl"
  ln -sf "$mc_bin/helm" "$STATE_DIR/bin/helm"
  export PATH="$STATE_DIR/bin:$PATH"
fi
need docker kind kubectl helm
docker info >/dev/null 2>&1 || die "cannot talk to Docker (is the daemon running, may you use it?)"

if cluster_exists; then
  step "cluster $CLUSTER_NAME exists; reusing it"
  kind get kubeconfig --name "$CLUSTER_NAME" >"$KIND_KUBECONFIG"
else
  step "creating cluster $CLUSTER_NAME ($KIND_NODE_IMAGE)"
  cfg="$STATE_DIR/kind-config.yaml"
  sed -e "s/hostPort: 24222/hostPort: $NATS_LOCAL_PORT/" -e "s/hostPort: 28080/hostPort: $OPERATOR_LOCAL_PORT/" \
    "$here/cluster.yaml" >"$cfg"
  if [[ "$OFFLINE" == 1 ]]; then
    # The node image carries the mini-cluster's etcd (e2e/cluster/versions.env), not the
    # newer patch release kubeadm would default to: tell kubeadm which one it has.
    # shellcheck source=e2e/cluster/versions.env
    etcd_version="$(source "$ROOT/e2e/cluster/versions.env" && echo "${ETCD_VERSION#v}-0")"
    cat >>"$cfg" <<EOF
kubeadmConfigPatches:
  - |
    kind: ClusterConfiguration
    etcd:
      local:
        imageTag: "$etcd_version"
EOF
  fi
  kind create cluster --name "$CLUSTER_NAME" --image "$KIND_NODE_IMAGE" --config "$cfg" \
    --kubeconfig "$KIND_KUBECONFIG" --wait 180s \
    || { kind export logs --name "$CLUSTER_NAME" "$STATE_DIR/kind-logs" >/dev/null 2>&1 || true
         die "kind create cluster failed; node logs in $STATE_DIR/kind-logs"; }
fi
export KUBECONFIG="$KIND_KUBECONFIG"

step "building $OPERATOR_IMAGE and $WORKER_IMAGE"
images=("$OPERATOR_IMAGE" "$WORKER_IMAGE")
helm_args=()
if [[ "$OFFLINE" == 1 ]]; then
  bash "$here/build-images.sh"
  images+=("$NATS_IMAGE")
  helm_args+=(--set nats.image.repository="${NATS_IMAGE%:*}" --set nats.image.tag="${NATS_IMAGE##*:}")
else
  docker_build -f "$ROOT/docker/Dockerfile" --target operator -t "$OPERATOR_IMAGE" "$ROOT"
  docker_build -f "$ROOT/docker/Dockerfile" --target worker -t "$WORKER_IMAGE" "$ROOT"
fi

step "loading the images into kind"
kind load docker-image --name "$CLUSTER_NAME" "${images[@]}"

step "installing the chart (release $RELEASE in $NAMESPACE)"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# Helm installs CRDs only on first install; apply them so a re-run picks up CRD changes.
kubectl apply --server-side --force-conflicts -f "$ROOT/charts/openwop/crds/openwop.dev_crds.yaml" >/dev/null
helm upgrade --install "$RELEASE" "$ROOT/charts/openwop" -n "$NAMESPACE" \
  -f "$here/values.yaml" \
  --set operator.image.repository="${OPERATOR_IMAGE%:*}" --set operator.image.tag="$IMAGE_TAG" \
  --set worker.image.repository="${WORKER_IMAGE%:*}" --set worker.image.tag="$IMAGE_TAG" \
  "${helm_args[@]}" --wait --timeout 5m \
  || { kubectl -n "$NAMESPACE" get pods -o wide >&2; kubectl -n "$NAMESPACE" describe pods >"$STATE_DIR/describe-pods.txt" 2>&1
       die "helm install failed; kubectl describe pods in $STATE_DIR/describe-pods.txt"; }

step "ready"
echo "export KUBECONFIG=$KIND_KUBECONFIG"
