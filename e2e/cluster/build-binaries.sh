#!/usr/bin/env bash
# Builds the mini-cluster's binaries (kube-apiserver, kube-controller-manager, etcd, helm,
# nats-server) from their Go modules at the versions pinned in versions.env.
# Output: ${OPENWOP_BIN_CACHE:-~/.cache/openwop/bin}/<version-key>/; reused when present.
# Prints the bin directory as its last line of stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

cache_root="${OPENWOP_CACHE:-$HOME/.cache/openwop}"
key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}_nats-${NATS_SERVER_VERSION}"
bin_dir="${OPENWOP_BIN_CACHE:-$cache_root/bin}/$key"
work_root="$cache_root/go/work/$key"

log() { echo "[build-binaries] $*" >&2; }
die() { echo "[build-binaries] ERROR: $*" >&2; exit 1; }

all_present() {
  for b in etcd kube-apiserver kube-controller-manager helm nats-server; do
    [[ -x "$bin_dir/$b" ]] || return 1
  done
}

if all_present; then
  echo "$bin_dir"
  exit 0
fi

go_bin="$(command -v go || true)"
[[ -z "$go_bin" && -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go
[[ -n "$go_bin" ]] || die "the Go toolchain is missing: install Go >= 1.24 (e.g. /usr/local/go/bin/go) and put it on PATH"

export GOMODCACHE="${GOMODCACHE:-$cache_root/go/mod}"
export GOCACHE="${GOCACHE:-$cache_root/go/build}"
export GOTOOLCHAIN=local
export GOFLAGS="-buildvcs=false"
export CGO_ENABLED=0
mkdir -p "$bin_dir" "$work_root" "$GOMODCACHE" "$GOCACHE"

# One build at a time per cache: parallel test binaries may all call this script.
exec 9>"$bin_dir/.build.lock"
flock 9
if all_present; then echo "$bin_dir"; exit 0; fi

# Fail early with a clear message when the module proxy cannot be reached.
if ! "$go_bin" list -m -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null 2>"$work_root/proxy-check.err"; then
  cat "$work_root/proxy-check.err" >&2
  die "cannot resolve k8s.io/kubernetes@$KUBERNETES_VERSION: is the Go module proxy reachable (GOPROXY=$("$go_bin" env GOPROXY))?"
fi

start_all=$(date +%s)
timed() { # name, command...
  local name="$1"; shift
  local t0; t0=$(date +%s)
  log "building $name ..."
  "$@" || die "building $name failed (see output above)"
  log "built $name in $(( $(date +%s) - t0 ))s"
}

# --- etcd: a tiny main around etcdmain, in its own module so its dependency graph is etcd's own.
build_etcd() {
  local d="$work_root/etcd"
  mkdir -p "$d"
  cat >"$d/go.mod" <<GOMOD
module openwop.local/etcd

go 1.23.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat >"$d/main.go" <<'GOSRC'
// Command etcd is etcd's own server entry point, built from go.etcd.io/etcd/server/v3.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GOSRC
  (cd "$d" && "$go_bin" build -mod=mod -trimpath -ldflags "-s -w" -o "$bin_dir/etcd.tmp" . ) \
    && mv "$bin_dir/etcd.tmp" "$bin_dir/etcd"
}

# --- kube-apiserver + kube-controller-manager: wrapper module requiring k8s.io/kubernetes with
# every staging module replaced by its published v0.x.y (kubernetes' own go.mod points them at
# ./staging, which a dependent module cannot use).
build_kube() {
  local d="$work_root/kubernetes"
  mkdir -p "$d"
  local modfile
  modfile="$("$go_bin" mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [[ -f "$modfile" ]] || die "could not download the go.mod of k8s.io/kubernetes@$KUBERNETES_VERSION"
  {
    echo "module openwop.local/kubernetes"
    echo
    echo "go 1.24.0"
    echo
    echo "godebug default=go1.24"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" \
      | awk -v v="$KUBERNETES_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$d/go.mod"
  local minor; minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$bin_dir/kube.tmp"
  (cd "$d" && "$go_bin" build -mod=mod -trimpath -ldflags "$ld" -o "$bin_dir/kube.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager) \
    && mv "$bin_dir/kube.tmp/kube-apiserver" "$bin_dir/kube-apiserver" \
    && mv "$bin_dir/kube.tmp/kube-controller-manager" "$bin_dir/kube-controller-manager" \
    && rmdir "$bin_dir/kube.tmp"
}

# --- helm and nats-server: their modules have no replace directives, so `go install m@v` works.
build_go_install() { # package@version, output name, ldflags
  local tmp="$bin_dir/.gobin-$2"
  mkdir -p "$tmp"
  (cd "$work_root" && GOBIN="$tmp" "$go_bin" install -trimpath -ldflags "$3" "$1") \
    && mv "$tmp/$2" "$bin_dir/$2" && rmdir "$tmp"
}

[[ -x "$bin_dir/etcd" ]] || timed etcd build_etcd
[[ -x "$bin_dir/kube-apiserver" && -x "$bin_dir/kube-controller-manager" ]] || timed "kube-apiserver+kube-controller-manager" build_kube
[[ -x "$bin_dir/nats-server" ]] || timed nats-server build_go_install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION" nats-server "-s -w"
helm_ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
[[ -x "$bin_dir/helm" ]] || timed helm build_go_install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm "$helm_ld"

all_present || die "some binaries are still missing in $bin_dir"
log "all binaries ready in $bin_dir (this run: $(( $(date +%s) - start_all ))s)"
du -h "$bin_dir"/* >&2
echo "$bin_dir"
