{{/* The chart name, or nameOverride. */}}
{{- define "evictiond.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The full name: fullnameOverride, else the release name when it contains the chart name
(release "evictiond" gives "evictiond", as deploy/ has it), else release-chart. Pools append
"-<pool>", the ConfigMaps "-config": 44 characters leave room for both. */}}
{{- define "evictiond.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. No managed-by or helm.sh/chart label: deploy/ is this chart
rendered for kustomize users, whose objects Helm does not manage. */}}
{{- define "evictiond.labels" -}}
{{ include "evictiond.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: evictiond
{{- end -}}

{{/* Labels every pod of the release carries (the Service and PodMonitor select on them). */}}
{{- define "evictiond.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evictiond.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The agents' ServiceAccount: serviceAccount.name, else the full name. */}}
{{- define "evictiond.serviceAccountName" -}}
{{- default (include "evictiond.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "evictiond.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The pools to render, as a YAML list: the default pool (name "default", resources
named after the release) unless disabled, then every nodePools entry, checked. Each item
carries its object name, its ConfigMap's name and its configuration. */}}
{{- define "evictiond.pools" -}}
{{- $full := include "evictiond.fullname" . -}}
{{- $base := include "evictiond.baseConfig" . | fromYaml -}}
{{- $pools := list -}}
{{- $seen := dict -}}
{{- $excluded := list -}}
{{- range $i, $p := .Values.nodePools -}}
{{- if not (kindIs "map" $p) -}}
{{- fail (printf "nodePools[%d]: %v is not a map: each pool is {name, nodeSelector, config, ...}" $i $p) -}}
{{- end -}}
{{- $name := toString (default "" $p.name) -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "nodePools[%d].name: %q is not a DNS label (lower case letters, digits and '-', starting and ending with a letter or digit)" $i $name) -}}
{{- end -}}
{{- if or (eq $name "default") (hasKey $seen $name) -}}
{{- fail (printf "nodePools[%d].name: %q is used twice or is the default pool's name; pool names must be unique and not \"default\"" $i $name) -}}
{{- end -}}
{{- $_ := set $seen $name true -}}
{{- $sel := default dict $p.nodeSelector -}}
{{- if ne (len $sel) 1 -}}
{{- fail (printf "nodePools[%d].nodeSelector: %v has %d labels; a pool is selected by exactly one label, which the default pool excludes with a NotIn node affinity" $i $sel (len $sel)) -}}
{{- end -}}
{{- range $k, $v := $sel -}}
{{- $excluded = append $excluded (dict "key" $k "operator" "NotIn" "values" (list (toString $v))) -}}
{{- end -}}
{{- $config := deepCopy $base -}}
{{- if and (hasKey $p "mergeConfig") (not $p.mergeConfig) -}}
{{- $config = default dict $p.config -}}
{{- else if $p.config -}}
{{- $config = mustMergeOverwrite $config (deepCopy $p.config) -}}
{{- end -}}
{{- $pool := dict "pool" $name "name" (printf "%s-%s" $full $name) "configMap" (printf "%s-%s-config" $full $name) "config" $config "nodeSelector" (merge (deepCopy $sel) (deepCopy $.Values.nodeSelector)) -}}
{{- range $key := list "resources" "tolerations" "affinity" "priorityClassName" "extraArgs" "extraEnv" -}}
{{- if hasKey $p $key -}}
{{- $_ := set $pool $key (index $p $key) -}}
{{- end -}}
{{- end -}}
{{- $pools = append $pools $pool -}}
{{- end -}}
{{- if .Values.defaultPool.enabled -}}
{{- $default := dict "pool" "default" "name" $full "configMap" (printf "%s-config" $full) "config" .Values.config "configYAML" .Values.configYAML "nodeSelector" .Values.nodeSelector "excluded" $excluded -}}
{{- $pools = prepend $pools $default -}}
{{- end -}}
{{- if not $pools -}}
{{- fail "defaultPool.enabled: false and nodePools: []: the chart would run evictiond on no node; enable the default pool or add a pool" -}}
{{- end -}}
{{- toYaml $pools -}}
{{- end -}}

{{/* The default pool's EvictionConfiguration as a YAML map: configYAML when set, else config. */}}
{{- define "evictiond.baseConfig" -}}
{{- if .Values.configYAML -}}
{{- $parsed := fromYaml .Values.configYAML -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "configYAML: not a YAML map: %s" $parsed.Error) -}}
{{- end -}}
{{- toYaml $parsed -}}
{{- else -}}
{{- toYaml .Values.config -}}
{{- end -}}
{{- end -}}

{{/* The default pool's affinity: the user's, with a NotIn expression for every other
pool's label added to each required node selector term (terms are ORed, expressions ANDed). */}}
{{- define "evictiond.poolAffinity" -}}
{{- $pool := index . 0 -}}
{{- $root := index . 1 -}}
{{- $affinity := deepCopy (default $root.Values.affinity $pool.affinity) -}}
{{- if $pool.excluded -}}
{{- $na := default dict $affinity.nodeAffinity -}}
{{- $req := default dict $na.requiredDuringSchedulingIgnoredDuringExecution -}}
{{- $terms := default (list (dict)) $req.nodeSelectorTerms -}}
{{- $newTerms := list -}}
{{- range $terms -}}
{{- $exprs := concat (default list .matchExpressions) $pool.excluded -}}
{{- $newTerms = append $newTerms (set (deepCopy .) "matchExpressions" $exprs) -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $newTerms -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ := set $affinity "nodeAffinity" $na -}}
{{- end -}}
{{- if $affinity -}}
{{- toYaml $affinity -}}
{{- end -}}
{{- end -}}

{{/*
The httpGet of a probe: the path on the health port, at health.address when it names
one (the kubelet otherwise connects to the pod IP, the node's address).
*/}}
{{- define "evictiond.healthGet" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- if $root.Values.health.address -}}
{host: {{ $root.Values.health.address | quote }}, path: {{ $path }}, port: health}
{{- else -}}
{path: {{ $path }}, port: health}
{{- end -}}
{{- end }}
