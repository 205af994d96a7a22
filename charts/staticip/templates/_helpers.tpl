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

{{/*
staticip.validate: values the chart cannot render sanely stop the install with a message.
The release must live in kube-system: the components run in kube-system and staticip-system,
whose service accounts the admission policies (manifests/admission) trust by name, and the
chart owns staticip-system (uninstall deletes it), so the release's own Secret cannot live
there; any other namespace would only hold the release record, away from what it manages.
*/}}
{{- define "staticip.validate" -}}
{{- if ne .Release.Namespace "kube-system" -}}
{{- fail (printf "\nstaticip: install the release into namespace kube-system (helm install %s <chart> -n kube-system), not %q: the components run in kube-system and staticip-system, whose service accounts the admission policies trust by name (manifests/admission), and the chart owns staticip-system (uninstall deletes it)" .Release.Name .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
staticip.podLabels: a pod template's labels: the component's app.kubernetes.io/name (the
selector's; podLabels cannot change it) and the component's podLabels. Call with
(list "staticip-agent" .Values.agent.podLabels).
*/}}
{{- define "staticip.podLabels" -}}
{{- $name := index . 0 -}}
{{- toYaml (merge (dict "app.kubernetes.io/name" $name) (index . 1 | default dict)) -}}
{{- end -}}

{{/*
staticip.logLevel: the klog flag of a component's logLevel, nothing for 0 (klog's default).
*/}}
{{- define "staticip.logLevel" -}}
{{- if gt (int .) 0 }}--v={{ . }}{{ end -}}
{{- end -}}

{{/*
staticip.updateStrategy: a DaemonSet's updateStrategy or a Deployment's strategy. Helm merges
a user's {type: OnDelete} (or Recreate) with the default's rollingUpdate, which the API
server rejects with any type but RollingUpdate: drop it then.
*/}}
{{- define "staticip.updateStrategy" -}}
{{- $s := deepCopy . -}}
{{- if ne ($s.type | default "RollingUpdate") "RollingUpdate" -}}
{{- $_ := unset $s "rollingUpdate" -}}
{{- end -}}
{{- toYaml $s -}}
{{- end -}}
