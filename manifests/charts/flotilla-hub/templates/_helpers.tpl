{{- define "flotilla-hub.labels" -}}
app.kubernetes.io/name: flotilla-hub
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "flotilla-hub.selector" -}}
app.kubernetes.io/name: flotilla-hub
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /* The name of the release's own objects: flotilla-hub, with the shard's name for a shard. */ -}}
{{- define "flotilla-hub.name" -}}
{{- if .Values.shard }}{{ printf "flotilla-hub-%s" .Values.shard | trunc 63 }}{{ else }}flotilla-hub{{ end }}
{{- end }}

{{- /* The metrics port: 8443 served over HTTPS to callers the API server authorizes, 8081 plain. */ -}}
{{- define "flotilla-hub.metricsPort" -}}
{{- if .Values.metrics.secure }}8443{{ else }}8081{{ end }}
{{- end }}
