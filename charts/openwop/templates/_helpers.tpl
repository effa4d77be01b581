{{/* Chart name, possibly overridden. */}}
{{- define "openwop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource name prefix: the release name, plus the chart name unless the release already contains it. */}}
{{- define "openwop.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "openwop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "openwop.labels" -}}
helm.sh/chart: {{ include "openwop.chart" . }}
app.kubernetes.io/name: {{ include "openwop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: openwop
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "openwop.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "openwop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "openwop.nats.selectorLabels" -}}
app.kubernetes.io/name: {{ include "openwop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nats
{{- end }}

{{- define "openwop.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (printf "%s-operator" (include "openwop.fullname" .)) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "openwop.operator.image" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) }}
{{- end }}

{{- define "openwop.worker.image" -}}
{{- printf "%s:%s" .Values.worker.image.repository (default .Chart.AppVersion .Values.worker.image.tag) }}
{{- end }}

{{- define "openwop.nats.fullname" -}}
{{- printf "%s-nats" (include "openwop.fullname" .) }}
{{- end }}

{{/* The NATS URL workers publish to: the in-chart client Service, or the external URL. */}}
{{- define "openwop.nats.url" -}}
{{- if .Values.nats.enabled }}
{{- printf "nats://%s.%s.svc:%d" (include "openwop.nats.fullname" .) .Release.Namespace (int .Values.nats.port) }}
{{- else }}
{{- required "nats.external.url is required when nats.enabled is false" .Values.nats.external.url }}
{{- end }}
{{- end }}

{{/* Namespaces that get the worker ServiceAccount: the release namespace plus worker.namespaces. */}}
{{- define "openwop.worker.namespaces" -}}
{{- $all := list .Release.Namespace }}
{{- range .Values.worker.namespaces }}
{{- $all = append $all . }}
{{- end }}
{{- $all | uniq | join "," }}
{{- end }}

{{/* Restricted-profile container security context. */}}
{{- define "openwop.restrictedContainerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* nats.conf of the in-chart NATS (single node, JetStream file store under /data). */}}
{{- define "openwop.nats.conf" -}}
port: {{ .Values.nats.port }}
http_port: {{ .Values.nats.monitorPort }}
server_name: $POD_NAME
pid_file: /var/run/nats/nats.pid
max_payload: {{ .Values.nats.maxPayload }}
lame_duck_duration: 30s
jetstream {
  store_dir: /data
  max_memory_store: {{ .Values.nats.jetstream.maxMemory }}
  max_file_store: {{ .Values.nats.jetstream.maxFile }}
}
{{- end }}

{{/* Secret with the external NATS credentials; empty with the chart's own NATS or none set. */}}
{{- define "openwop.nats.credentialsSecret" -}}
{{- if not .Values.nats.enabled }}
{{- with .Values.nats.external.credentialsSecret }}
{{- if eq . "openwop-nats-credentials" }}
{{- fail "nats.external.credentialsSecret must not be named openwop-nats-credentials: that is the name of the operator's per-namespace copies" }}
{{- end }}
{{- . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Ids of the conformance fixture workflows templates/conformance-fixtures.yaml installs (comma
separated; empty unless conformance.seams.enabled): discovery advertises them in `fixtures`.
*/}}
{{- define "openwop.conformanceFixtures" -}}
{{- if .Values.conformance.seams.enabled -}}
{{- range $path, $_ := .Files.Glob "fixtures/conformance-*.json" }}{{ base $path | trimSuffix ".json" }},{{ end -}}
conformance-agent-reasoning,conformance-agent-low-confidence,conformance-envelope-truncated,conformance-envelope-retry-attempted,conformance-envelope-truncation-cap-exhaustion,conformance-envelope-refusal
{{- /* the authored interrupt-profile fixtures (conformance-fixtures.yaml) */ -}}
{{- ",conformance-interrupt-external-event,conformance-interrupt-auth-required" }}
{{- ",conformance-interrupt-quorum,conformance-interrupt-parent-child-cancel,conformance-interrupt-parent-child-cancel-child" }}
{{- ",conformance-approval-refine,conformance-approval-edit-accept" }}
{{- end -}}
{{- end }}

{{/* The Secret holding the webhook signing key: the user's, or the one the chart creates. */}}
{{- define "openwop.webhooks.signingKeySecret" -}}
{{- .Values.webhooks.signingKey.existingSecret | default (printf "%s-webhook-signing-key" (include "openwop.fullname" .)) -}}
{{- end }}
