{{/*
Names. Kubernetes names are at most 63 characters (a label value's limit too).
*/}}
{{- define "streamjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "streamjob-operator.fullname" -}}
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

{{- define "streamjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object; the selector labels are the stable subset a Deployment selects on
(a Deployment's selector cannot change after install, so no version in it).
*/}}
{{- define "streamjob-operator.labels" -}}
{{ include "streamjob-operator.baseLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "streamjob-operator.baseLabels" -}}
helm.sh/chart: {{ include "streamjob-operator.chart" . }}
app.kubernetes.io/name: {{ include "streamjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: streamjob
{{- end }}

{{/* The job-driver account's objects (not the operator's). */}}
{{- define "streamjob-operator.driverLabels" -}}
{{ include "streamjob-operator.baseLabels" . }}
app.kubernetes.io/component: driver
{{- end }}

{{- define "streamjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "streamjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "streamjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the existing service account to use when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "streamjob-operator.driverServiceAccountName" -}}
{{- default (printf "%s-driver" (include "streamjob-operator.fullname" .) | trunc 63 | trimSuffix "-") .Values.driver.serviceAccount.name }}
{{- end }}

{{- define "streamjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The namespaces the job-driver account and Role go to: the watched ones, or the release's own
when watching all namespaces. One per line (a template returns a string).
*/}}
{{- define "streamjob-operator.driverNamespaces" -}}
{{- if .Values.watchNamespaces }}
{{- range .Values.watchNamespaces }}
{{ . }}
{{- end }}
{{- else }}
{{ .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The peering name when leader election is on (several replicas or asked for), else empty:
the operator then runs standalone (kopf's --standalone).
*/}}
{{- define "streamjob-operator.peeringName" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) }}
{{- default (include "streamjob-operator.fullname" .) .Values.leaderElection.peeringName }}
{{- end }}
{{- end }}

{{/*
The operator's rules in one namespace (or, in a ClusterRole, in all of them). Why each one is there
is in README.md ("RBAC"); tests/test_helm_chart.py checks them against what the code calls.
*/}}
{{- define "streamjob-operator.namespacedRules" -}}
# The StreamJobs: kopf lists and watches them and patches its finalizer and bookkeeping
# annotations; the reconciler reads one back (get) after a status write conflict.
- apiGroups: ["streamjob.io"]
  resources: ["streamjobs"]
  verbs: ["get", "list", "watch", "patch"]
# The reconciler replaces the status subresource with the resourceVersion it read (update);
# kopf patches it.
- apiGroups: ["streamjob.io"]
  resources: ["streamjobs/status"]
  verbs: ["update", "patch"]
# Driver pods: created per deployment, listed by label, deleted on redeploy. The rest (get, watch,
# patch, deletecollection) only because the per-job driver Role the operator creates for
# `mode: kubernetes` grants them (Kubernetes refuses to create a Role granting more than its
# creator holds); likewise services, configmaps and persistentvolumeclaims below.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "deletecollection", "patch"]
# The job's headless Service and its ConfigMap (job.conf): created, read and replaced when the
# spec changes (update).
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "delete", "deletecollection"]
# Never touched by the operator itself: held for the per-job driver Role only (see pods).
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "delete", "deletecollection"]
# The per-job REST token Secret: created once, read back (the job manager's bearer token) and,
# through spec.s3, the user's object-storage credentials are read to check the storage.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
# `mode: kubernetes`: the per-job driver ServiceAccount, Role and RoleBinding, created and kept in
# line with the spec.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "update"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "update"]
# Events (kopf posts them: transitions, savepoints, errors). Core v1 events, created only.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .Values.rbac.ownerReferencesPermissionEnforcement }}
# Clusters with the OwnerReferencesPermissionEnforcement admission plugin (OpenShift): setting an
# ownerReference needs delete on the object (pods, services, configmaps have it above), and
# blockOwnerDeletion needs update on the owner's finalizers.
- apiGroups: [""]
  resources: ["secrets", "serviceaccounts"]
  verbs: ["delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["delete"]
- apiGroups: ["streamjob.io"]
  resources: ["streamjobs/finalizers"]
  verbs: ["update"]
{{- end }}
{{- end }}

{{/*
kopf's peering objects: watched (list, watch) for the other replicas' heartbeats, patched with
this replica's. $resource is kopfpeerings or clusterkopfpeerings.
*/}}
{{- define "streamjob-operator.peeringRule" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ . | quote }}]
  verbs: ["list", "watch", "patch"]
{{- end }}
