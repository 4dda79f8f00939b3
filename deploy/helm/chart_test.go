// Package helm_test renders the Helm chart (helm template, pinned) and
// checks what an operator relies on: the security context, the probes, the
// migration hook's order and that no secret lands in a ConfigMap. Schema
// validation is kubeconform's job (make helm-lint).
package helm_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Helm is run pinned, like the Makefile runs it.
const (
	helmModule  = "helm.sh/helm/v3/cmd/helm@v3.22.0"
	kubeVersion = "1.30.14"
)

type object = map[string]any

// render runs helm template on the chart with the values files and --set
// arguments given and returns the objects.
func render(t *testing.T, args ...string) ([]object, error) {
	t.Helper()
	cmdArgs := append([]string{"run", helmModule, "template", "rel", "orchard", "--namespace", "ns", "--kube-version", kubeVersion}, args...)
	cmd := exec.CommandContext(t.Context(), "go", cmdArgs...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	var objs []object
	dec := yaml.NewDecoder(&stdout)
	for {
		var o object
		if err := dec.Decode(&o); err != nil {
			if err.Error() == "EOF" {
				break
			}
			return nil, err
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// get walks a path of map keys.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(object)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

func kindOf(o object) string { s, _ := o["kind"].(string); return s }

func nameOf(o object) string { s, _ := get(o, "metadata", "name").(string); return s }

var valuesFiles = map[string][]string{
	"default":    {"-f", "orchard/ci/default-values.yaml"},
	"production": {"-f", "orchard/ci/production-values.yaml"},
}

func TestChart(t *testing.T) {
	t.Parallel()
	for name, args := range valuesFiles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objs, err := render(t, args...)
			require.NoError(t, err)
			checkWorkloads(t, objs)
			checkHookOrder(t, objs)
			checkNoSecretInConfigMaps(t, objs)
		})
	}
}

// The api requires a way to verify tokens: rendering without one fails
// and says what to set.
func TestChartRequiresTokenVerification(t *testing.T) {
	t.Parallel()
	_, err := render(t)
	require.ErrorContains(t, err, "jwt.jwksURL or jwt.publicKeys must be set")
	_, err = render(t, append(valuesFiles["default"], "--set", "dispatcher.loops=0")...)
	require.ErrorContains(t, err, "dispatcher/loops", "values.schema.json bounds the values")
}

// podSpecs returns the pod templates of the Deployments and Jobs.
func podSpecs(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if k := kindOf(o); k == "Deployment" || k == "Job" {
			out[k+"/"+nameOf(o)] = get(o, "spec", "template", "spec").(object)
		}
	}
	return out
}

func checkWorkloads(t *testing.T, objs []object) {
	specs := podSpecs(objs)
	var deploymentArgs []string
	for _, o := range objs {
		if kindOf(o) == "Deployment" {
			for _, c := range list(get(o, "spec", "template", "spec", "containers")) {
				deploymentArgs = append(deploymentArgs, fmt.Sprint(get(c, "args")))
			}
		}
	}
	slices.Sort(deploymentArgs)
	require.Equal(t, []string{"[api]", "[dispatcher]", "[janitor]"}, deploymentArgs, "one Deployment per service, of the one image")
	require.Len(t, specs, 4)
	for name, spec := range specs {
		require.Equal(t, true, get(spec, "securityContext", "runAsNonRoot"), name)
		require.NotEqual(t, 0, get(spec, "securityContext", "runAsUser"), name)
		require.Equal(t, false, get(spec, "automountServiceAccountToken"), name)
		containers := list(spec["containers"])
		require.NotEmpty(t, containers)
		for _, c := range append(containers, list(spec["initContainers"])...) {
			sc := get(c, "securityContext")
			where := fmt.Sprintf("%s container %v", name, get(c, "name"))
			require.Equal(t, true, get(sc, "readOnlyRootFilesystem"), where)
			require.Equal(t, false, get(sc, "allowPrivilegeEscalation"), where)
			require.Equal(t, true, get(sc, "runAsNonRoot"), where)
			require.Contains(t, list(get(sc, "capabilities", "drop")), "ALL", where)
			require.NotNil(t, get(c, "resources", "requests"), where)
			if strings.HasPrefix(name, "Job/") {
				continue
			}
			// Probes on the ops port: liveness checks no dependency,
			// readiness the database (and the drain).
			require.Equal(t, "/livez", get(c, "startupProbe", "httpGet", "path"), where)
			require.Equal(t, "/livez", get(c, "livenessProbe", "httpGet", "path"), where)
			require.Equal(t, "/readyz", get(c, "readinessProbe", "httpGet", "path"), where)
			var portNames []any
			for _, p := range list(get(c, "ports")) {
				portNames = append(portNames, get(p, "name"))
			}
			require.Contains(t, portNames, get(c, "readinessProbe", "httpGet", "port"), where)
			// The grace period covers the drain the process is told to do.
			var drain time.Duration
			for _, e := range list(get(c, "env")) {
				switch get(e, "name") {
				case "ORCHARD_DRAIN_TIMEOUT", "ORCHARD_SHUTDOWN_DELAY", "ORCHARD_JANITOR_JOB_BUDGET":
					d, err := time.ParseDuration(get(e, "value").(string))
					require.NoError(t, err, where)
					drain += d
				}
			}
			require.NotZero(t, drain, "%s is told no drain time", where)
			grace, _ := get(spec, "terminationGracePeriodSeconds").(int)
			require.Greater(t, time.Duration(grace)*time.Second, drain, where)
		}
	}
}

// The migration Job is a pre-install and pre-upgrade hook, so it runs
// before the Deployments (which are no hooks) are created or changed; what
// it uses must exist before the release's other resources do.
func checkHookOrder(t *testing.T, objs []object) {
	weights := map[string]int{}
	var job object
	for _, o := range objs {
		hook, _ := get(o, "metadata", "annotations", "helm.sh/hook").(string)
		if kindOf(o) == "Deployment" {
			require.Empty(t, hook, "Deployment %s is a hook", nameOf(o))
		}
		if hook == "" {
			continue
		}
		require.ElementsMatch(t, []string{"pre-install", "pre-upgrade"}, strings.Split(hook, ","), nameOf(o))
		w, err := strconv.Atoi(get(o, "metadata", "annotations", "helm.sh/hook-weight").(string))
		require.NoError(t, err)
		weights[kindOf(o)+"/"+nameOf(o)] = w
		if kindOf(o) == "Job" {
			job = o
		}
	}
	require.NotNil(t, job, "no migration hook Job")
	require.Equal(t, []any{"migrate"}, list(get(job, "spec", "template", "spec", "containers"))[0].(object)["args"])
	sa := "ServiceAccount/" + get(job, "spec", "template", "spec", "serviceAccountName").(string)
	require.Contains(t, weights, sa, "the Job's ServiceAccount must be a hook too: it runs before the release's resources exist")
	require.Less(t, weights[sa], weights["Job/"+nameOf(job)], "the ServiceAccount must be created before the Job")
	// Nothing the chart renders outside the hooks may be referenced by it.
	rendered := map[string]bool{}
	for _, o := range objs {
		if get(o, "metadata", "annotations", "helm.sh/hook") == nil {
			rendered[nameOf(o)] = true
		}
	}
	var refs []string
	walk(get(job, "spec"), func(m object) {
		for _, k := range []string{"configMapRef", "configMapKeyRef", "secretKeyRef", "secretRef"} {
			if n, ok := get(m, k, "name").(string); ok {
				refs = append(refs, n)
			}
		}
		if n, ok := get(m, "secret", "secretName").(string); ok {
			refs = append(refs, n)
		}
		if n, ok := get(m, "configMap", "name").(string); ok {
			refs = append(refs, n)
		}
	})
	for _, r := range refs {
		require.False(t, rendered[r], "the migration Job uses %s, which does not exist yet at pre-install", r)
	}
}

func walk(v any, f func(object)) {
	switch v := v.(type) {
	case object:
		f(v)
		for _, e := range v {
			walk(e, f)
		}
	case []any:
		for _, e := range v {
			walk(e, f)
		}
	}
}

// No secret value is in a ConfigMap: not the values of the Secrets the
// chart renders, not a password in the database URL; and the variables
// that hold secrets come from Secrets.
func checkNoSecretInConfigMaps(t *testing.T, objs []object) {
	var secretValues []string
	for _, o := range objs {
		if kindOf(o) != "Secret" {
			continue
		}
		data, _ := get(o, "data").(object)
		for _, v := range data {
			b, err := base64.StdEncoding.DecodeString(v.(string))
			require.NoError(t, err)
			secretValues = append(secretValues, string(b))
		}
		stringData, _ := get(o, "stringData").(object)
		for _, v := range stringData {
			secretValues = append(secretValues, v.(string))
		}
	}
	for _, o := range objs {
		if kindOf(o) != "ConfigMap" {
			continue
		}
		data, _ := get(o, "data").(object)
		for k, v := range data {
			s := v.(string)
			for _, secret := range secretValues {
				require.NotContains(t, s, secret, "ConfigMap %s key %s holds a Secret's value", nameOf(o), k)
			}
			require.NotContains(t, []string{"ORCHARD_API_SECRET", "PGPASSWORD"}, k)
			require.NotContains(t, s, "PRIVATE KEY", "ConfigMap %s key %s", nameOf(o), k)
			if k == "ORCHARD_DATABASE_URL" {
				u, err := url.Parse(s)
				require.NoError(t, err)
				_, hasPassword := u.User.Password()
				require.False(t, hasPassword, "the database URL in ConfigMap %s holds a password", nameOf(o))
			}
		}
	}
	for name, spec := range podSpecs(objs) {
		for _, c := range list(spec["containers"]) {
			for _, e := range list(get(c, "env")) {
				switch get(e, "name") {
				case "ORCHARD_API_SECRET", "PGPASSWORD", "ORCHARD_RIVER_DATABASE_URL":
					require.Nil(t, get(e, "value"), "%s: %v must come from a Secret", name, get(e, "name"))
					require.NotNil(t, get(e, "valueFrom", "secretKeyRef"), "%s: %v must come from a Secret", name, get(e, "name"))
				}
			}
		}
	}
}
