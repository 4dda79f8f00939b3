{{/* Names and labels. */}}
{{- define "orchard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "orchard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "orchard.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "orchard.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "orchard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "orchard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: orchard
{{- end }}

{{/* selectorLabels takes (dict "root" $ "component" "api"). */}}
{{- define "orchard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "orchard.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "orchard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "orchard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "orchard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the database client certificates are mounted. */}}
{{- define "orchard.dbTLSDir" -}}/etc/orchard/db-tls{{- end }}

{{/* The database URL built from database.*: no secret in it (client
certificates or PGPASSWORD authenticate). */}}
{{- define "orchard.databaseURL" -}}
{{- $db := .Values.database -}}
{{- $params := list (printf "sslmode=%s" $db.sslMode) -}}
{{- if $db.tls.enabled -}}
{{- $dir := include "orchard.dbTLSDir" . -}}
{{- $params = append $params (printf "sslrootcert=%s/%s" $dir $db.tls.caKey) -}}
{{- $params = append $params (printf "sslcert=%s/%s" $dir (default (printf "client.%s.crt" $db.user) $db.tls.certKey)) -}}
{{- $params = append $params (printf "sslkey=%s/%s" $dir (default (printf "client.%s.key" $db.user) $db.tls.keyKey)) -}}
{{- end -}}
{{- if $db.extraParams -}}
{{- $params = append $params $db.extraParams -}}
{{- end -}}
{{- printf "postgresql://%s@%s:%d/%s?%s" $db.user $db.host (int $db.port) $db.name (join "&" $params) -}}
{{- end }}

{{/* The configuration every process reads from the environment, none of
it secret: the ConfigMap's data, and the migration Job's env (a pre-install
hook runs before the ConfigMap exists). */}}
{{- define "orchard.config" -}}
ORCHARD_LOG_FORMAT: {{ .Values.log.format | quote }}
ORCHARD_LOG_LEVEL: {{ .Values.log.level | quote }}
{{- if not .Values.database.urlSecret.name }}
ORCHARD_DATABASE_URL: {{ include "orchard.databaseURL" . | quote }}
{{- end }}
{{- with .Values.telemetry.otlpEndpoint }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ . | quote }}
{{- end }}
{{- end }}

{{/* Environment variables taken from Secrets: the database URL or
password, River's URL. */}}
{{- define "orchard.secretEnv" -}}
{{- with .Values.database.urlSecret.name }}
- name: ORCHARD_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ . | quote }}, key: {{ $.Values.database.urlSecret.key | quote }}}
{{- end }}
{{- with .Values.database.passwordSecret.name }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef: {name: {{ . | quote }}, key: {{ $.Values.database.passwordSecret.key | quote }}}
{{- end }}
{{- end }}

{{/* A Secret of one random value under key, kept across upgrades (lookup)
and uninstalls (resource-policy keep), made once otherwise.
Arguments: "root" ., "name", "key". */}}
{{- define "orchard.keptSecret" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name -}}
apiVersion: v1
kind: Secret
metadata:
  name: {{ .name }}
  labels:
    {{- include "orchard.labels" .root | nindent 4 }}
  annotations:
    helm.sh/resource-policy: keep
type: Opaque
data:
  {{- if and $existing $existing.data (index $existing.data .key) }}
  {{ .key }}: {{ index $existing.data .key }}
  {{- else }}
  {{ .key }}: {{ randAlphaNum 48 | b64enc }}
  {{- end }}
{{- end }}

{{/* The hints between the api and dispatcher pods (values: hints), as a
YAML list of env entries. */}}
{{- define "orchard.hintsEnv" -}}
- name: ORCHARD_HINTS
  value: {{ .Values.hints.mode | quote }}
{{- if eq .Values.hints.mode "members" }}
- name: ORCHARD_HINTS_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-hints" (include "orchard.fullname" .)) .Values.hints.secret.name | quote }}
      key: {{ .Values.hints.secret.key | quote }}
{{- end }}
{{- end }}

{{- define "orchard.riverEnv" -}}
{{- with .Values.river.urlSecret.name }}
- name: ORCHARD_RIVER_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ . | quote }}, key: {{ $.Values.river.urlSecret.key | quote }}}
{{- end }}
{{- end }}

{{/* Volumes of every process: a writable /tmp and the database certificates. */}}
{{- define "orchard.volumes" -}}
- name: tmp
  emptyDir: {sizeLimit: 64Mi}
{{- if .Values.database.tls.enabled }}
- name: db-tls
  secret:
    secretName: {{ .Values.database.tls.secretName | quote }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "orchard.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.database.tls.enabled }}
- name: db-tls
  mountPath: {{ include "orchard.dbTLSDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Default spread: over zones and nodes, best effort. Takes (dict "root"
$ "component" "api" "values" .Values.api). */}}
{{- define "orchard.topologySpread" -}}
{{- if .values.topologySpreadConstraints }}
{{- toYaml .values.topologySpreadConstraints }}
{{- else }}
{{- range $key := list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
- maxSkew: 1
  topologyKey: {{ $key }}
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "orchard.selectorLabels" $ | nindent 6 }}
{{- end }}
{{- end }}
{{- end }}

{{/* Probes on the ops port: startup and liveness on /livez (no dependency),
readiness on /readyz (the database answers; 503 from SIGTERM on). */}}
{{- define "orchard.probes" -}}
startupProbe:
  httpGet: {path: /livez, port: ops}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet: {path: /livez, port: ops}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: ops}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* A component's Deployment. Takes (dict "root" $ "component" "api"
"values" .Values.api "args" (list "api") "env" <yaml list> "ports" <yaml list>
"volumes" <yaml list> "volumeMounts" <yaml list> "grace" seconds). */}}
{{- define "orchard.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "orchard.fullname" $root }}-{{ .component }}
  labels:
    {{- include "orchard.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if not (and $v.autoscaling $v.autoscaling.enabled) }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "orchard.selectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 25%, maxUnavailable: 0}
  template:
    metadata:
      labels:
        {{- include "orchard.selectorLabels" . | nindent 8 }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        checksum/config: {{ include "orchard.config" $root | sha256sum }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "orchard.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ .grace }}
      topologySpreadConstraints:
        {{- include "orchard.topologySpread" . | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "orchard.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          envFrom:
            - configMapRef:
                name: {{ include "orchard.fullname" $root }}
          env:
            - name: ORCHARD_OPS_ADDR
              value: ":{{ $v.opsPort }}"
            {{- include "orchard.secretEnv" $root | nindent 12 }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
          ports:
            - name: ops
              containerPort: {{ $v.opsPort }}
              protocol: TCP
            {{- with .ports }}
            {{- . | nindent 12 }}
            {{- end }}
          {{- include "orchard.probes" $root | nindent 10 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "orchard.volumeMounts" $root | nindent 12 }}
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "orchard.volumes" $root | nindent 8 }}
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
{{- end }}

{{/* A component's PodDisruptionBudget. Same dict as orchard.deployment. */}}
{{- define "orchard.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "orchard.fullname" .root }}-{{ .component }}
  labels:
    {{- include "orchard.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: {{ .values.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "orchard.selectorLabels" . | nindent 6 }}
{{- end }}

{{/* A component's HorizontalPodAutoscaler, when enabled. */}}
{{- define "orchard.hpa" -}}
{{- if .values.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "orchard.fullname" .root }}-{{ .component }}
  labels:
    {{- include "orchard.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "orchard.fullname" .root }}-{{ .component }}
  minReplicas: {{ .values.autoscaling.minReplicas }}
  maxReplicas: {{ .values.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .values.autoscaling.targetCPUUtilizationPercentage }}
{{- end }}
{{- end }}

{{/* A component's Service for its ops port (metrics). */}}
{{- define "orchard.opsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "orchard.fullname" .root }}-{{ .component }}
  labels:
    {{- include "orchard.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  type: ClusterIP
  selector:
    {{- include "orchard.selectorLabels" . | nindent 4 }}
  ports:
    - name: ops
      port: {{ .values.opsPort }}
      targetPort: ops
      protocol: TCP
{{- end }}
