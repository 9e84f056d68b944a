{{/*
Base name of the release's objects: the release name, or fullnameOverride.
Objects are "<fullname>-operator"; with the default release name "ari" that is
"ari-operator", the same names as deploy/operator.yaml.
*/}}
{{- define "ari.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- end -}}

{{- define "ari.operatorName" -}}
{{- printf "%s-operator" (include "ari.fullname" .) -}}
{{- end -}}

{{- define "ari.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ari.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: stable for the life of the release (a Deployment selector is immutable). */}}
{{- define "ari.selectorLabels" -}}
app.kubernetes.io/name: ari-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ari.labels" -}}
{{ include "ari.selectorLabels" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: ari
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}; the tag defaults to the appVersion. */}}
{{- define "ari.image" -}}
{{- $img := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The A2A gateway: "<fullname>-gateway" (Deployment, Service, ServiceAccount, RBAC). */}}
{{- define "ari.gatewayName" -}}
{{- printf "%s-gateway" (include "ari.fullname" .) -}}
{{- end -}}

{{- define "ari.gatewaySelectorLabels" -}}
app.kubernetes.io/name: ari-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ari.gatewayLabels" -}}
{{ include "ari.gatewaySelectorLabels" . }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: ari
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
