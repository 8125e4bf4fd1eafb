{{/*
The labels every podnet object carries: the plain manifests' own, so that
the chart renders them object for object (no chart or release labels:
Helm adds app.kubernetes.io/managed-by and its ownership annotations when
it installs).
*/}}
{{- define "podnet.labels" -}}
app.kubernetes.io/name: podnet
{{- end }}

{{/* The image of both containers: repository:tag[@digest]. */}}
{{- define "podnet.image" -}}
{{- $img := printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- $img = printf "%s@%s" $img .Values.image.digest -}}
{{- end -}}
{{- $img -}}
{{- end }}

{{/* Whether the agent talks to the Kubernetes API. */}}
{{- define "podnet.usesAPI" -}}
{{- if ne .Values.datastore "etcd" }}true{{ end -}}
{{- end }}

{{/*
The IPAM pools of blocks and etcd, as the conflist lists them: the first
IPv4 pool is "default", the first IPv6 one "default6" (the names the
plain manifests and their READMEs use), later ones of a family get -2, -3.
*/}}
{{- define "podnet.ipamPools" -}}
{{- $pools := list -}}
{{- $n4 := 0 -}}
{{- $n6 := 0 -}}
{{- range .Values.pools -}}
{{- $name := "" -}}
{{- if contains ":" . -}}
{{- $n6 = add1 $n6 -}}
{{- $name = ternary "default6" (printf "default6-%d" $n6) (eq $n6 1) -}}
{{- else -}}
{{- $n4 = add1 $n4 -}}
{{- $name = ternary "default" (printf "default-%d" $n4) (eq $n4 1) -}}
{{- end -}}
{{- $pools = append $pools (dict "name" $name "cidr" .) -}}
{{- end -}}
{{- toJson $pools -}}
{{- end }}

{{/*
The network config the agent installs, as JSON with sorted keys and two
spaces of indent, as the plain ConfigMaps hold it. What differs per node
(ipam.node; in the kubernetes datastore also the pools, the store and
masqExclude) the agent adds.
*/}}
{{- define "podnet.conflist" -}}
{{- $ipam := dict "type" "podnet-ipam" -}}
{{- $plugin := dict "type" "podnet" "mode" "routed" "ipMasq" true "capabilities" (dict "portMappings" true) -}}
{{- if ne .Values.datastore "kubernetes" -}}
{{- $_ := set $ipam "pools" (include "podnet.ipamPools" . | fromJsonArray) -}}
{{- $_ := set $plugin "masqExclude" .Values.pools -}}
{{- if eq .Values.datastore "blocks" -}}
{{- $_ := set $ipam "store" "agent:/run/podnet/ipam.sock" -}}
{{- else -}}
{{- $_ := set $ipam "store" (printf "etcd://%s" (join "," .Values.etcd.endpoints)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $plugin "ipam" $ipam -}}
{{- if .Values.mtu -}}
{{- $_ := set $plugin "mtu" (int .Values.mtu) -}}
{{- end -}}
{{- $conf := dict "cniVersion" "1.0.0" "cniVersions" (list "1.0.0" "1.1.0") "name" "podnet" "plugins" (list $plugin) -}}
{{- toPrettyJson $conf -}}
{{- end }}

{{/*
A CRD from files/, with helm.sh/resource-policy: keep: uninstalling the
release or switching datastore must not delete the CRD, which would
delete every object of its kind (every pool and block, every
ClusterNetworkPolicy).
*/}}
{{- define "podnet.keptCRD" -}}
{{- $crd := .root.Files.Get .file | fromYaml -}}
{{- if or (not $crd) (hasKey $crd "Error") -}}
{{- fail (printf "chart file %s: not a CRD the chart can read: %v" .file ($crd | default dict).Error) -}}
{{- end -}}
{{- $ann := merge (dict "helm.sh/resource-policy" "keep") ($crd.metadata.annotations | default dict) -}}
{{- $_ := set $crd.metadata "annotations" $ann -}}
{{- toYaml $crd -}}
{{- end }}
