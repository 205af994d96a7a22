{{/*
staticip.labels: the labels Helm's conventions add to every object's metadata (never to
selectors or pod templates: adopting a kustomize install must not roll any pod).
charts/chart_test.go ignores exactly these when it compares the chart with manifests/.
*/}}
{{- define "staticip.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
staticip.image: the component's image.ref when set, else <registry>/<repository>/<name>:<tag>;
call with (list $ .Values.agent.image).
*/}}
{{- define "staticip.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- if $img.ref -}}
{{ $img.ref }}
{{- else -}}
{{- $tag := $img.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- with $root.Values.image.registry -}}{{ . }}/{{- end -}}
{{- with $root.Values.image.repository -}}{{ . }}/{{- end -}}
{{- $img.name -}}:{{- $tag -}}
{{- end -}}
{{- end -}}

{{/* staticip.pullSecrets: the pod spec's imagePullSecrets, when any. */}}
{{- define "staticip.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* staticip.metricsLabels: labels of the monitoring objects. */}}
{{- define "staticip.metricsLabels" -}}
{{ include "staticip.labels" . }}
{{- with .Values.metrics.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
staticip.seconds: a Prometheus duration in whole units (15m, 1h30m, 2d: the schema allows only
these) as seconds, to compare with a timestamp metric.
*/}}
{{- define "staticip.seconds" -}}
{{- $units := dict "s" 1 "m" 60 "h" 3600 "d" 86400 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+[smhd]" (toString .) -1 -}}
{{- $unit := get $units (regexFind "[smhd]$" .) -}}
{{- $total = add $total (mul (regexFind "^[0-9]+" . | int) $unit) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
