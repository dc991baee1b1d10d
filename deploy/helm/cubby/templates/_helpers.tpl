{{- define "cubby.name" -}}cubby{{- end -}}

{{- define "cubby.fullname" -}}
{{- if contains "cubby" .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-cubby" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{/* Labels of every object. app.kubernetes.io/name=cubby also admits the
replicas into sandbox Pods (the sandboxes' NetworkPolicy selects it). */}}
{{- define "cubby.labels" -}}
app.kubernetes.io/name: {{ include "cubby.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cubby.selector" -}}
app.kubernetes.io/name: {{ include "cubby.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
