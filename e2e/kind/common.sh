# Shared settings of the kind scripts (sourced, not run). Every value can be overridden from
# the environment.
# shellcheck shell=bash disable=SC2034

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# kind v0.29.0's image for Kubernetes 1.33.1 (digest from the kind release notes), so every
# run gets the same node whatever kind version is installed.
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.33.1@sha256:050072256b9a903bd914c0b2866828150cb229cea0efe5892e2b644d5dd3b34f}"
CLUSTER_NAME="${OPENWOP_KIND_CLUSTER:-openwop}"
STATE_DIR="${OPENWOP_KIND_STATE:-${HOME}/.cache/openwop/kind/${CLUSTER_NAME}}"
# A kubeconfig of its own: the scripts never edit ~/.kube/config.
KIND_KUBECONFIG="${STATE_DIR}/kubeconfig"
RELEASE="${OPENWOP_RELEASE:-openwop}"
NAMESPACE="${OPENWOP_NAMESPACE:-openwop-system}"
IMAGE_TAG="${OPENWOP_IMAGE_TAG:-kind}"
OPERATOR_IMAGE="openwop/openwop-operator:${IMAGE_TAG}"
WORKER_IMAGE="openwop/openwop-worker:${IMAGE_TAG}"
NATS_LOCAL_PORT="${OPENWOP_KIND_NATS_PORT:-24222}"

log() { echo "[kind] $*" >&2; }
die() { echo "[kind] error: $*" >&2; exit 1; }

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (see e2e/kind/README.md, Requirements)"
  done
}

cluster_exists() {
  kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"
}
