{{/*
Labels of every object: the two the kustomize base sets (deploy/base/kustomization.yaml) and
Helm's release labels (the only labels tests/unit/deploy/test_helm.py removes before comparing).
*/}}
{{- define "segment-webhook.labels" -}}
app.kubernetes.io/name: segment-webhook
app.kubernetes.io/part-of: segment-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The namespace of every namespaced object. */}}
{{- define "segment-webhook.namespace" -}}
{{ .Values.namespace.name }}
{{- end }}

{{/* The image of both containers: repository@digest, else repository:tag (default appVersion). */}}
{{- define "segment-webhook.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The certificate mode, checked: cert-manager or self-signed. */}}
{{- define "segment-webhook.certificateMode" -}}
{{- $mode := .Values.certificates.mode -}}
{{- if not (has $mode (list "cert-manager" "self-signed")) -}}
{{- fail (printf "certificates.mode: %q is not a certificate mode (rule: cert-manager or self-signed); fix: --set certificates.mode=cert-manager, or self-signed with the files of `segment-webhook certs`" $mode) -}}
{{- end -}}
{{ $mode }}
{{- end }}

{{/* A self-signed value, required: its name and the command that makes the file. */}}
{{- define "segment-webhook.selfSignedFile" -}}
{{- $value := index .root.Values.certificates.selfSigned .key -}}
{{- if not $value -}}
{{- fail (printf "certificates.selfSigned.%s is empty (rule: certificates.mode self-signed needs the files of `segment-webhook certs`); fix: segment-webhook certs --out certs, then --set-file certificates.selfSigned.%s=certs/%s" .key .key .file) -}}
{{- end -}}
{{ $value }}
{{- end }}

{{/* clientConfig of a webhook calling path: the Service (with the CA for self-signed), or webhook.url. */}}
{{- define "segment-webhook.clientConfig" -}}
{{- if .root.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path }}
{{- else -}}
service:
  name: segment-webhook
  namespace: {{ include "segment-webhook.namespace" .root }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- if eq (include "segment-webhook.certificateMode" .root) "self-signed" }}
caBundle: {{ include "segment-webhook.selfSignedFile" (dict "root" .root "key" "caBundle" "file" "ca-bundle.crt") | b64enc }}
{{- end }}
{{- end }}

{{/* The namespaces no webhook sees: kube-system and the webhook's own. */}}
{{- define "segment-webhook.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: ["kube-system", {{ include "segment-webhook.namespace" . | quote }}]
{{- end }}

{{/*
matchConditions of both workload webhooks (deploy/base/webhooks.yaml explains them): never an
object being deleted; the native kind; any other kind when an annotation key it reads could be a
placement key or a misspelling of one.
*/}}
{{- define "segment-webhook.workloadMatchConditions" -}}
- name: not-being-deleted
  expression: "!has(object.metadata.deletionTimestamp)"
- name: may-carry-a-placement-key
  expression: |-
    object.kind == 'DistributedWorkload' ||
    (request.operation == 'UPDATE' ? [object, oldObject] : [object]).exists(o,
      [o.metadata].exists(m, type(m) == map && (('annotations' in m && type(m.annotations) == map &&
          m.annotations.exists(k, k.contains('kai') || k.contains('sche') || k.contains('duler') || k.contains('topo') ||
            k.contains('segm'))) ||
          ('labels' in m && type(m.labels) == map && m.labels.exists(k, k.contains('topo') || k.contains('segm'))))) ||
      ('spec' in o && type(o.spec) == map) && (
      (('pytorchReplicaSpecs' in o.spec && type(o.spec.pytorchReplicaSpecs) == map ? o.spec.pytorchReplicaSpecs.map(r, o.spec.pytorchReplicaSpecs[r])
          .filter(s, type(s) == map && 'template' in s && type(s.template) == map && 'metadata' in s.template)
          .map(s, s.template.metadata) : []) +
        ('mpiReplicaSpecs' in o.spec && type(o.spec.mpiReplicaSpecs) == map ? o.spec.mpiReplicaSpecs.map(r, o.spec.mpiReplicaSpecs[r])
          .filter(s, type(s) == map && 'template' in s && type(s.template) == map && 'metadata' in s.template)
          .map(s, s.template.metadata) : []) +
        ('leaderWorkerTemplate' in o.spec && type(o.spec.leaderWorkerTemplate) == map ?
          ['workerTemplate', 'leaderTemplate'].filter(t, t in o.spec.leaderWorkerTemplate &&
            type(o.spec.leaderWorkerTemplate[t]) == map && 'metadata' in o.spec.leaderWorkerTemplate[t])
          .map(t, o.spec.leaderWorkerTemplate[t].metadata) : []) +
        ('template' in o.spec && type(o.spec.template) == map && 'metadata' in o.spec.template &&
          type(o.spec.template.metadata) == map ? [o.spec.template.metadata] : []) +
        ('replicatedJobs' in o.spec && type(o.spec.replicatedJobs) == list ? o.spec.replicatedJobs
          .filter(j, type(j) == map && 'template' in j && type(j.template) == map && 'metadata' in j.template)
          .map(j, j.template.metadata) : []) +
        ('replicatedJobs' in o.spec && type(o.spec.replicatedJobs) == list ? o.spec.replicatedJobs
          .filter(j, type(j) == map && 'template' in j && type(j.template) == map && 'spec' in j.template &&
            type(j.template.spec) == map && 'template' in j.template.spec &&
            type(j.template.spec.template) == map && 'metadata' in j.template.spec.template)
          .map(j, j.template.spec.template.metadata) : [])
      ).exists(m, type(m) == map && (('annotations' in m && type(m.annotations) == map &&
          m.annotations.exists(k, k.contains('kai') || k.contains('sche') || k.contains('duler') || k.contains('topo') ||
            k.contains('segm'))) ||
          ('labels' in m && type(m.labels) == map && m.labels.exists(k, k.contains('topo') || k.contains('segm'))))) ||
      ([o.spec] + ['rayClusterSpec', 'rayClusterConfig'].filter(f, f in o.spec).map(f, o.spec[f]))
        .filter(c, type(c) == map).exists(c,
        (('workerGroupSpecs' in c && type(c.workerGroupSpecs) == list ? c.workerGroupSpecs
          .filter(g, type(g) == map && 'template' in g && type(g.template) == map && 'metadata' in g.template)
          .map(g, g.template.metadata) : []) +
        ('headGroupSpec' in c && type(c.headGroupSpec) == map && 'template' in c.headGroupSpec &&
          type(c.headGroupSpec.template) == map && 'metadata' in c.headGroupSpec.template
          ? [c.headGroupSpec.template.metadata] : [])).exists(m, type(m) == map && (('annotations' in m && type(m.annotations) == map &&
          m.annotations.exists(k, k.contains('kai') || k.contains('sche') || k.contains('duler') || k.contains('topo') ||
            k.contains('segm'))) ||
          ('labels' in m && type(m.labels) == map && m.labels.exists(k, k.contains('topo') || k.contains('segm'))))))))
{{- end }}

{{/* rules of both workload webhooks: the workload kinds of DESIGN.md §3 and §3b, CREATE and UPDATE. */}}
{{- define "segment-webhook.workloadRules" -}}
- apiGroups: ["kubeflow.org"]
  apiVersions: ["v1"]
  resources: ["pytorchjobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["leaderworkerset.x-k8s.io"]
  apiVersions: ["v1"]
  resources: ["leaderworkersets"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["segments.dev"]
  apiVersions: ["v1alpha1"]
  resources: ["distributedworkloads"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["kubeflow.org"]
  apiVersions: ["v2beta1"]
  resources: ["mpijobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["jobset.x-k8s.io"]
  apiVersions: ["v1alpha2"]
  resources: ["jobsets"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["ray.io"]
  apiVersions: ["v1"]
  resources: ["rayclusters", "rayjobs", "rayservices"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["trainer.kubeflow.org"]
  apiVersions: ["v1alpha1"]
  resources: ["trainjobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["batch"]
  apiVersions: ["v1"]
  resources: ["jobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
