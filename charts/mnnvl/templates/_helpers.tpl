{{/* The controllers this chart knows, in the order objects are rendered. */}}
{{- define "mnnvl.controllers" -}}
lws ds guardian topology
{{- end }}

{{/* Controllers that serve admission webhooks, so need a serving certificate (kopf serves one whenever a
controller registers admission handlers; the guardian always does, even in Finalizer mode). */}}
{{- define "mnnvl.servesWebhooks" -}}
{{- has . (list "lws" "ds" "guardian") -}}
{{- end }}

{{- define "mnnvl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mnnvl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A controller's object name: <fullname>-<controller>; "mnnvl-lws" for a release named mnnvl. Call with
(dict "root" $ "controller" "lws"). The full name is cut to 46 characters so the longest Service name,
<component>-metrics or -webhook of the guardian or topology, stays a 63-character DNS label. */}}
{{- define "mnnvl.component" -}}
{{- printf "%s-%s" (include "mnnvl.fullname" .root | trunc 46 | trimSuffix "-") .controller }}
{{- end }}

{{/* The controller's identity (console script, Lease, field manager): fixed, whatever the release. */}}
{{- define "mnnvl.identity" -}}
{{- printf "mnnvl-%s" . }}
{{- end }}

{{/* The labels the chart itself puts on every object (commonLabels may not reuse their keys: validation.yaml). */}}
{{- define "mnnvl.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "mnnvl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mnnvl
{{- end }}

{{/* Every object's labels: the chart's and the user's commonLabels. */}}
{{- define "mnnvl.labels" -}}
{{ include "mnnvl.chartLabels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one controller's objects. Call with (dict "root" $ "controller" "lws"). */}}
{{- define "mnnvl.componentLabels" -}}
{{ include "mnnvl.labels" .root }}
app.kubernetes.io/component: {{ .controller }}
{{- end }}

{{- define "mnnvl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mnnvl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .controller }}
{{- end }}

{{/* The labels of a component's pods: the selector's, then commonLabels with its block's podLabels (if it has a
block) over them, in one map so a key in both is written once. Never in a selector: a label changed later must not
orphan the pods. */}}
{{- define "mnnvl.podLabels" -}}
{{ include "mnnvl.selectorLabels" . }}
{{- $podLabels := (index .root.Values .controller | default dict).podLabels | default dict }}
{{- with mustMergeOverwrite (deepCopy (.root.Values.commonLabels | default dict)) (deepCopy $podLabels) }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The controller's feature gates: the global map, its own map merged over it. */}}
{{- define "mnnvl.featureGates" -}}
{{- $values := index .root.Values .controller }}
{{- toJson (mustMergeOverwrite (deepCopy .root.Values.featureGates) (deepCopy $values.featureGates)) }}
{{- end }}

{{/* "true" when the controller gets the ComputeDomain rules: the global gate, its own merged gate or
computeDomainManagement.enabled is on. Only the scope controllers and the guardian use ComputeDomains. */}}
{{- define "mnnvl.computeDomainRbac" -}}
{{- $gates := include "mnnvl.featureGates" . | fromJson }}
{{- $on := or .root.Values.featureGates.AutoComputeDomain (index $gates "AutoComputeDomain") .root.Values.computeDomainManagement.enabled }}
{{- and (has .controller (list "lws" "ds" "guardian")) $on }}
{{- end }}

{{- define "mnnvl.certDir" -}}
/var/run/mnnvl/webhook-certs
{{- end }}

{{/* The environment the chart gives a controller's container; the block's extraEnv follows and may not reuse a
name. Call with (dict "root" $ "controller" "lws"), as the volume helpers below. */}}
{{- define "mnnvl.env" -}}
- name: MNNVL_CONFIG_FILE
  value: /etc/mnnvl/configuration.yaml
- name: MNNVL_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: MNNVL_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: MNNVL_LOG_LEVEL
  value: {{ default .root.Values.logLevel (index .root.Values .controller).logLevel | quote }}
{{- end }}

{{/* The chart's volumes of a controller's pod, and where its container mounts them; the block's extraVolumes and
extraVolumeMounts follow and may not reuse a volume name or a mount path. */}}
{{- define "mnnvl.volumes" -}}
- name: configuration
  configMap:
    name: {{ include "mnnvl.component" . }}-configuration
# A writable /tmp on a read-only root filesystem (Python's tempfile).
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if or (eq (include "mnnvl.servesWebhooks" .controller) "true") (eq (include "mnnvl.metricsCertMounted" .) "true") }}
- name: webhook-certs
  secret:
    secretName: {{ include "mnnvl.certSecretName" .root }}
{{- end }}
{{- end }}

{{- define "mnnvl.volumeMounts" -}}
- name: configuration
  mountPath: /etc/mnnvl
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if or (eq (include "mnnvl.servesWebhooks" .controller) "true") (eq (include "mnnvl.metricsCertMounted" .) "true") }}
- name: webhook-certs
  mountPath: {{ include "mnnvl.certDir" .root }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The controller's Configuration file (config.lws.x-k8s.io/v1), as mnnvl_runtime.settings reads it. */}}
{{- define "mnnvl.configuration" -}}
{{- $values := index .root.Values .controller }}
{{- $base := dict
  "apiVersion" "config.lws.x-k8s.io/v1"
  "kind" "Configuration"
  "featureGates" (include "mnnvl.featureGates" . | fromJson)
  "metricsBindAddress" ":8080"
  "healthBindAddress" ":8081"
  "leaderElection" (dict "leaderElect" true)
}}
{{- if eq (include "mnnvl.servesWebhooks" .controller) "true" }}
{{- $_ := set $base "webhook" (dict "port" 9443 "certDir" (include "mnnvl.certDir" .root)) }}
{{- end }}
{{- if eq .controller "guardian" }}
{{- $_ := set $base "computeDomain" (dict "deletionProtection" $values.deletionProtection) }}
{{- end }}
{{- if eq .controller "topology" }}
{{- /* Recorded on the Topologies and bindings it creates: another release never touches them. */}}
{{- $_ := set $base "installation" (printf "%s/%s" .root.Release.Namespace .root.Release.Name) }}
{{- end }}
{{- if .root.Values.metrics.secure }}
{{- $_ := set $base "metrics" (dict "secure" true) }}
{{- if eq (include "mnnvl.metricsCertMounted" .) "true" }}
{{- $_ := set $base.metrics "certDir" (include "mnnvl.certDir" .root) }}
{{- end }}
{{- end }}
{{- toYaml (mustMergeOverwrite $base (deepCopy $values.configuration)) }}
{{- end }}

{{/* "true" when the controller's metrics are served securely: its Configuration says so (the global metrics.secure,
or its own configuration.metrics.secure). Call with (dict "root" $ "controller" "lws"). */}}
{{- define "mnnvl.metricsSecure" -}}
{{- dig "metrics" "secure" false (include "mnnvl.configuration" . | fromYaml) }}
{{- end }}

{{/* "true" when a controller that serves no webhook (mnnvl-topology) mounts the webhook certificate's Secret for its
secure metrics, so one ServiceMonitor TLS setting fits every controller: metrics.secure is on and a webhook-serving
controller of the release has the Secret. Otherwise it serves a self-signed certificate it makes at start-up. */}}
{{- define "mnnvl.metricsCertMounted" -}}
{{- and .root.Values.metrics.secure (ne (include "mnnvl.servesWebhooks" .controller) "true") (eq (include "mnnvl.anyWebhookServer" .root) "true") }}
{{- end }}

{{- define "mnnvl.certSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "mnnvl.fullname" .)) .Values.certs.secretName }}
{{- end }}

{{/* Whether any enabled controller serves webhooks. */}}
{{- define "mnnvl.anyWebhookServer" -}}
{{- $any := false }}
{{- range $controller := splitList " " (include "mnnvl.controllers" .) }}
{{- if and (index $.Values $controller).enabled (eq (include "mnnvl.servesWebhooks" $controller) "true") }}
{{- $any = true }}
{{- end }}
{{- end }}
{{- $any }}
{{- end }}

{{/* The webhook Service DNS names of the enabled webhook-serving controllers, for the serving certificate. */}}
{{- define "mnnvl.webhookDnsNames" -}}
{{- $names := list }}
{{- range $controller := splitList " " (include "mnnvl.controllers" .) }}
{{- if and (index $.Values $controller).enabled (eq (include "mnnvl.servesWebhooks" $controller) "true") }}
{{- $service := printf "%s-webhook" (include "mnnvl.component" (dict "root" $ "controller" $controller)) }}
{{- $names = append $names (printf "%s.%s.svc" $service $.Release.Namespace) }}
{{- $names = append $names (printf "%s.%s.svc.cluster.local" $service $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/* The selfSigned mode's CA and certificate: the existing Secret's when it was issued for the same names (so
an upgrade keeps serving what the API server trusts), else freshly generated. Rendered once per release and reused by the Secret
and every webhook configuration (helm caches nothing, so it is memoized in .Values under a private key). */}}
{{- define "mnnvl.selfSignedPair" -}}
{{- if not (hasKey .Values "_selfSigned") }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "mnnvl.certSecretName" .) }}
{{- $pair := dict }}
{{- $names := include "mnnvl.webhookDnsNames" . | fromJsonArray }}
{{- $issuedFor := dig "metadata" "annotations" "mnnvl.dev/dns-names" "" ($secret | default dict) }}
{{- if and $secret (index ($secret.data | default dict) "ca.crt") (eq $issuedFor (join "," $names)) }}
{{- $pair = dict "ca" (index $secret.data "ca.crt") "crt" (index $secret.data "tls.crt") "key" (index $secret.data "tls.key") }}
{{- else }}
{{- $days := int .Values.certs.selfSigned.validityDays }}
{{- $ca := genCA (printf "%s-webhook-ca" (include "mnnvl.fullname" .)) $days }}
{{- $cert := genSignedCert (first $names | default "mnnvl") nil $names $days $ca }}
{{- $pair = dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "_selfSigned" $pair }}
{{- end }}
{{- toJson .Values._selfSigned }}
{{- end }}

{{/* The CA bundle (base64) webhook configurations carry; empty in certManager mode (cert-manager injects it). */}}
{{- define "mnnvl.caBundle" -}}
{{- if eq .Values.certs.mode "secret" }}
{{- .Values.certs.caBundle }}
{{- else if eq .Values.certs.mode "selfSigned" }}
{{- (include "mnnvl.selfSignedPair" . | fromJson).ca }}
{{- end }}
{{- end }}

{{/* The controller's image: pinned by digest when one is set (the tag is then ignored), else by tag. */}}
{{- define "mnnvl.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* Values renamed or removed, which keep working for one release (docs/upgrades.md, "Chart values: renames and
removals"). One entry a line, the old and new dotted paths and the chart release that drops the old one, e.g.
- {old: guardian.replicaCount, new: guardian.replicas, removedIn: "0.3.0"}
or, for a value removed (still accepted, with no effect), no new path:
- {old: lws.someSwitch, removedIn: "0.3.0"}
(quote the release: YAML reads 0.3 as a number). Templates read a renamed value through "mnnvl.value", and
NOTES.txt warns for each old key that is set. */}}
{{- define "mnnvl.deprecatedValues" }}
{{- end }}

{{/* The value at a dotted path of .Values, as JSON: {"value": ...} when every key on the path is present (so
false, 0 and "" count as set), {} otherwise. Call with (dict "root" $ "path" "guardian.replicas"). */}}
{{- define "mnnvl.valueAt" -}}
{{- $node := .root.Values }}
{{- $found := true }}
{{- range $key := splitList "." .path }}
{{- if and $found (kindIs "map" $node) (hasKey $node $key) }}
{{- $node = index $node $key }}
{{- else }}
{{- $found = false }}
{{- end }}
{{- end }}
{{- toJson (ternary (dict "value" $node) (dict) $found) }}
{{- end }}

{{/* A value that may have been renamed: the value at .path, unless a deprecated key renamed to .path is set, which
then wins. values.yaml gives the new key a default, so it always looks set; the old key has none, so it is set only
by the user, and is what they meant. Call with (dict "root" $ "path" "guardian.replicas") and read
(include "mnnvl.value" ... | fromJson).value; it is nil when neither is set. The value comes back through JSON, so a
number is a float64, as values files give it. */}}
{{- define "mnnvl.value" -}}
{{- $found := include "mnnvl.valueAt" . | fromJson }}
{{- range include "mnnvl.deprecatedValues" . | fromYamlArray }}
{{- if eq .new $.path }}
{{- $old := include "mnnvl.valueAt" (dict "root" $.root "path" .old) | fromJson }}
{{- if hasKey $old "value" }}
{{- $found = $old }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $found }}
{{- end }}

{{/*
The pod's and the container's security contexts of a controller block (also the uninstall check's, which runs as
a controller runs). A map the user sets replaces the chart's whole: in values.yaml Helm would merge it into ours.
*/}}
{{- define "mnnvl.podSecurityContext" -}}
{{- if .podSecurityContext }}
{{- toYaml .podSecurityContext }}
{{- else -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end }}

{{- define "mnnvl.containerSecurityContext" -}}
{{- if .securityContext }}
{{- toYaml .securityContext }}
{{- else -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end }}
