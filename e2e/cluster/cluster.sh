#!/usr/bin/env bash
# Local mini-cluster without Docker: etcd, kube-apiserver, kube-controller-manager, nats-server
# (JetStream) and our node agent, all as processes on loopback.
#
#   cluster.sh up       start (idempotent); last line of stdout: export KUBECONFIG=...
#   cluster.sh down     stop every process and wipe runtime data (etcd, NATS, pods); keeps certs
#   cluster.sh status   show each component
#   cluster.sh env      print the export lines (KUBECONFIG, OPENWOP_NATS_URL)
#   cluster.sh purge    down, then delete the whole state directory
#
# Environment:
#   OPENWOP_STATE_DIR        state directory (default ~/.cache/openwop/cluster)
#   OPENWOP_PORT_OFFSET      added to every port (default 0), for a second cluster beside the first
#   OPENWOP_NODE_AGENT_BIN   node agent binary to run (default: built with cargo)
#   OPENWOP_NODE_AGENT_CONFIG  image -> binary config (default e2e/node-agent.yaml)
#   OPENWOP_KCM_ARGS         extra kube-controller-manager flags, space-separated (read when it
#                            starts), e.g. the bench's Jobs leg unthrottled:
#                            "--kube-api-qps=1000 --kube-api-burst=2000 --concurrent-job-syncs=32"
#   OPENWOP_APISERVER_ARGS   extra kube-apiserver flags, space-separated, e.g. "--profiling=true"
#                            to take a CPU profile (kubectl get --raw /debug/pprof/profile)
#   CARGO_TARGET_DIR         where cargo builds (default ~/.cache/openwop/target)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${OPENWOP_STATE_DIR:-$HOME/.cache/openwop/cluster}"
off="${OPENWOP_PORT_OFFSET:-0}"
[[ "$off" =~ ^[0-9]+$ ]] || { echo "OPENWOP_PORT_OFFSET must be a number" >&2; exit 2; }

P_ETCD=$((12379 + off))
P_ETCD_PEER=$((12380 + off))
P_API=$((16443 + off))
P_KCM=$((16257 + off))
P_KUBELET=$((16250 + off))
P_NATS=$((14222 + off))
P_NATS_MON=$((18222 + off))
NODE_NAME="${OPENWOP_NODE_NAME:-openwop-node}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openwop/target}"

pki="$state/pki"
run="$state/run"
logs="$state/logs"
admin_kc="$state/admin.kubeconfig"

log() { echo "[cluster] $*" >&2; }
die() { echo "[cluster] ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- processes

# pid of a running component, or nothing. The cmdline check guards against pid reuse.
alive_pid() {
  local f="$run/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2" || return 1
  echo "$pid"
}

# start NAME MATCH BINARY ARGS...: own session (so down can end the whole tree), logs to file.
start() {
  local name="$1" match="$2"; shift 2
  if alive_pid "$name" "$match" >/dev/null; then
    log "$name already running (pid $(cat "$run/$name.pid"))"
    return 0
  fi
  log "starting $name"
  # 8>&- : the state lock must not outlive this script in the started processes.
  setsid "$@" >>"$logs/$name.log" 2>&1 </dev/null 8>&- &
  echo $! >"$run/$name.pid"
}

# Alive and not a zombie awaiting its reaper.
running() {
  [[ -e "/proc/$1" ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

stop() {
  local name="$1" match="$2" pid i
  pid="$(alive_pid "$name" "$match")" || { rm -f "$run/$name.pid"; return 0; }
  log "stopping $name (pid $pid)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 150); do
    running "$pid" || break
    sleep 0.1
  done
  if running "$pid"; then
    log "$name did not stop in 15s: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  # Anything left in the component's session (e.g. pod processes in their own process groups).
  pkill -KILL -s "$pid" 2>/dev/null || true
  rm -f "$run/$name.pid"
}

wait_for() { # description, seconds, command...
  local what="$1" secs="$2" i; shift 2
  for i in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

# ---------------------------------------------------------------- certificates and kubeconfigs

cert() { # name, subject, [san]: a key and a certificate signed by the cluster CA
  local name="$1" subj="$2" san="${3:-}"
  [[ -f "$pki/$name.crt" ]] && return 0
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$san" ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

kubeconfig() { # file, user, cert name
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: openwop
  cluster:
    server: https://127.0.0.1:$P_API
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$3.crt
    client-key: $pki/$3.key
contexts:
- name: openwop
  context: {cluster: openwop, user: $2, namespace: default}
current-context: openwop
EOF
}

ensure_pki() {
  command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"
  mkdir -p "$pki"
  chmod 700 "$pki"
  if [[ ! -f "$pki/ca.crt" ]]; then
    log "generating CA, serving certs and service-account keys in $pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" \
      -days 3650 -subj "/CN=openwop-mini-cluster-ca" 2>/dev/null
  fi
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=kubernetes-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert node-agent "/O=system:nodes/CN=system:node:$NODE_NAME"
  # The agent also schedules (binds pods), which NodeRestriction forbids to nodes.
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" "IP:127.0.0.1,DNS:localhost,DNS:$NODE_NAME"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  if [[ ! -f "$pki/sa.key" ]]; then
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
  # Kubeconfigs carry the ports, so rewrite them every time (the offset may have changed).
  kubeconfig "$admin_kc" kubernetes-admin admin
  kubeconfig "$state/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  kubeconfig "$state/node-agent.kubeconfig" "system:node:$NODE_NAME" node-agent
  kubeconfig "$state/scheduler.kubeconfig" system:kube-scheduler scheduler
}

# ---------------------------------------------------------------- components

kc() { kubectl --kubeconfig "$admin_kc" --request-timeout=5s "$@"; }

node_agent_bin() {
  if [[ -n "${OPENWOP_NODE_AGENT_BIN:-}" ]]; then
    [[ -x "$OPENWOP_NODE_AGENT_BIN" ]] || die "OPENWOP_NODE_AGENT_BIN=$OPENWOP_NODE_AGENT_BIN is not an executable"
    echo "$OPENWOP_NODE_AGENT_BIN"
    return
  fi
  command -v cargo >/dev/null || die "cargo is missing: needed to build the node agent"
  log "building the node agent (cargo build -p openwop-e2e --bin openwop-node-agent)"
  (cd "$repo" && cargo build -q -p openwop-e2e --bin openwop-node-agent >&2) || die "building the node agent failed"
  echo "$CARGO_TARGET_DIR/debug/openwop-node-agent"
}

up() {
  local bin
  bin="$(bash "$here/build-binaries.sh")" || die "the control-plane binaries are not available"
  command -v kubectl >/dev/null || die "kubectl is missing (it is used for readiness checks and RBAC setup)"
  mkdir -p "$state" "$run" "$logs"
  ensure_pki

  # etcd
  start etcd "$bin/etcd" "$bin/etcd" --name openwop --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$P_ETCD" --advertise-client-urls "http://127.0.0.1:$P_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$P_ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$P_ETCD_PEER" \
    --initial-cluster "openwop=http://127.0.0.1:$P_ETCD_PEER" \
    --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -sf "http://127.0.0.1:$P_ETCD/health" || die "etcd did not become healthy; see $logs/etcd.log"

  # kube-apiserver
  local api_extra=()
  read -ra api_extra <<<"${OPENWOP_APISERVER_ARGS:-}"
  start kube-apiserver "$bin/kube-apiserver" "$bin/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$P_API" \
    --etcd-servers="http://127.0.0.1:$P_ETCD" \
    --client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$pki/ca.crt" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --endpoint-reconciler-type=none --allow-privileged=true \
    --cert-dir="$state/apiserver" --profiling=false --v=1 "${api_extra[@]}"
  wait_for kube-apiserver 90 kc get --raw /readyz || die "kube-apiserver did not become ready; see $logs/kube-apiserver.log"

  # kube-controller-manager
  local kcm_kc="$state/controller-manager.kubeconfig" kcm_extra=()
  read -ra kcm_extra <<<"${OPENWOP_KCM_ARGS:-}"
  start kube-controller-manager "$bin/kube-controller-manager" "$bin/kube-controller-manager" \
    --kubeconfig="$kcm_kc" --authentication-kubeconfig="$kcm_kc" --authorization-kubeconfig="$kcm_kc" \
    --bind-address=127.0.0.1 --secure-port="$P_KCM" --cert-dir="$state/controller-manager" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --controllers='*' --profiling=false --v=1 "${kcm_extra[@]}"
  wait_for kube-controller-manager 60 curl -skf "https://127.0.0.1:$P_KCM/healthz" \
    || die "kube-controller-manager did not become healthy; see $logs/kube-controller-manager.log"

  # nats-server with JetStream
  mkdir -p "$state/nats"
  start nats-server "$bin/nats-server" "$bin/nats-server" -a 127.0.0.1 -p "$P_NATS" \
    -m "$P_NATS_MON" -js -sd "$state/nats" -n openwop-nats
  wait_for nats 30 curl -sf "http://127.0.0.1:$P_NATS_MON/healthz?js-enabled-only=true" \
    || die "nats-server did not become healthy; see $logs/nats-server.log"

  # node agent; restarted when a different binary is asked for (tests pass the one cargo just
  # built), so a long-running cluster does not keep testing stale agent code.
  local agent sig
  if alive_pid node-agent openwop-node-agent >/dev/null; then
    if [[ -n "${OPENWOP_NODE_AGENT_BIN:-}" ]]; then
      sig="$(stat -c '%n %Y %s' "$OPENWOP_NODE_AGENT_BIN" 2>/dev/null || true)"
      if [[ "$sig" != "$(cat "$run/node-agent.bin" 2>/dev/null)" ]]; then
        log "node agent binary changed: restarting the node agent"
        stop node-agent openwop-node-agent
      fi
    fi
  fi
  if ! alive_pid node-agent openwop-node-agent >/dev/null; then
    agent="$(node_agent_bin)"
    stat -c '%n %Y %s' "$agent" >"$run/node-agent.bin"
  fi
  mkdir -p "$state/node-agent"
  start node-agent openwop-node-agent env CARGO_TARGET_DIR="$CARGO_TARGET_DIR" \
    RUST_LOG="${RUST_LOG:-info}" "${agent:-}" \
    --kubeconfig "$state/node-agent.kubeconfig" --scheduler-kubeconfig "$state/scheduler.kubeconfig" \
    --node-name "$NODE_NAME" \
    --config "${OPENWOP_NODE_AGENT_CONFIG:-$repo/e2e/node-agent.yaml}" \
    --state-dir "$state/node-agent" --api-server "https://127.0.0.1:$P_API" --ca-file "$pki/ca.crt" \
    --kubelet-port "$P_KUBELET" --tls-cert "$pki/kubelet-serving.crt" --tls-key "$pki/kubelet-serving.key"
  wait_for node 60 kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s \
    || die "node $NODE_NAME did not become Ready; see $logs/node-agent.log"

  # The service-account and token controllers have run once the default account exists.
  wait_for serviceaccount 60 kc get serviceaccount default -n default \
    || die "the default ServiceAccount was not created; see $logs/kube-controller-manager.log"

  log "cluster ready: apiserver https://127.0.0.1:$P_API, NATS nats://127.0.0.1:$P_NATS, state $state"
  env_lines
}

env_lines() {
  echo "export OPENWOP_NATS_URL=nats://127.0.0.1:$P_NATS"
  echo "export KUBECONFIG=$admin_kc"
}

down() {
  [[ -d "$run" ]] || { log "nothing running (no $run)"; return 0; }
  stop node-agent openwop-node-agent
  stop nats-server nats-server
  stop kube-controller-manager kube-controller-manager
  stop kube-apiserver kube-apiserver
  stop etcd etcd
  # A fresh cluster next time: drop stored objects, streams and pod directories, keep the PKI so
  # kubeconfigs that were exported stay valid.
  rm -rf "$state/etcd" "$state/nats" "$state/node-agent" "$state/apiserver" "$state/controller-manager"
  log "cluster stopped"
}

status() {
  local c m rc=0
  for c in etcd:etcd kube-apiserver:kube-apiserver kube-controller-manager:kube-controller-manager \
    nats-server:nats-server node-agent:openwop-node-agent; do
    m="${c#*:}"; c="${c%%:*}"
    if pid="$(alive_pid "$c" "$m")"; then
      printf '%-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '%-24s stopped\n' "$c"; rc=1
    fi
  done
  return $rc
}

cmd="${1:-}"
case "$cmd" in
  up|down|purge)
    mkdir -p "$state"
    # Serialise concurrent callers (parallel test binaries) on one state directory.
    exec 8>"$state/.lock"
    flock 8
    case "$cmd" in
      up) up ;;
      down) down ;;
      purge) down; rm -rf "$state"; log "removed $state" ;;
    esac
    ;;
  status) status ;;
  env) env_lines ;;
  *) echo "usage: $0 up|down|status|env|purge" >&2; exit 2 ;;
esac
