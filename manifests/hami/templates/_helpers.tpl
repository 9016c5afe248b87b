{{/* Labels of every object; selectors use only name and component (they are immutable). */}}
{{- define "hami.labels" -}}
app.kubernetes.io/name: mthreads-webhook
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: mthreads-webhook
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{- define "hami.selector" -}}
app.kubernetes.io/name: mthreads-webhook
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "hami.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The ServiceAccount of the pods that bind with the allocation annotations: the allocator's
(mode allocator), or kube-scheduler's pod, whose extender container binds (mode extender). */}}
{{- define "hami.binderAccount" -}}
{{ ternary "mthreads-scheduler" "mthreads-allocator" (eq .Values.mode "extender") }}
{{- end }}

{{/* The identity allowed to write allocations: allocator.user, or the binder's ServiceAccount. */}}
{{- define "hami.allocatorUser" -}}
{{ .Values.allocator.user | default (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "hami.binderAccount" .)) }}
{{- end }}

{{/* "true" where namespaces are exempt by name: from 1.21 the API server labels every namespace
kubernetes.io/metadata.name with its name, and nobody can change it. Empty before. */}}
{{- define "hami.exemptByName" -}}
{{- if semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version }}true{{ end }}
{{- end }}

{{/* Which namespaces the webhook entries see. From 1.21 the API server labels every namespace
kubernetes.io/metadata.name with its name, and nobody can change it: the exempt namespaces
are left out by name (webhook.exemptNamespaces and the release's). Before 1.21 there is no such
label, so the opt-out is the label hami.io/webhook=ignore, which whoever may label a namespace
can set. webhook.namespaceSelector narrows either further. */}}
{{- define "hami.namespaceSelector" -}}
{{- $w := .Values.webhook -}}
{{- $expressions := list -}}
{{- if include "hami.exemptByName" . }}
{{- $exempt := uniq (append $w.exemptNamespaces .Release.Namespace) -}}
{{- $expressions = append $expressions (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $exempt) -}}
{{- else }}
{{- $expressions = append $expressions (dict "key" "hami.io/webhook" "operator" "NotIn" "values" (list "ignore")) -}}
{{- end }}
{{- $selector := dict "matchExpressions" (concat $expressions ($w.namespaceSelector.matchExpressions | default list)) -}}
{{- with $w.namespaceSelector.matchLabels }}
{{- $_ := set $selector "matchLabels" . -}}
{{- end }}
{{- toYaml $selector }}
{{- end }}

{{/* The config file the pods read: .Values at the same paths, nothing else (SPEC section 2). */}}
{{- define "hami.config" -}}
{{- $mt := .Values.devices.mthreads -}}
{{- $al := .Values.allocator -}}
{{- $config := dict
  "schedulerName" .Values.schedulerName
  "forceOverwriteDefaultScheduler" .Values.forceOverwriteDefaultScheduler
  "devices" (dict "mthreads" (dict
    "enabled" $mt.enabled
    "memoryPerCard" $mt.memoryPerCard
    "resourceCountName" $mt.resourceCountName
    "resourceMemoryName" $mt.resourceMemoryName
    "resourceCoreName" $mt.resourceCoreName
    "maxInstancesPerCard" $mt.maxInstancesPerCard))
  "allocator" (dict
    "user" (include "hami.allocatorUser" .)
    "extraWriters" $al.extraWriters
    "nodePolicy" $al.nodePolicy
    "gpuPolicy" $al.gpuPolicy) -}}
{{- toYaml $config }}
{{- end }}

{{/* Pod template annotations: a config change rolls the pods (no manual restart). */}}
{{- define "hami.configChecksum" -}}
checksum/config: {{ include "hami.config" . | sha256sum }}
{{- end }}

{{/* One pod anti-affinity term per component: replicas prefer different nodes. */}}
{{- define "hami.spreadReplicas" -}}
podAntiAffinity:
  # Preferred, not required: a one-node cluster still runs every replica.
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "hami.selector" . | nindent 12 }}
{{- end }}

{{/* Volumes every pod of the chart has: the config and an in-memory /tmp. */}}
{{- define "hami.configVolumes" -}}
- name: config
  configMap:
    name: mthreads-webhook-config
# The root filesystem is read-only; gunicorn's heartbeat files and any scratch go here.
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- end }}

{{- define "hami.configMounts" -}}
# Whole directories, never subPath: ConfigMap and Secret updates reach the files.
- name: config
  mountPath: /etc/mthreads-webhook/config
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end }}

{{- define "hami.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{- define "hami.placement" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* kube-scheduler's configuration in extender mode; its apiVersion follows the cluster. */}}
{{- define "hami.schedulerConfig" -}}
{{- $kv := .Capabilities.KubeVersion.Version -}}
{{- $mt := .Values.devices.mthreads -}}
{{- if semverCompare "<1.22-0" $kv }}
apiVersion: kubescheduler.config.k8s.io/v1beta1
{{- else if semverCompare "<1.25-0" $kv }}
apiVersion: kubescheduler.config.k8s.io/v1beta2
{{- else }}
apiVersion: kubescheduler.config.k8s.io/v1
{{- end }}
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: mthreads-scheduler
# 0: kube-scheduler's adaptive node sample; 100: every feasible node (values.yaml).
percentageOfNodesToScore: {{ .Values.scheduler.kubeScheduler.percentageOfNodesToScore }}
profiles:
  - schedulerName: {{ .Values.schedulerName }}
extenders:
  # The extender is a container of this kube-scheduler's own pod, listening on loopback only:
  # nothing outside the pod can reach its verbs, and no Service exists for them.
  - urlPrefix: http://127.0.0.1:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    # Preemption that knows the cards: the extender names the card holders to evict.
    preemptVerb: preempt
    bindVerb: bind
    # Extender scores (0-10) are multiplied by 10 and by this weight: 10 lets the card-aware
    # node policy outweigh the cpu/memory spreading of the default score plugins.
    weight: 10
    enableHTTPS: false
    httpTimeout: 10s
    nodeCacheCapable: true
    # Only pods asking for these are sent to the extender; kube-scheduler does not count them
    # itself (the node's capacity is per card, which only the extender understands).
    managedResources:
      {{- range list $mt.resourceCountName $mt.resourceMemoryName $mt.resourceCoreName }}
      - name: {{ . }}
        ignoredByScheduler: true
      {{- end }}
{{- end }}

{{/* A webhook entry's clientConfig: the chart's Service, and the caBundle when known. */}}
{{- define "hami.webhookClient" -}}
service:
  name: mthreads-webhook
  namespace: {{ .ns }}
  path: {{ .path }}
  port: 443
{{- with .caBundle }}
caBundle: {{ . }}
{{- end }}
{{- end }}
