#!/usr/bin/env bash
# Offline images of the kind path (OPENWOP_KIND_OFFLINE=1): nothing is pulled.
#   - the operator and the worker: static binaries (glibc with +crt-static, release profile,
#     symbols stripped as the Dockerfile's builder does) compiled here in their own target
#     directory (so this can run while other cargo builds hold theirs), then docker/Dockerfile
#     with BINARIES=prebuilt and RUNTIME_IMAGE=runtime-local (scratch + CA bundle + passwd taken
#     from the node image's Debian root);
#   - NATS: the chart's default nats:*-alpine comes from Docker Hub; here the mini-cluster's
#     nats-server (e2e/cluster/versions.env) on scratch, as kind.openwop.local/nats:<version>.
# Needs the node image's root filesystem image (build-node-image.sh builds it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kind/common.sh
source "$here/common.sh"

target_dir="$STATIC_TARGET_DIR"
t0=$(date +%s)
log "static operator and worker (release, CARGO_TARGET_DIR=$target_dir)"
(cd "$ROOT" && CARGO_TARGET_DIR="$target_dir" RUSTFLAGS="-C target-feature=+crt-static" nice -n 10 \
   cargo build --release --locked --target x86_64-unknown-linux-gnu -p openwop-operator -p openwop-worker)
log "cargo: $(( $(date +%s) - t0 ))s"
mkdir -p "$ROOT/docker/prebuilt"
cp "$target_dir/x86_64-unknown-linux-gnu/release/openwop-operator" \
   "$target_dir/x86_64-unknown-linux-gnu/release/openwop-worker" "$ROOT/docker/prebuilt/"
strip "$ROOT"/docker/prebuilt/openwop-{operator,worker}

rootfs_image="$(docker image ls --format '{{.Repository}}:{{.Tag}}' kind.openwop.local/rootfs | head -n 1)"
[[ -n "$rootfs_image" ]] || die "no kind.openwop.local/rootfs image: run e2e/kind/build-node-image.sh first"
build_args=(--build-arg BINARIES=prebuilt --build-arg RUNTIME_IMAGE=runtime-local --build-arg "DEBIAN_IMAGE=$rootfs_image")
docker_build -q -f "$ROOT/docker/Dockerfile" "${build_args[@]}" --target operator -t "$OPERATOR_IMAGE" "$ROOT" >/dev/null
docker_build -q -f "$ROOT/docker/Dockerfile" "${build_args[@]}" --target worker -t "$WORKER_IMAGE" "$ROOT" >/dev/null

mc_bin="$(bash "$ROOT/e2e/cluster/build-binaries.sh" | tail -n 1)"
nctx="$KIND_CACHE/nats-image"
rm -rf "$nctx" && mkdir -p "$nctx" && cp "$mc_bin/nats-server" "$nctx/"
printf 'FROM scratch\nENV PATH=/usr/local/bin\nCOPY nats-server /usr/local/bin/nats-server\nEXPOSE 4222 8222\nENTRYPOINT ["nats-server"]\n' \
  | docker_build -q -t "$NATS_IMAGE" -f - "$nctx" >/dev/null
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
  | grep -E "^(${OPERATOR_IMAGE%:*}:$IMAGE_TAG|${WORKER_IMAGE%:*}:$IMAGE_TAG|$NATS_IMAGE) " >&2 || true
log "images built in $(( $(date +%s) - t0 ))s"
