{{/* The chart name, or nameOverride. */}}
{{- define "kubeslurm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object of the release: fullnameOverride, or the release name when it already
contains the chart name, or <release>-<chart>. ClusterRole and ClusterRoleBinding are
cluster-scoped, so two releases (in different namespaces) need different release names.
*/}}
{{- define "kubeslurm-operator.fullname" -}}
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

{{- define "kubeslurm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeslurm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kubeslurm-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kubeslurm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: kubeslurm
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The operator's rules on namespaced objects: granted in every namespace by the ClusterRole when
watchNamespaces is empty, else by a Role in each watched namespace. The same rules, in the same
order, as deploy/rbac.yaml (a test compares them), which says which code needs each one.
*/}}
{{- define "kubeslurm-operator.namespacedRules" -}}
# SlurmClusters: watched by kopf, read by the reconcile (get, and list for name collisions);
# patch: kopf's finalizer, which lets a cluster's daemon stop before the cluster is gone
- apiGroups: [kubeslurm.io]
  resources: [slurmclusters]
  verbs: [get, list, watch, patch]
# NodeSets: watched by kopf, listed by the reconcile; patch: the ownerReference to their
# cluster (server-side apply of an existing NodeSet)
- apiGroups: [kubeslurm.io]
  resources: [nodesets]
  verbs: [list, watch, patch]
# status is ours (reconcile/status.py, a merge patch; never read back from the subresource)
- apiGroups: [kubeslurm.io]
  resources: [slurmclusters/status, nodesets/status]
  verbs: [patch]
# objects rendered per cluster: server-side apply (create+patch; get for one not found by
# label), drift watch (list, watch), prune (delete)
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# the MariaDB NetworkPolicy: only slurmdbd may reach the database
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
# Secrets: read one by one (the auth key, the generated DB password, an external DB password),
# created once (key, password), slurmdbd.conf applied (create+patch). Never listed or watched,
# never deleted (garbage collection removes them with their SlurmCluster)
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# the controller-state and database claims: applied (create+patch), read by name; never
# deleted by us (only garbage collection, with the SlurmCluster)
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, patch]
# slurmd pods: readiness and placement (list, watch), the controller pod (get); the
# running-jobs label that the PDB selects (patch); replaceUnhealthy deletes the pod of an
# idle node drained for its health (reconcile/replacement.py)
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
# exec into slurmctld runs scontrol/squeue/sacctmgr (reconcile/slurm_control.py) over a
# websocket: a GET upgrade, authorized as get, and as create by newer API servers
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
# Slurm-scheduled pods (spec.bridge; reconcile/bridge_sync.py): bound to the node of their
# Slurm job (create pods/binding, as kube-scheduler does) and told why they wait (PodScheduled,
# patch pods/status). Their namespaces must be watched too (watchNamespaces)
- apiGroups: [""]
  resources: [pods/binding]
  verbs: [create]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# spec.bridge's device plugin (render/bridge/device_plugin.py): its DaemonSet, ServiceAccount,
# and a Role to get the placement record, bound to it; applied and read by name (get), never
# listed; deleted by name when the bridge is turned off (apply_objects.prune_device_plugin),
# else by garbage collection with the SlurmCluster
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch, delete]
# reconcile/events.py posts Events about our objects and bridged pods
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/*
kopf follows the custom resources through their definitions when it watches every namespace;
with watchNamespaces (`--namespace`) scanning is off and it needs no access to CRDs.
*/}}
{{- define "kubeslurm-operator.customResourceDefinitionRules" -}}
# kopf follows the custom resources through their definitions. Not with --namespace (the
# chart's watchNamespaces): there scanning is off and kopf serves the CRDs found at start
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- end }}

{{/*
Kubernetes nodes are cluster-scoped and the operator reads them whatever watchNamespaces holds.
*/}}
{{- define "kubeslurm-operator.nodeRules" -}}
# Kubernetes node health and labels: drains and topology.conf (listed once per reconcile,
# watched by kopf); granted cluster-wide also with watchNamespaces
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
{{- end }}
