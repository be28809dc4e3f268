{{/* Names, labels and the pieces every CacheRoute container shares. */}}

{{- define "cacheroute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cacheroute.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "cacheroute.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "cacheroute.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "router"). */}}
{{- define "cacheroute.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cacheroute.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "cacheroute.labels" -}}
{{ include "cacheroute.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "cacheroute.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "cacheroute.controlplaneService" -}}
{{- printf "%s-controlplane" (include "cacheroute.fullname" .) -}}
{{- end -}}

{{- define "cacheroute.routerService" -}}
{{- printf "%s-router" (include "cacheroute.fullname" .) -}}
{{- end -}}

{{- define "cacheroute.redisService" -}}
{{- printf "%s-redis" (include "cacheroute.fullname" .) -}}
{{- end -}}

{{/* The Secret holding the store URL, and its key. */}}
{{- define "cacheroute.storeSecret" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- printf "%s-store" (include "cacheroute.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "cacheroute.storeSecretKey" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecretKey -}}
{{- else -}}
url
{{- end -}}
{{- end -}}

{{/* The store URL the chart writes into its Secret; fails when none or two are chosen.
Called with the root context plus "password" (the trial Redis's): (merge (dict "password" $p) .). */}}
{{- define "cacheroute.storeUrl" -}}
{{- $chosen := 0 -}}
{{- if .Values.redis.embedded.enabled }}{{ $chosen = add1 $chosen }}{{ end -}}
{{- if .Values.redis.url }}{{ $chosen = add1 $chosen }}{{ end -}}
{{- if .Values.redis.existingSecret }}{{ $chosen = add1 $chosen }}{{ end -}}
{{- if ne (int $chosen) 1 -}}
{{- fail "redis: choose exactly one store: redis.embedded.enabled, redis.url or redis.existingSecret" -}}
{{- end -}}
{{- if .Values.redis.embedded.enabled -}}
{{- printf "redis://:%s@%s:%d/0" .password (include "cacheroute.redisService" .) (int .Values.redis.embedded.port) -}}
{{- else -}}
{{- .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{/* A secret value: the one given, else the one the release's Secret already holds (stable
across upgrades; `lookup` finds nothing under `helm template`), else a new random one:
(dict "given" .Values.auth.agentToken "secret" $lookedUp "key" "agent-token"). */}}
{{- define "cacheroute.keptSecret" -}}
{{- $found := "" -}}
{{- if and .secret .secret.data (hasKey .secret.data .key) -}}
{{- $found = index .secret.data .key | b64dec -}}
{{- end -}}
{{- .given | default $found | default (randAlphaNum 43) -}}
{{- end -}}

{{/* Protected mode: an install is authenticated (auth.enabled) or says it is open. */}}
{{- define "cacheroute.exposure" -}}
{{- if and .Values.auth.enabled .Values.allowUnauthenticated -}}
{{- fail "allowUnauthenticated: true needs auth.enabled=false (choose one)" -}}
{{- end -}}
{{- if not (or .Values.auth.enabled .Values.allowUnauthenticated) -}}
{{- fail "auth.enabled=false leaves every port open: set allowUnauthenticated=true to say so, or keep auth.enabled" -}}
{{- end -}}
{{- end -}}

{{- define "cacheroute.authSecret" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else -}}
{{- printf "%s-auth" (include "cacheroute.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "cacheroute.tlsSecret" -}}
{{- if .Values.tls.existingSecret -}}
{{- .Values.tls.existingSecret -}}
{{- else if and .Values.tls.cert .Values.tls.key .Values.tls.ca -}}
{{- printf "%s-tls" (include "cacheroute.fullname" .) -}}
{{- else -}}
{{- fail "tls.existingSecret: name the kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt), or give tls.cert, tls.key and tls.ca (PEM)" -}}
{{- end -}}
{{- end -}}

{{/* Environment every CacheRoute server shares: logging and the store URL from its Secret. */}}
{{- define "cacheroute.commonEnv" -}}
- name: CACHEROUTE_LOG_FORMAT
  value: json
- name: CACHEROUTE_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{- define "cacheroute.storeEnv" -}}
- name: CACHEROUTE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "cacheroute.storeSecret" . }}
      key: {{ include "cacheroute.storeSecretKey" . }}
{{- end -}}

{{/* The downward API: this Pod's name and IP. */}}
{{- define "cacheroute.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{- define "cacheroute.extraEnv" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* A gRPC probe of one health service: (dict "port" 50051 "service" "readiness" ...). */}}
{{- define "cacheroute.grpcProbe" -}}
grpc:
  port: {{ .port }}
  service: {{ .service }}
periodSeconds: {{ .period | default 5 }}
timeoutSeconds: {{ .timeout | default 3 }}
failureThreshold: {{ .failures | default 3 }}
{{- end -}}

{{- define "cacheroute.securityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
