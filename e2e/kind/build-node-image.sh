#!/usr/bin/env bash
# Builds everything the kind path needs without a container registry, and prints the node
# image's name as the last line of stdout:
#   - kind itself, from its Go module;
#   - the Kubernetes binaries (kubelet, kubeadm, kubectl, kube-proxy, kube-scheduler; plus
#     kube-apiserver, kube-controller-manager, etcd and helm from the mini-cluster's
#     e2e/cluster/build-binaries.sh), CoreDNS, the CNI plugins and local-path-provisioner from
#     their Go modules, and the pause binary from Kubernetes' own C source;
#   - a Debian root filesystem (debootstrap) with systemd, containerd, runc and iptables;
#   - the control-plane, CoreDNS, pause, kube-proxy and storage images, tagged with the names
#     kubeadm and the manifests ask for;
#   - the node image: the Debian root with e2e/kind/node/ on top, the binaries in /usr/bin and
#     every image above preloaded in the node's containerd, so nothing is ever pulled.
# Cached under ~/.cache/openwop/kind (binaries, root filesystem) and in Docker (images), keyed by
# the pinned versions (e2e/cluster/versions.env, e2e/kind/versions.env) and the files of node/.
# A second run with nothing changed only checks that the node image exists.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kind/common.sh
source "$here/common.sh"
# shellcheck source=e2e/cluster/versions.env
source "$ROOT/e2e/cluster/versions.env"
# shellcheck source=e2e/kind/versions.env
source "$here/versions.env"

ETCD_TAG="${ETCD_VERSION#v}-0"
KUBE_MINOR="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
LOCAL_IMAGES=kind.openwop.local
# Debian packages of the node (and of the images that need iptables or a shell).
NODE_PACKAGES="systemd,systemd-sysv,dbus,containerd,runc,iptables,nftables,conntrack,iproute2,ethtool,util-linux,mount,kmod,ca-certificates,jq,procps,socat,libseccomp2,busybox-static,pigz"

bin_key="k8s-${KUBERNETES_VERSION}_kind-${KIND_VERSION}_coredns-${COREDNS_VERSION}_cni-${CNI_PLUGINS_VERSION}_lpp-${LOCAL_PATH_PROVISIONER_VERSION}_pause-${PAUSE_VERSION}"
BIN_DIR="$KIND_CACHE/bin/$bin_key"
rootfs_key="debian-${DEBIAN_SUITE}-$(echo "$NODE_PACKAGES" | sha256sum | cut -c1-10)"
ROOTFS_DIR="$KIND_CACHE/rootfs/$rootfs_key"
ROOTFS_IMAGE="$LOCAL_IMAGES/rootfs:$rootfs_key"
node_key="$( { cat "$ROOT/e2e/cluster/versions.env" "$here/versions.env" "${BASH_SOURCE[0]}" "$here/runc-capbnd";
  (cd "$here/node" && find . -type f | LC_ALL=C sort | xargs cat); echo "$NODE_PACKAGES"; } | sha256sum | cut -c1-12)"
NODE_IMAGE="${KIND_NODE_IMAGE_LOCAL:-$LOCAL_IMAGES/node:${KUBERNETES_VERSION}-${node_key}}"

if [[ "${1:-}" == --print-kind ]]; then echo "$BIN_DIR/kind"; exit 0; fi
if [[ "${1:-}" == --print-image ]]; then echo "$NODE_IMAGE"; exit 0; fi

if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 && [[ -x "$BIN_DIR/kind" ]]; then
  log "node image $NODE_IMAGE is cached"
  echo "$NODE_IMAGE"
  exit 0
fi

mkdir -p "$BIN_DIR" "$KIND_CACHE/rootfs" "$KIND_CACHE/logs"
start=$(date +%s)
timed() { # name, command...
  local name="$1" t0; shift; t0=$(date +%s)
  log "$name ..."
  "$@" || die "$name failed (see above; logs in $KIND_CACHE/logs)"
  log "$name: $(( $(date +%s) - t0 ))s"
}

go_bin="$(command -v go || echo /usr/local/go/bin/go)"
[[ -x "$go_bin" ]] || die "the Go toolchain is missing (go >= 1.24)"
export GOMODCACHE="${GOMODCACHE:-$OPENWOP_CACHE/go/mod}" GOCACHE="${GOCACHE:-$OPENWOP_CACHE/go/build}"
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" CGO_ENABLED=0
go_work="$OPENWOP_CACHE/go/work/kind-$bin_key"
mkdir -p "$go_work"

# --- Go binaries -----------------------------------------------------------------------------
go_install() { # output dir, ldflags, packages@version...
  local out="$1" ld="$2"; shift 2
  (cd "$go_work" && GOBIN="$out" nice -n 10 "$go_bin" install -trimpath -ldflags "$ld" "$@")
}

build_kube() { # the node's Kubernetes binaries, through the same kind of wrapper module as the mini-cluster
  local d="$go_work/kubernetes" modfile
  mkdir -p "$d"
  modfile="$("$go_bin" mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [[ -f "$modfile" ]] || return 1
  {
    printf 'module openwop.local/kind-kubernetes\n\ngo 1.24.0\n\ngodebug default=go1.24\n\n'
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$KUBERNETES_VERSION"
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" \
      | awk -v v="$KUBERNETES_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$d/go.mod"
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$KUBE_MINOR"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$BIN_DIR/kube.tmp"
  (cd "$d" && nice -n 10 "$go_bin" build -mod=mod -trimpath -ldflags "$ld" -o "$BIN_DIR/kube.tmp/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl \
      k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kube-scheduler) || return 1
  mv "$BIN_DIR"/kube.tmp/* "$BIN_DIR/" && rmdir "$BIN_DIR/kube.tmp"
}

build_pause() { # Kubernetes' pause container, from the C source in the k8s.io/kubernetes module
  local src
  src="$("$go_bin" mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c"
  [[ -f "$src" ]] || return 1
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-openwop" -o "$BIN_DIR/pause.tmp" "$src" \
    && strip "$BIN_DIR/pause.tmp" && mv "$BIN_DIR/pause.tmp" "$BIN_DIR/pause"
}

build_go_binaries() {
  [[ -x "$BIN_DIR/kind" ]] || timed "kind $KIND_VERSION" go_install "$BIN_DIR" "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
  [[ -x "$BIN_DIR/pause" ]] || timed "pause $PAUSE_VERSION" build_pause
  [[ -x "$BIN_DIR/portmap" ]] || timed "CNI plugins $CNI_PLUGINS_VERSION" go_install "$BIN_DIR" "-s -w" \
    "github.com/containernetworking/plugins/plugins/main/ptp@$CNI_PLUGINS_VERSION" \
    "github.com/containernetworking/plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION" \
    "github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_PLUGINS_VERSION" \
    "github.com/containernetworking/plugins/plugins/meta/portmap@$CNI_PLUGINS_VERSION"
  [[ -x "$BIN_DIR/local-path-provisioner" ]] || timed "local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION" \
    go_install "$BIN_DIR" "-s -w" "github.com/rancher/local-path-provisioner@$LOCAL_PATH_PROVISIONER_VERSION"
  [[ -x "$BIN_DIR/coredns" ]] || timed "coredns $COREDNS_VERSION" go_install "$BIN_DIR" "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  local b ok=1
  for b in kubelet kubeadm kubectl kube-proxy kube-scheduler; do [[ -x "$BIN_DIR/$b" ]] || ok=0; done
  [[ $ok == 1 ]] || timed "kubelet kubeadm kubectl kube-proxy kube-scheduler $KUBERNETES_VERSION" build_kube
}

# --- Debian root filesystem ------------------------------------------------------------------
build_rootfs() {
  command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
  rm -rf "$ROOTFS_DIR.tmp"
  nice -n 10 debootstrap --variant=minbase --include="$NODE_PACKAGES" "$DEBIAN_SUITE" "$ROOTFS_DIR.tmp" "$DEBIAN_MIRROR" \
    >"$KIND_CACHE/logs/debootstrap.log" 2>&1 || { tail -n 20 "$KIND_CACHE/logs/debootstrap.log" >&2; return 1; }
  # A container's root: no package caches, no services that only make sense on a real machine.
  rm -rf "$ROOTFS_DIR.tmp"/var/cache/apt/archives/*.deb "$ROOTFS_DIR.tmp"/var/lib/apt/lists/*
  rm -rf "$ROOTFS_DIR"
  mv "$ROOTFS_DIR.tmp" "$ROOTFS_DIR"
}

import_rootfs() {
  tar -C "$ROOTFS_DIR" --numeric-owner -c . | docker import - "$ROOTFS_IMAGE" >/dev/null
}

# --- images ----------------------------------------------------------------------------------
ctx="$KIND_CACHE/build-context"
image() { # name, Dockerfile text (the context is $ctx)
  printf '%s\n' "$2" | docker_build -q -t "$1" -f - "$ctx" >/dev/null || die "building image $1 failed"
}

build_images() {
  rm -rf "$ctx" && mkdir -p "$ctx/bin"
  local mc
  mc="$(bash "$ROOT/e2e/cluster/build-binaries.sh" | tail -n 1)"
  cp "$mc/kube-apiserver" "$mc/kube-controller-manager" "$mc/etcd" "$ctx/bin/"
  cp "$BIN_DIR"/{kube-scheduler,kube-proxy,coredns,pause,local-path-provisioner} "$ctx/bin/"
  cp "$ROOTFS_DIR/bin/busybox" "$ctx/bin/busybox"
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    image "registry.k8s.io/$c:$KUBERNETES_VERSION" "FROM scratch
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY bin/$c /usr/local/bin/$c
ENTRYPOINT [\"/usr/local/bin/$c\"]"
  done
  # kube-proxy writes iptables rules and runs conntrack: on the Debian root.
  image "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION" "FROM $ROOTFS_IMAGE
COPY bin/kube-proxy /usr/local/bin/kube-proxy
ENTRYPOINT [\"/usr/local/bin/kube-proxy\"]"
  image "registry.k8s.io/etcd:$ETCD_TAG" "FROM scratch
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY bin/etcd /usr/local/bin/etcd
ENTRYPOINT [\"/usr/local/bin/etcd\"]"
  image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "FROM scratch
COPY bin/coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT [\"/coredns\"]"
  image "registry.k8s.io/pause:$PAUSE_VERSION" "FROM scratch
COPY bin/pause /pause
USER 65535:65535
ENTRYPOINT [\"/pause\"]"
  image "$LOCAL_IMAGES/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION" "FROM scratch
ENV PATH=/usr/bin:/bin
COPY bin/local-path-provisioner /usr/bin/local-path-provisioner
ENTRYPOINT [\"/usr/bin/local-path-provisioner\"]"
  # The provisioner's helper pods run its setup/teardown scripts with sh: Debian's static busybox.
  image "$LOCAL_IMAGES/local-path-helper:$DEBIAN_SUITE" "FROM scratch
COPY bin/busybox /bin/busybox
RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]
ENV PATH=/bin"
}

preloaded_images() {
  echo "registry.k8s.io/kube-apiserver:$KUBERNETES_VERSION registry.k8s.io/kube-controller-manager:$KUBERNETES_VERSION"
  echo "registry.k8s.io/kube-scheduler:$KUBERNETES_VERSION registry.k8s.io/kube-proxy:$KUBERNETES_VERSION"
  echo "registry.k8s.io/etcd:$ETCD_TAG registry.k8s.io/coredns/coredns:$COREDNS_VERSION registry.k8s.io/pause:$PAUSE_VERSION"
  echo "$LOCAL_IMAGES/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION $LOCAL_IMAGES/local-path-helper:$DEBIAN_SUITE"
}

storage_manifest() { # local-path-provisioner's own deploy manifest, as kind's default StorageClass "standard"
  local src
  src="$(cd "$go_work" && "$go_bin" mod download -json "github.com/rancher/local-path-provisioner@$LOCAL_PATH_PROVISIONER_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/deploy/local-path-storage.yaml"
  [[ -f "$src" ]] || return 1
  sed -e "s#image: rancher/local-path-provisioner:.*#image: $LOCAL_IMAGES/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION#" \
      -e "s#image: busybox#image: $LOCAL_IMAGES/local-path-helper:$DEBIAN_SUITE#" \
      -e 's#^  name: local-path$#  name: standard\n  annotations:\n    storageclass.kubernetes.io/is-default-class: "true"#' \
      "$src"
}

build_node() {
  local nctx="$KIND_CACHE/node-context"
  rm -rf "$nctx" && mkdir -p "$nctx/bin" "$nctx/cni"
  cp -a "$here/node/." "$nctx/files/"
  mkdir -p "$nctx/files/usr/local/sbin"
  install -m 0755 "$here/runc-capbnd" "$nctx/files/usr/local/sbin/runc-capbnd"
  storage_manifest >"$nctx/files/kind/manifests/default-storage.yaml" || return 1
  sed -i "s/DEBIAN_SUITE/$DEBIAN_SUITE/" "$nctx/files/kind/manifests/default-cni.yaml"
  echo -n "$KUBERNETES_VERSION" >"$nctx/files/kind/version"
  cp "$BIN_DIR"/{kubelet,kubeadm,kubectl} "$nctx/bin/"
  cp "$BIN_DIR"/{ptp,loopback,host-local,portmap} "$nctx/cni/"
  mv "$nctx/files/etc/default-kubelet" "$nctx/files/etc/default/kubelet" 2>/dev/null || { mkdir -p "$nctx/files/etc/default"; mv "$nctx/files/etc/default-kubelet" "$nctx/files/etc/default/kubelet"; }
  cat >"$nctx/Dockerfile" <<EOF
FROM $ROOTFS_IMAGE
COPY files/ /
COPY bin/ /usr/bin/
COPY cni/ /opt/cni/bin/
# systemd in a container: only what the node needs (containerd, kubelet), no getty, no udev.
RUN set -e; \
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
          /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
          /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*; \
    find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete; \
    echo ReadKMsg=no >>/etc/systemd/journald.conf; \
    systemctl enable containerd.service kubelet.service; \
    systemctl mask systemd-binfmt.service getty.target; \
    mkdir -p /etc/kubernetes/manifests /etc/cni/net.d /var/lib/kubelet; \
    kubelet --version && kubeadm version -o short && containerd --version && runc --version | head -n 1
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
  local staged="$NODE_IMAGE-staged"
  docker_build -q -t "$staged" "$nctx" >/dev/null || return 1

  # Preload the images into the node's containerd (what kind's own node-image build does, without
  # pulling): containerd runs in a build container, imports `docker save` archives, and the
  # container is committed as the node image.
  local id
  id="openwop-node-build-$$"
  docker rm -f "$id" >/dev/null 2>&1 || true
  docker run -d --name "$id" --privileged --entrypoint sleep "$staged" infinity >/dev/null
  docker exec "$id" bash -c 'nohup containerd >/var/log/containerd-build.log 2>&1 &
    for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
    cat /var/log/containerd-build.log; exit 1' || { docker rm -f "$id" >/dev/null 2>&1; return 1; }
  # shellcheck disable=SC2046
  docker save $(preloaded_images) \
    | docker exec -i "$id" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests - >/dev/null || { docker rm -f "$id" >/dev/null 2>&1; return 1; }
  docker exec "$id" bash -c 'ctr --namespace=k8s.io images ls -q | grep -v -e "^sha256:" -e "^import-" | sort; pkill containerd; sleep 1; rm -f /var/log/containerd-build.log; rm -rf /run/containerd' >&2
  # The container keeps the staged image's STOPSIGNAL and ENV; only its sleep is undone.
  docker commit \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
    "$id" "$NODE_IMAGE" >/dev/null || { docker rm -f "$id" >/dev/null 2>&1; return 1; }
  docker rm -f "$id" >/dev/null
  docker rmi "$staged" >/dev/null 2>&1 || true
}

if [[ "${1:-}" == --binaries ]]; then build_go_binaries; exit 0; fi
# One build at a time per cache.
exec 8>"$KIND_CACHE/.build.lock"
flock 8
# Go builds and debootstrap use different resources (CPU vs. network and disk): run them side by side.
build_go_binaries >"$KIND_CACHE/logs/go-build.log" 2>&1 &
go_pid=$!
if [[ ! -x "$ROOTFS_DIR/usr/bin/containerd" ]]; then timed "debootstrap $DEBIAN_SUITE" build_rootfs; fi
docker image inspect "$ROOTFS_IMAGE" >/dev/null 2>&1 || timed "docker import of the root filesystem" import_rootfs
wait "$go_pid" || { cat "$KIND_CACHE/logs/go-build.log" >&2; die "Go builds failed"; }
cat "$KIND_CACHE/logs/go-build.log" >&2
timed "images (control plane, CoreDNS, pause, kube-proxy, storage)" build_images
timed "node image $NODE_IMAGE" build_node
log "done in $(( $(date +%s) - start ))s"
du -sh "$BIN_DIR" "$ROOTFS_DIR" >&2 || true
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^($LOCAL_IMAGES/node|$LOCAL_IMAGES/rootfs)" >&2 || true
echo "$NODE_IMAGE"
