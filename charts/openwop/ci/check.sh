#!/usr/bin/env bash
# Checks the openwop chart: generated files are fresh, helm lint is clean, every values file
# renders, the rendered nats.conf is valid, and (when a cluster answers) every manifest passes
# a server-side dry-run. Usage: bash charts/openwop/ci/check.sh   (call it from `make test`).
# Needs helm and nats-server on PATH, or the mini-cluster's binaries (e2e/cluster/build-binaries.sh).
set -euo pipefail

CHART="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$CHART/../.." && pwd)"
RELEASE=openwop-check
NAMESPACE=openwop-chart-check
fail() { echo "chart check: $*" >&2; exit 1; }

if ! command -v helm >/dev/null || ! command -v nats-server >/dev/null; then
  BIN="$(bash "$ROOT/e2e/cluster/build-binaries.sh" | tail -n 1)"
  export PATH="$BIN:$PATH"
fi
command -v helm >/dev/null || fail "helm not found (run e2e/cluster/build-binaries.sh)"

echo "== CRDs identical to crds/openwop.dev_crds.yaml"
diff -u "$ROOT/crds/openwop.dev_crds.yaml" "$CHART/crds/openwop.dev_crds.yaml" \
  || fail "charts/openwop/crds is stale: cp crds/openwop.dev_crds.yaml charts/openwop/crds/"

echo "== values.schema.json and README.md up to date"
python3 "$CHART/ci/gen_schema.py" --check
python3 "$CHART/ci/values_doc.py" --check

echo "== helm lint"
helm lint --strict "$CHART" -n "$NAMESPACE"
for f in "$CHART"/ci/*-values.yaml; do
  helm lint --strict "$CHART" -n "$NAMESPACE" -f "$f" --set serviceMonitor.enabled=false
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== render"
helm template "$RELEASE" "$CHART" -n "$NAMESPACE" --include-crds >"$work/default.yaml"
for f in "$CHART"/ci/*-values.yaml; do
  name="$(basename "$f" -values.yaml)"
  helm template "$RELEASE" "$CHART" -n "$NAMESPACE" -f "$f" \
    --api-versions monitoring.coreos.com/v1 >"$work/$name-sm.yaml"
  # The dry-run cluster has no Prometheus Operator: render without the ServiceMonitor.
  helm template "$RELEASE" "$CHART" -n "$NAMESPACE" -f "$f" --set serviceMonitor.enabled=false \
    >"$work/$name.yaml"
done
# Conformance seams: off by default (no fixture Workflow, no fixture advertised); on, one
# Workflow per official fixture file (fixtures/*.json) plus the host's six render and discovery
# lists them.
helm template "$RELEASE" "$CHART" -n "$NAMESPACE" --set conformance.seams.enabled=true >"$work/seams.yaml"
grep -q '^kind: Workflow' "$work/default.yaml" && fail "default values render conformance fixture Workflows"
grep -q 'conformance-agent-reasoning' "$work/default.yaml" && fail "default values advertise conformance fixtures"
official=$(ls "$CHART"/fixtures/conformance-*.json | wc -l)
# Every fixture discovery advertises is installed, and nothing else: as many Workflows as
# advertised ids, at least the official files plus the host's authored ones.
advertised=$(grep -c -- '^ *- conformance-' "$work/seams.yaml")
[ "$(grep -c '^kind: Workflow' "$work/seams.yaml")" = "$advertised" ] || fail "conformance.seams.enabled renders $(grep -c '^kind: Workflow' "$work/seams.yaml") fixture Workflows but advertises $advertised"
[ "$advertised" -ge $((official + 13)) ] || fail "conformance.seams.enabled advertises $advertised fixtures, fewer than the $official official ones plus the host's 13"
for f in conformance-noop conformance-idempotent conformance-multi-node conformance-approval conformance-clarification conformance-failure conformance-agent-low-confidence conformance-envelope-truncated conformance-envelope-retry-attempted \
  conformance-envelope-truncation-cap-exhaustion conformance-envelope-refusal conformance-interrupt-external-event conformance-interrupt-auth-required conformance-approval-refine conformance-approval-edit-accept; do
  grep -q -- "- $f\$" "$work/seams.yaml" || fail "conformance fixture $f not advertised in discovery fixtures"
done
grep -q '^kind: ServiceMonitor' "$work/full-sm.yaml" || fail "full values render no ServiceMonitor"
grep -q '^kind: NetworkPolicy' "$work/full.yaml" || fail "full values render no NetworkPolicy"
# networkPolicy.workerEgress: one worker egress policy per listed namespace, none by default.
[ "$(grep -c -- '-worker-egress$' "$work/full.yaml")" = 2 ] || fail "full values render no worker egress NetworkPolicy per listed namespace"
grep -q -- '-worker-egress$' "$work/default.yaml" && fail "default values render a worker egress NetworkPolicy"
grep -q 'volumeClaimTemplates' "$work/full.yaml" || fail "persistence renders no volumeClaimTemplates"
grep -q '^kind: StatefulSet' "$work/external-nats.yaml" && fail "external NATS still renders the StatefulSet"
grep -q 'retention: "2592000"' "$work/full.yaml" || fail "nats.stream.maxAge in seconds not passed as events.retention"
grep -q 'natsUrl: nats://nats.messaging.svc:4222' "$work/external-nats.yaml" \
  || fail "external NATS URL not passed to the operator config"
# nats.external.credentialsSecret: mounted into the operator, named in its config, RBAC for
# the per-namespace copies; none of it without the value.
python3 - "$work/external-nats.yaml" "$work/default.yaml" <<'PY' || fail "external NATS credentials render"
import sys, yaml
def docs(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]
def find(ds, kind, suffix):
    return next(d for d in ds if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))
ext, default = docs(sys.argv[1]), docs(sys.argv[2])
pod = find(ext, "Deployment", "-operator")["spec"]["template"]["spec"]
vol = next(v for v in pod["volumes"] if v["name"] == "nats-credentials")
assert vol["secret"] == {"secretName": "nats-auth", "defaultMode": 0o400}, vol
mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "nats-credentials")
assert mount == {"name": "nats-credentials", "mountPath": "/var/run/openwop/nats", "readOnly": True}, mount
cfg = yaml.safe_load(find(ext, "ConfigMap", "-operator")["data"]["config.yaml"])
assert cfg["natsCredentials"] == {"dir": "/var/run/openwop/nats", "workerSecret": "openwop-nats-credentials"}, cfg
rules = find(ext, "ClusterRole", "-operator")["rules"]
assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch", "delete"]} in rules, rules
dpod = find(default, "Deployment", "-operator")["spec"]["template"]["spec"]
assert all(v["name"] != "nats-credentials" for v in dpod["volumes"]), dpod["volumes"]
dcfg = yaml.safe_load(find(default, "ConfigMap", "-operator")["data"]["config.yaml"])
assert dcfg["natsCredentials"]["dir"] == "", dcfg
assert dcfg["events"]["retention"] == "168h", dcfg["events"]
# Secrets are read one by one (a ToolServer's headersFrom), never listed or watched.
drules = find(default, "ClusterRole", "-operator")["rules"]
assert all(not ({"list", "watch"} & set(r["verbs"])) for r in drules if "secrets" in r["resources"]), drules
PY

# rest.*: every value reaches the operator config (full-values.yaml sets each one).
python3 - "$work/full.yaml" <<'PY' || fail "rest.* values not passed to the operator config"
import sys, yaml
d = next(d for d in yaml.safe_load_all(open(sys.argv[1]))
         if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator"))
cfg = yaml.safe_load(d["data"]["config.yaml"])
want = {"enabled": True, "reviewCacheSeconds": 0, "maxBodyBytes": 65536, "maxInFlight": 256,
        "keepaliveSeconds": 5, "interruptRecordWaitSeconds": 3,
        "interruptTokens": {"keyFile": "/var/run/openwop/webhooks/signing-key", "lifetimeSeconds": 600,
                            "previousKeyFile": "/var/run/openwop/webhooks/previous-signing-key"},
        "idempotency": {"bucket": "openwop-check-idempotency", "retentionSeconds": 172800}}
assert cfg["rest"] == want, cfg.get("rest")
PY

# ui.*: on by default; the values reach the operator config.
helm template "$RELEASE" "$CHART" -n "$NAMESPACE" --set ui.enabled=false --set ui.sessionSeconds=3600 >"$work/ui-off.yaml"
python3 - "$work/default.yaml" "$work/ui-off.yaml" <<'PY' || fail "ui.* values not passed to the operator config"
import sys, yaml
def cfg(path):
    d = next(d for d in yaml.safe_load_all(open(path))
             if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator"))
    return yaml.safe_load(d["data"]["config.yaml"])
assert cfg(sys.argv[1])["ui"] == {"enabled": True, "sessionSeconds": 28800}, cfg(sys.argv[1]).get("ui")
assert cfg(sys.argv[2])["ui"] == {"enabled": False, "sessionSeconds": 3600}, cfg(sys.argv[2]).get("ui")
PY

# Spans: worker.otlpEndpoint reaches the config; with the seams on, the span store's URL
# defaults to the operator Service (a value overrides it).
python3 - "$work/seams.yaml" "$work/full.yaml" <<'PY' || fail "span export values not passed to the operator config"
import sys, yaml
def cfg(path):
    d = next(d for d in yaml.safe_load_all(open(path))
             if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator"))
    return yaml.safe_load(d["data"]["config.yaml"])
seams, full = cfg(sys.argv[1]), cfg(sys.argv[2])
assert seams["conformance"]["seams"] == {"enabled": True,
    "spanIngestUrl": "http://openwop-check-operator.openwop-chart-check.svc:8080"}, seams["conformance"]
assert full["worker"]["otlpEndpoint"] == "http://otel-collector.observability.svc:4318", full["worker"]
PY

# webhooks.*: on by default with a generated signing key Secret mounted into the operator;
# an existing Secret replaces it; caBundle and allowHosts reach the operator config.
helm template "$RELEASE" "$CHART" -n "$NAMESPACE" --set webhooks.signingKey.existingSecret=my-key \
  --set 'webhooks.allowHosts[0]=10.0.0.0/8' --set-string webhooks.caBundle='-----BEGIN CERTIFICATE-----' \
  --set webhooks.maxAttempts=1 >"$work/webhooks.yaml"
helm template "$RELEASE" "$CHART" -n "$NAMESPACE" --set webhooks.enabled=false >"$work/webhooks-off.yaml"
helm template "$RELEASE" "$CHART" -n "$NAMESPACE" --set webhooks.enabled=false --set rest.enabled=false >"$work/signing-off.yaml"
python3 - "$work/default.yaml" "$work/webhooks.yaml" "$work/webhooks-off.yaml" "$work/signing-off.yaml" <<'PY' || fail "webhooks.* / rest.interruptTokens values not rendered as expected"
import sys, yaml
def docs(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]
def find(ds, kind, suffix):
    return [d for d in ds if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
def cfg(ds):
    return yaml.safe_load(find(ds, "ConfigMap", "-operator")[0]["data"]["config.yaml"])
def pod(ds):
    return find(ds, "Deployment", "-operator")[0]["spec"]["template"]["spec"]
default, custom, off, none = (docs(p) for p in sys.argv[1:5])
w = cfg(default)["webhooks"]
assert w["enabled"] and w["signingKeyFile"] == "/var/run/openwop/webhooks/signing-key", w
assert w["bucket"] == "openwop-check-webhooks" and w["caFile"] == "" and w["allowHosts"] == [], w
(secret,) = find(default, "Secret", "-webhook-signing-key")
assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", secret
assert len(secret["data"]["signing-key"]) >= 44, "a random key of 64 characters"
vol = next(v for v in pod(default)["volumes"] if v["name"] == "webhook-signing-key")
assert vol["secret"]["secretName"] == "openwop-check-webhook-signing-key", vol
mount = next(m for m in pod(default)["containers"][0]["volumeMounts"] if m["name"] == "webhook-signing-key")
assert mount["mountPath"] == "/var/run/openwop/webhooks", mount
assert not find(custom, "Secret", "-webhook-signing-key"), "existingSecret still renders a Secret"
vol = next(v for v in pod(custom)["volumes"] if v["name"] == "webhook-signing-key")
assert vol["secret"]["secretName"] == "my-key", vol
w = cfg(custom)["webhooks"]
assert w["caFile"] == "/etc/openwop/webhook-ca.crt" and w["allowHosts"] == ["10.0.0.0/8"] and w["maxAttempts"] == 1, w
assert "webhook-ca.crt" in find(custom, "ConfigMap", "-operator")[0]["data"]
assert not cfg(off)["webhooks"]["enabled"]
# The same Secret keys the interrupt tokens: kept (and mounted, every key of it, so a
# previous-signing-key reaches the operator while rotating) as long as the REST API is on.
t = cfg(default)["rest"]["interruptTokens"]
assert t == {"keyFile": "/var/run/openwop/webhooks/signing-key", "lifetimeSeconds": 1800,
             "previousKeyFile": "/var/run/openwop/webhooks/previous-signing-key"}, t
assert cfg(default)["rest"]["idempotency"] == {"bucket": "openwop-check-idempotency", "retentionSeconds": 86400}
assert find(off, "Secret", "-webhook-signing-key"), "rest.enabled still needs the signing key"
vol = next(v for v in pod(off)["volumes"] if v["name"] == "webhook-signing-key")
assert "items" not in vol["secret"], vol
assert not find(none, "Secret", "-webhook-signing-key")
assert all(v["name"] != "webhook-signing-key" for v in pod(none)["volumes"])
assert cfg(none)["rest"]["interruptTokens"]["keyFile"] == ""
PY

echo "== invalid values are refused"
expect_refusal() {
  local why="$1"; shift
  if helm template "$RELEASE" "$CHART" "$@" >/dev/null 2>"$work/err"; then
    fail "accepted $why ($*)"
  fi
}
expect_refusal "a typo" --set operator.replicsa=2
expect_refusal "maxRetryAttempts 40" --set reliability.maxRetryAttempts=40
expect_refusal "an unknown vendor" --set 'providers[0].name=x' --set 'providers[0].vendor=acme'
expect_refusal "external NATS without URL" --set nats.enabled=false
expect_refusal "a credentials Secret named like the operator's copies" --set nats.enabled=false \
  --set nats.external.url=nats://x:4222 --set nats.external.credentialsSecret=openwop-nats-credentials
expect_refusal "two replicas without leader election" --set operator.leaderElection.enabled=false
expect_refusal "runAsUser 0" --set worker.runAsUser=0
expect_refusal "a retention that is no duration" --set nats.stream.maxAge=7days
expect_refusal "ServiceMonitor without its API" --set serviceMonitor.enabled=true
expect_refusal "an SSE keepalive over 30 s" --set rest.keepaliveSeconds=31
expect_refusal "a web UI session under a minute" --set ui.sessionSeconds=10
expect_refusal "no request in flight" --set rest.maxInFlight=0
expect_refusal "a body bound under 1 KiB" --set rest.maxBodyBytes=512
expect_refusal "a review cache over 5 minutes" --set rest.reviewCacheSeconds=301
expect_refusal "an OTLP endpoint that is no URL" --set worker.otlpEndpoint=collector:4318
expect_refusal "no webhook attempt" --set webhooks.maxAttempts=0
expect_refusal "a webhook timeout over 30 s" --set webhooks.timeoutSeconds=31
expect_refusal "a first webhook backoff above the longest" --set webhooks.initialBackoffMs=120000 --set webhooks.maxBackoffSeconds=60

if command -v nats-server >/dev/null; then
  echo "== nats.conf accepted by nats-server -t"
  python3 - "$work/full.yaml" "$work/nats.conf" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and "nats.conf" in d.get("data", {}):
        open(sys.argv[2], "w").write(d["data"]["nats.conf"])
        break
else:
    sys.exit("no nats.conf rendered")
PY
  POD_NAME=check nats-server -c "$work/nats.conf" -t >/dev/null
fi

if [ -n "${KUBECONFIG:-}" ] && kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "== server-side dry-run against $(kubectl config current-context)"
  for ns in "$NAMESPACE" openwop-chart-check-a openwop-chart-check-b; do
    kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  done
  # Pod Security "restricted" warns (on dry-run too) about any pod template that breaks it.
  kubectl label namespace "$NAMESPACE" --overwrite \
    pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted >/dev/null
  for f in "$work"/default.yaml "$work"/full.yaml "$work"/external-nats.yaml; do
    echo "-- $(basename "$f")"
    kubectl apply --server-side --dry-run=server --field-manager=chart-check -f "$f" \
      >/dev/null 2>"$work/dry-run.err" || { cat "$work/dry-run.err" >&2; fail "dry-run of $f refused"; }
    if grep -i 'podsecurity' "$work/dry-run.err" >&2; then
      fail "$(basename "$f"): a pod template violates the restricted Pod Security Standard"
    fi
  done
else
  echo "== no cluster reachable (KUBECONFIG unset or down): server-side dry-run skipped"
fi
echo "chart check: ok"
