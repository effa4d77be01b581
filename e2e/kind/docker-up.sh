#!/usr/bin/env bash
# Makes sure a Docker daemon answers. Used by `make kind-test` (and CI); harmless where Docker
# already runs: then it only checks that privileged containers work and says what to do if not.
#
# When no daemon answers and we are root, it starts `dockerd` (installing Debian's docker.io
# first when OPENWOP_KIND_INSTALL=1, as CI does). Where this machine's capability bounding set
# lacks capabilities that `--privileged` asks for (CapBnd in /proc/self/status; seen: a VM
# without CAP_SYS_RESOURCE, "unable to apply caps: operation not permitted"), the daemon gets
# e2e/kind/runc-capbnd as its default runtime: a runc wrapper that drops those capabilities
# from each container's config. Elsewhere the daemon's configuration is left alone.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kind/common.sh
source "$here/common.sh"

bnd="$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)"
# Every capability up to CAP_CHECKPOINT_RESTORE (40) present?
short_capbnd() { (( (0x$bnd & 0x1ffffffffff) != 0x1ffffffffff )); }

if ! command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
  if [[ "${OPENWOP_KIND_INSTALL:-0}" == 1 && $EUID -eq 0 ]]; then
    log "installing docker.io from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io jq >/dev/null
  else
    die "no Docker here: install Docker (Debian: apt-get install docker.io) or set OPENWOP_KIND_INSTALL=1"
  fi
fi

if ! docker info >/dev/null 2>&1; then
  [[ $EUID -eq 0 ]] || die "the Docker daemon does not answer and only root may start it here"
  if short_capbnd; then
    log "capability bounding set $bnd lacks capabilities privileged containers ask for:"
    log "  installing the runc-capbnd wrapper as the daemon's default runtime"
    command -v jq >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null
    install -m 0755 "$here/runc-capbnd" /usr/local/sbin/runc-capbnd
    mkdir -p /etc/docker
    cfg='{}'
    [[ -s /etc/docker/daemon.json ]] && cfg="$(cat /etc/docker/daemon.json)"
    jq '.runtimes["runc-capbnd"] = {"path": "/usr/local/sbin/runc-capbnd"} | ."default-runtime" = "runc-capbnd"' \
      <<<"$cfg" >/etc/docker/daemon.json.new
    mv /etc/docker/daemon.json.new /etc/docker/daemon.json
  fi
  mkdir -p "$KIND_CACHE"
  log "starting dockerd (log: $KIND_CACHE/dockerd.log)"
  # setsid: the daemon outlives this script (and the make that ran it).
  setsid nohup dockerd >>"$KIND_CACHE/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || die "dockerd did not come up: $(tail -n 20 "$KIND_CACHE/dockerd.log")"
fi

if short_capbnd; then
  rt="$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null || true)"
  [[ "$rt" == runc-capbnd ]] || log "warning: capability bounding set $bnd is short and the daemon's default runtime is '$rt', not runc-capbnd: privileged containers may fail ('unable to apply caps'); see e2e/kind/README.md"
fi
log "docker $(docker version --format '{{.Server.Version}}') ready"
