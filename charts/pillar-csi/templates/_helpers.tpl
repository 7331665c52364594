{{/* The driver's domain: CSI driver name, labels, socket paths and CRD group. */}}
{{- define "pillar-csi.domain" -}}pillar-csi.pillarhq.io{{- end -}}

{{- define "pillar-csi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pillar-csi.fullname" -}}
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

{{- define "pillar-csi.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "pillar-csi.labels" -}}
app.kubernetes.io/name: {{ include "pillar-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "pillar-csi.selector" -}}
app.kubernetes.io/name: {{ include "pillar-csi.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image: repository:tag, the tag defaulting to appVersion. */}}
{{- define "pillar-csi.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion (toString .image.tag)) -}}
{{- end -}}

{{- define "pillar-csi.pullPolicy" -}}
{{- default .root.Values.imagePullPolicy .image.pullPolicy -}}
{{- end -}}

{{- define "pillar-csi.serviceAccountName" -}}
{{- $sa := index .root.Values.serviceAccount .component -}}
{{- default (printf "%s-%s" (include "pillar-csi.fullname" .root) .component) $sa.name -}}
{{- end -}}

{{- define "pillar-csi.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The TLS server name the controller expects of agent certificates. */}}
{{- define "pillar-csi.mtlsServerName" -}}
{{- if .Values.mtls.serverName -}}
{{- .Values.mtls.serverName -}}
{{- else if .Values.mtls.certManager.enabled -}}
{{- printf "%s-agent.%s.svc" (include "pillar-csi.fullname" .) (include "pillar-csi.namespace" .) -}}
{{- end -}}
{{- end -}}

{{- define "pillar-csi.agentMTLSSecret" -}}
{{- if .Values.mtls.certManager.enabled -}}{{ include "pillar-csi.fullname" . }}-agent-mtls{{- else -}}{{ .Values.mtls.secretRefs.agent.secretName }}{{- end -}}
{{- end -}}

{{- define "pillar-csi.controllerMTLSSecret" -}}
{{- if .Values.mtls.certManager.enabled -}}{{ include "pillar-csi.fullname" . }}-controller-mtls{{- else -}}{{ .Values.mtls.secretRefs.controller.secretName }}{{- end -}}
{{- end -}}

{{/*
Validation of the values the schema cannot express. Every refusal names the
offending key. Rules for agent.backends follow the agent's own checks.
*/}}
{{- define "pillar-csi.validate" -}}
{{- $v := .Values -}}
{{- if ne (int $v.agent.hostPort) 0 -}}
{{- if ne (int $v.agent.hostPort) (int $v.agent.grpcPort) -}}
{{- fail (printf "agent.hostPort (%v) must equal agent.grpcPort (%v), or be 0 to disable it" $v.agent.hostPort $v.agent.grpcPort) -}}
{{- end -}}
{{- end -}}
{{- $pools := dict -}}
{{- $groups := dict -}}
{{- range $i, $b := $v.agent.backends -}}
{{- if not (kindIs "map" $b) -}}
{{- fail (printf "agent.backends[%d]: must be an object with zfs or lvm" $i) -}}
{{- end -}}
{{- $hasZ := hasKey $b "zfs" -}}
{{- $hasL := hasKey $b "lvm" -}}
{{- if and $hasZ $hasL -}}
{{- fail (printf "agent.backends[%d]: sets both zfs and lvm; exactly one is allowed per entry" $i) -}}
{{- end -}}
{{- if not (or $hasZ $hasL) -}}
{{- fail (printf "agent.backends[%d]: sets neither zfs nor lvm; exactly one is required per entry" $i) -}}
{{- end -}}
{{- range $k, $_ := $b -}}
{{- if not (has $k (list "zfs" "lvm")) -}}
{{- fail (printf "agent.backends[%d].%s: unknown key (allowed: zfs, lvm)" $i $k) -}}
{{- end -}}
{{- end -}}
{{- if $hasZ -}}
{{- $z := $b.zfs -}}
{{- if not (kindIs "map" $z) -}}{{- fail (printf "agent.backends[%d].zfs: must be an object" $i) -}}{{- end -}}
{{- if hasKey $z "properties" -}}
{{- fail (printf "agent.backends[%d].zfs.properties: ZFS properties are per-volume settings of the store resource, storage-class resource overrides or the PVC backend document; they are refused here" $i) -}}
{{- end -}}
{{- range $k, $_ := $z -}}
{{- if not (has $k (list "pool" "volumeType" "parentDataset")) -}}
{{- fail (printf "agent.backends[%d].zfs.%s: unknown key (allowed: pool, volumeType, parentDataset)" $i $k) -}}
{{- end -}}
{{- end -}}
{{- if not $z.pool -}}{{- fail (printf "agent.backends[%d].zfs.pool: required" $i) -}}{{- end -}}
{{- if and (hasKey $z "volumeType") (ne (toString $z.volumeType) "zvol") -}}
{{- fail (printf "agent.backends[%d].zfs.volumeType: %q is not supported; the only volume type is zvol" $i (toString $z.volumeType)) -}}
{{- end -}}
{{- if hasKey $pools (toString $z.pool) -}}
{{- fail (printf "agent.backends[%d].zfs.pool: pool %q appears in more than one entry" $i (toString $z.pool)) -}}
{{- end -}}
{{- $_ := set $pools (toString $z.pool) $i -}}
{{- end -}}
{{- if $hasL -}}
{{- $l := $b.lvm -}}
{{- if not (kindIs "map" $l) -}}{{- fail (printf "agent.backends[%d].lvm: must be an object" $i) -}}{{- end -}}
{{- range $k, $_ := $l -}}
{{- if not (has $k (list "volumeGroup" "thinPool" "provisioningMode" "overprovisionRatio")) -}}
{{- fail (printf "agent.backends[%d].lvm.%s: unknown key (allowed: volumeGroup, thinPool, provisioningMode, overprovisionRatio)" $i $k) -}}
{{- end -}}
{{- end -}}
{{- if not $l.volumeGroup -}}{{- fail (printf "agent.backends[%d].lvm.volumeGroup: required" $i) -}}{{- end -}}
{{- if and (hasKey $l "provisioningMode") (not (has (toString $l.provisioningMode) (list "linear" "thin"))) -}}
{{- fail (printf "agent.backends[%d].lvm.provisioningMode: %q is not linear or thin" $i (toString $l.provisioningMode)) -}}
{{- end -}}
{{- if and (eq (toString $l.provisioningMode) "thin") (not $l.thinPool) -}}
{{- fail (printf "agent.backends[%d].lvm.provisioningMode: thin needs lvm.thinPool" $i) -}}
{{- end -}}
{{- if hasKey $l "overprovisionRatio" -}}
{{- if not (or (kindIs "float64" $l.overprovisionRatio) (kindIs "int64" $l.overprovisionRatio) (kindIs "int" $l.overprovisionRatio)) -}}
{{- fail (printf "agent.backends[%d].lvm.overprovisionRatio: must be a number of at least 1" $i) -}}
{{- end -}}
{{- if lt (float64 $l.overprovisionRatio) 1.0 -}}
{{- fail (printf "agent.backends[%d].lvm.overprovisionRatio: must be a number of at least 1" $i) -}}
{{- end -}}
{{- if not $l.thinPool -}}
{{- fail (printf "agent.backends[%d].lvm.overprovisionRatio: needs lvm.thinPool (only thin volumes are overprovisioned)" $i) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $groups (toString $l.volumeGroup) -}}
{{- fail (printf "agent.backends[%d].lvm.volumeGroup: volume group %q appears in more than one entry" $i (toString $l.volumeGroup)) -}}
{{- end -}}
{{- $_ := set $groups (toString $l.volumeGroup) $i -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := $pools -}}
{{- if hasKey $groups $name -}}
{{- fail (printf "agent.backends: %q is both a ZFS pool and an LVM volume group; volumes are routed by name alone, so the names must differ" $name) -}}
{{- end -}}
{{- end -}}
{{- if and $v.mtls.enabled (not $v.mtls.certManager.enabled) -}}
{{- if or (not $v.mtls.secretRefs.agent.secretName) (not $v.mtls.secretRefs.controller.secretName) -}}
{{- fail "mtls.secretRefs.agent.secretName and mtls.secretRefs.controller.secretName are required when mtls.enabled is true and mtls.certManager.enabled is false" -}}
{{- end -}}
{{- end -}}
{{- end -}}
