// Command gen writes the JSON schemas kubeconform validates the Helm chart
// against, so that CI fetches none: Kubernetes' own kinds from the OpenAPI
// document of k8s.io/kubernetes (the Go module, from the module proxy), the
// Prometheus Operator's ServiceMonitor from its CRD. The schemas are strict
// (an unknown field is an error), like kubeconform's "-strict" catalog.
//
//	go run ./deploy/kubernetes-schemas/gen
//
// It must only run by hand, when the Kubernetes version or the chart's
// kinds change; its output is checked in.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The versions the schemas come from.
const (
	kubernetesModule = "k8s.io/kubernetes@v1.30.14"
	kubernetesDir    = "v1.30.14-standalone-strict"
	operatorModule   = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

// kinds are the Kubernetes kinds the chart renders.
var kinds = []struct{ group, version, kind string }{
	{"", "v1", "ConfigMap"},
	{"", "v1", "Secret"},
	{"", "v1", "Service"},
	{"", "v1", "ServiceAccount"},
	{"apps", "v1", "Deployment"},
	{"batch", "v1", "Job"},
	{"autoscaling", "v2", "HorizontalPodAutoscaler"},
	{"policy", "v1", "PodDisruptionBudget"},
	{"networking.k8s.io", "v1", "Ingress"},
}

func main() {
	out := flag.String("out", "deploy/kubernetes-schemas", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		log.Fatal(err)
	}
}

func run(out string) error {
	k8s, err := moduleDir(kubernetesModule)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(k8s, "api", "openapi-spec", "swagger.json"))
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	defs := doc.Definitions
	// Types that take two JSON forms.
	defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	if err := os.MkdirAll(filepath.Join(out, kubernetesDir), 0o755); err != nil {
		return err
	}
	for _, k := range kinds {
		name, def := findKind(defs, k.group, k.version, k.kind)
		if def == nil {
			return fmt.Errorf("no definition of %s/%s %s", k.group, k.version, k.kind)
		}
		schema := strict(clean(def)).(map[string]any)
		apiVersion := k.version
		if k.group != "" {
			apiVersion = k.group + "/" + k.version
		}
		props := schema["properties"].(map[string]any)
		props["apiVersion"] = map[string]any{"type": "string", "enum": []any{apiVersion}}
		props["kind"] = map[string]any{"type": "string", "enum": []any{k.kind}}
		used := map[string]any{}
		collect(schema, defs, used)
		schema["definitions"] = used
		schema["$schema"] = "http://json-schema.org/schema#"
		// kubeconform's file names: kind, the group's first label, version.
		file := strings.ToLower(k.kind)
		if k.group != "" {
			file += "-" + strings.Split(k.group, ".")[0]
		}
		file += "-" + k.version + ".json"
		if err := write(filepath.Join(out, kubernetesDir, file), schema); err != nil {
			return err
		}
		_ = name
	}
	return serviceMonitor(out)
}

// serviceMonitor writes the ServiceMonitor's schema from its CRD.
func serviceMonitor(out string) error {
	dir, err := moduleDir(operatorModule)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml"))
	if err != nil {
		return err
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `yaml:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return err
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != "v1" {
			continue
		}
		schema := strict(clean(v.Schema.OpenAPIV3Schema)).(map[string]any)
		schema["$schema"] = "http://json-schema.org/schema#"
		if err := os.MkdirAll(filepath.Join(out, "monitoring.coreos.com"), 0o755); err != nil {
			return err
		}
		return write(filepath.Join(out, "monitoring.coreos.com", "servicemonitor_v1.json"), schema)
	}
	return fmt.Errorf("no v1 in the ServiceMonitor CRD")
}

func moduleDir(module string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", err
	}
	return m.Dir, nil
}

func findKind(defs map[string]map[string]any, group, version, kind string) (string, map[string]any) {
	for name, def := range defs {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			m := g.(map[string]any)
			if m["group"] == group && m["version"] == version && m["kind"] == kind {
				return name, def
			}
		}
	}
	return "", nil
}

// clean drops what validation does not use (descriptions, Kubernetes
// extensions), and turns CRD int-or-string fields into their two forms.
func clean(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range v {
			if k == "description" || (strings.HasPrefix(k, "x-kubernetes-") && k != "x-kubernetes-preserve-unknown-fields" && k != "x-kubernetes-int-or-string") {
				continue
			}
			out[k] = clean(val)
		}
		if out["x-kubernetes-int-or-string"] == true {
			delete(out, "x-kubernetes-int-or-string")
			delete(out, "type")
			out["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = clean(e)
		}
		return out
	default:
		return v
	}
}

// strict forbids the fields an object schema does not list.
func strict(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			v[k] = strict(val)
		}
		_, hasProps := v["properties"]
		_, hasAdditional := v["additionalProperties"]
		if hasProps && !hasAdditional && v["x-kubernetes-preserve-unknown-fields"] != true {
			v["additionalProperties"] = false
		}
		delete(v, "x-kubernetes-preserve-unknown-fields")
		return v
	case []any:
		for i, e := range v {
			v[i] = strict(e)
		}
		return v
	default:
		return v
	}
}

// collect copies into used every definition schema refers to, transitively.
func collect(schema any, defs map[string]map[string]any, used map[string]any) {
	switch v := schema.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			if _, done := used[name]; !done {
				def, ok := defs[name]
				if !ok {
					log.Fatalf("dangling reference %s", ref)
				}
				cleaned := strict(clean(def))
				used[name] = cleaned
				collect(cleaned, defs, used)
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			collect(v[k], defs, used)
		}
	case []any:
		for _, e := range v {
			collect(e, defs, used)
		}
	}
}

func write(path string, schema any) error {
	b, err := json.MarshalIndent(schema, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
