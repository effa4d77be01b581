# Shared settings of the kind scripts (sourced, not run). Every value can be overridden from
# the environment.
# shellcheck shell=bash disable=SC2034

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OPENWOP_CACHE="${OPENWOP_CACHE:-$HOME/.cache/openwop}"
# Everything the offline kind path builds (kind, node image parts, logs) lives here.
KIND_CACHE="${OPENWOP_KIND_CACHE:-$OPENWOP_CACHE/kind}"
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
# The chart's default repositories, with the tag of this build.
OPERATOR_IMAGE="ghcr.io/openwop/openwop-operator:${IMAGE_TAG}"
WORKER_IMAGE="ghcr.io/openwop/openwop-worker:${IMAGE_TAG}"
# Offline: the mini-cluster's nats-server as the chart's NATS image (build-images.sh).
NATS_IMAGE="kind.openwop.local/nats:$(source "$ROOT/e2e/cluster/versions.env" && echo "$NATS_SERVER_VERSION")"
# Offline: the static release build of the images has a target directory of its own, so it can
# run beside other cargo builds (CI runs it during `make test`).
STATIC_TARGET_DIR="${OPENWOP_STATIC_TARGET_DIR:-$OPENWOP_CACHE/target-static}"
# 1: build everything here and pull nothing (make kind-test, CI); 0: use registries.
OFFLINE="${OPENWOP_KIND_OFFLINE:-0}"
NATS_LOCAL_PORT="${OPENWOP_KIND_NATS_PORT:-24222}"
OPERATOR_LOCAL_PORT="${OPENWOP_KIND_OPERATOR_PORT:-28080}"

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

# `docker build` with BuildKit (the Dockerfile builds only the stages a target needs): buildx
# where it is installed, else the classic client's built-in BuildKit (Docker 20.10..22; newer
# clients without buildx refuse DOCKER_BUILDKIT=1, so fall back to Debian's /usr/bin/docker).
docker_build() {
  if docker buildx version >/dev/null 2>&1; then
    docker buildx build --load "$@"
  else
    local cli=docker major
    major="$(docker version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)"
    if [[ "${major:-0}" -ge 23 && -x /usr/bin/docker ]]; then cli=/usr/bin/docker; fi
    DOCKER_BUILDKIT=1 "$cli" build "$@"
  fi
}
