{{- define "respgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "respgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "respgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "respgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "respgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "respgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "respgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "respgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "respgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* respgate.check fails the render on values that cannot work. */}}
{{- define "respgate.check" -}}
{{- if .Values.sqlite.enabled -}}
{{- if or (ne (int .Values.replicaCount) 1) .Values.autoscaling.enabled -}}
{{- fail "sqlite.enabled needs replicaCount: 1 and autoscaling.enabled: false (SQLite is one file on one volume)" -}}
{{- end -}}
{{- else if not .Values.secrets.databaseURL.name -}}
{{- fail "secrets.databaseURL.name must name a Secret holding the Postgres URL (or set sqlite.enabled)" -}}
{{- end -}}
{{- range $k, $v := .Values.settings -}}
{{- if has $k (list "database-url" "api-keys" "upstream-api-key" "seal-keys" "seal-keys-file" "shutdown-timeout" "commit-timeout" "listen") -}}
{{- fail (printf "settings.%s is set by the chart itself (secrets.*, drain.*)" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* respgate.secretEnv is the env entries read from the Secrets the values name. */}}
{{- define "respgate.databaseEnv" -}}
{{- if not .Values.sqlite.enabled }}
- name: RESPGATE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.databaseURL.name }}
      key: {{ .Values.secrets.databaseURL.key }}
{{- end }}
{{- end -}}

{{- define "respgate.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "respgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
