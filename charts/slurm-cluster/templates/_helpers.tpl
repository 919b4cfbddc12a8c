{{/*
The SlurmCluster's name: clusterName, or the release name. It prefixes pod and Slurm node names,
so it is checked here as the CRD checks it (a DNS label of at most 40 characters).
*/}}
{{- define "slurm-cluster.clusterName" -}}
{{- $name := .Values.clusterName | default .Release.Name }}
{{- if gt (len $name) 40 }}
{{- fail (printf "the cluster name %q is longer than 40 characters (it prefixes pod and Slurm node names): set clusterName or pick a shorter release name" $name) }}
{{- end }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "the cluster name %q is not a DNS label (lower-case letters, digits and '-', starting with a letter): set clusterName" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "slurm-cluster.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kubeslurm
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
