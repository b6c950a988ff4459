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
