package engine

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/invopop/jsonschema"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

//go:generate go test -run ^TestDefinitionSchemaIsCurrent$ -count=1 . -update

var update = flag.Bool("update", false, "rewrite docs/definition.schema.json")

// schemaFile is the published JSON Schema of the definition language.
const schemaFile = "../../docs/definition.schema.json"

// repoRoot is where the fixtures are looked for.
const repoRoot = "../.."

// The patterns of strings the schema can check; the parser checks more (ranges,
// expressions, step references).
const (
	// A duration as parseDuration reads it: Go's units, or whole days alone.
	durationPattern = `^\s*([0-9]+d|(([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)\s*$`
	// A string holding an expression.
	expressionPattern = `\$\{`
	// A string that is one expression.
	singleExpressionPattern = `^\$\{[\s\S]*\}$`
)

// definitionSchema generates the JSON Schema of the definition language from the types
// definitions are decoded into (language.go): their json tags, required fields, bounds
// and descriptions; the types that read themselves are described here.
func definitionSchema(t *testing.T) []byte {
	steps := func(min uint64) func() *jsonschema.Schema {
		return func() *jsonschema.Schema {
			return &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Ref: "#/$defs/Step"}, MinItems: &min}
		}
	}
	one := uint64(1)
	leaves := map[reflect.Type]func() *jsonschema.Schema{
		reflect.TypeFor[name](): func() *jsonschema.Schema {
			return &jsonschema.Schema{Type: "string", Pattern: namePattern.String()}
		},
		reflect.TypeFor[version](): func() *jsonschema.Schema {
			zero := json.Number("0")
			return &jsonschema.Schema{OneOf: []*jsonschema.Schema{{Type: "string", Pattern: namePattern.String()}, {Type: "number", Minimum: zero}}}
		},
		reflect.TypeFor[stepID](): func() *jsonschema.Schema {
			return &jsonschema.Schema{Type: "string", Pattern: stepIDPattern.String()}
		},
		reflect.TypeFor[condition](): func() *jsonschema.Schema {
			return &jsonschema.Schema{OneOf: []*jsonschema.Schema{{Type: "boolean"}, {Type: "string", Pattern: singleExpressionPattern}}}
		},
		reflect.TypeFor[durationValue](): func() *jsonschema.Schema {
			return &jsonschema.Schema{Type: "string", AnyOf: []*jsonschema.Schema{{Pattern: durationPattern}, {Pattern: expressionPattern}}}
		},
		reflect.TypeFor[interval](): func() *jsonschema.Schema {
			return &jsonschema.Schema{Type: "string", Pattern: durationPattern}
		},
		reflect.TypeFor[message](): func() *jsonschema.Schema {
			return &jsonschema.Schema{Not: &jsonschema.Schema{Type: "null"}}
		},
		reflect.TypeFor[instanceID](): func() *jsonschema.Schema { return &jsonschema.Schema{Type: "string"} },
		reflect.TypeFor[items](): func() *jsonschema.Schema {
			return &jsonschema.Schema{OneOf: []*jsonschema.Schema{{Type: "array"}, {Type: "string", Pattern: expressionPattern}}}
		},
		reflect.TypeFor[variables](): func() *jsonschema.Schema {
			return &jsonschema.Schema{Type: "object", MinProperties: &one, PropertyNames: &jsonschema.Schema{Pattern: stepIDPattern.String()}}
		},
		reflect.TypeFor[Value]():        func() *jsonschema.Schema { return &jsonschema.Schema{} },
		reflect.TypeFor[stepSequence](): steps(1),
		reflect.TypeFor[loopBody]():     steps(1),
		reflect.TypeFor[branches]():     steps(1),
		reflect.TypeFor[raceBranches](): steps(2),
	}
	r := &jsonschema.Reflector{
		Anonymous:                  true,
		ExpandedStruct:             true,
		RequiredFromJSONSchemaTags: true,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if leaf, ok := leaves[t]; ok {
				return leaf()
			}
			return nil
		},
		// definitionSpec -> Definition, stepSpec -> Step.
		Namer: func(t reflect.Type) string {
			n := []rune(strings.TrimSuffix(t.Name(), "Spec"))
			if len(n) == 0 {
				return ""
			}
			n[0] = unicode.ToUpper(n[0])
			return string(n)
		},
	}
	s := r.Reflect(&definitionSpec{})
	s.Title = "Orchard orchestration definition"
	s.Description = "An orchestration definition, registered with `orchard definition register`. Generated from pkg/engine/language.go; strings may hold ${ ... } CEL expressions, which the server checks at registration."
	// Steps are referenced only from the step lists described above, so the reflector
	// never reaches stepSpec from the root: reflect it on its own and add its definitions.
	step := r.Reflect(&stepSpec{})
	for k, def := range step.Definitions {
		s.Definitions[k] = def
	}
	step.Version, step.Definitions = "", nil
	s.Definitions["Step"] = step
	step.Description = "One step: an optional id and condition, and exactly one action."
	for _, k := range actionKeys() {
		step.OneOf = append(step.OneOf, &jsonschema.Schema{Required: []string{k}})
	}
	out, err := json.MarshalIndent(s, "", "  ")
	require.NoError(t, err)
	return append(out, '\n')
}

// TestDefinitionSchemaIsCurrent fails when docs/definition.schema.json is not what the
// types of the language generate (`make definition-schema` rewrites it).
func TestDefinitionSchemaIsCurrent(t *testing.T) {
	t.Parallel()
	want := definitionSchema(t)
	if *update {
		require.NoError(t, os.WriteFile(schemaFile, want, 0o644))
	}
	got, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "docs/definition.schema.json is stale: run `make definition-schema` and commit it")
}

// compiledSchema compiles the checked-in schema with a validator independent of the
// generator.
func compiledSchema(t *testing.T) *validator.Schema {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := validator.NewCompiler()
	require.NoError(t, c.AddResource("definition.schema.json", doc))
	sch, err := c.Compile("definition.schema.json")
	require.NoError(t, err)
	return sch
}

// validateAgainstSchema reads a YAML or JSON definition as the parser does and validates it.
func validateAgainstSchema(t *testing.T, sch *validator.Schema, doc []byte) error {
	t.Helper()
	tree, err := decodeDocument(doc)
	require.NoError(t, err)
	raw, err := json.Marshal(tree)
	require.NoError(t, err)
	inst, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	return sch.Validate(inst)
}

type fixture struct {
	where string
	doc   []byte
}

// definitionFixtures finds the definitions written in the repository: YAML files
// whose top level has steps (examples, testdata), the README's heredocs, and Go raw
// strings that are definitions (the load test's workloads, test documents).
func definitionFixtures(t *testing.T) []fixture {
	var found []fixture
	isDefinition := func(doc []byte) bool {
		tree, err := decodeDocument(doc)
		obj, ok := tree.(map[string]any)
		_, hasSteps := obj["steps"]
		return err == nil && ok && hasSteps
	}
	heredoc := regexp.MustCompile(`(?s)<<'EOF'\n(.*?)\nEOF\n`)
	err := filepath.WalkDir(repoRoot, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(data, []byte("steps:")) && !bytes.Contains(data, []byte(`"steps"`)) {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			if isDefinition(data) {
				found = append(found, fixture{path, data})
			}
		case ".md":
			for i, m := range heredoc.FindAllSubmatch(data, -1) {
				if isDefinition(m[1]) {
					found = append(found, fixture{path + " heredoc " + strconv.Itoa(i), m[1]})
				}
			}
		case ".go":
			f, err := parser.ParseFile(token.NewFileSet(), path, data, 0)
			require.NoError(t, err, path)
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING || !strings.HasPrefix(lit.Value, "`") {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err == nil && isDefinition([]byte(s)) {
					found = append(found, fixture{path + " string", []byte(s)})
				}
				return true
			})
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// TestDefinitionsMatchSchema validates every definition written in the repository
// against the checked-in schema: each one the parser accepts is valid (an editor must
// never flag a good definition), and each file named invalid* is not.
func TestDefinitionsMatchSchema(t *testing.T) {
	t.Parallel()
	sch := compiledSchema(t)
	fixtures := definitionFixtures(t)
	var valid, invalid int
	sources := map[string]int{}
	for _, f := range fixtures {
		schemaErr := validateAgainstSchema(t, sch, f.doc)
		_, parseErr := ParseDefinition(f.doc)
		switch {
		case strings.HasPrefix(filepath.Base(strings.Fields(f.where)[0]), "invalid"):
			require.Error(t, parseErr, f.where)
			require.Error(t, schemaErr, "%s: the schema accepts an invalid definition", f.where)
			invalid++
		case parseErr == nil:
			require.NoError(t, schemaErr, "%s: the schema rejects a definition the parser accepts", f.where)
			valid++
			for _, src := range []string{"pkg/engine/examples/", "README.md", "loadtest/workloads.go"} {
				if strings.Contains(filepath.ToSlash(f.where), src) {
					sources[src]++
				}
			}
		}
	}
	t.Logf("%d definitions valid against the schema, %d invalid ones rejected", valid, invalid)
	require.Len(t, Examples(), sources["pkg/engine/examples/"], "every example of orchard dev --demo")
	require.Positive(t, sources["README.md"], "the README's definition")
	require.GreaterOrEqual(t, sources["loadtest/workloads.go"], 6, "the load test's definitions")
	require.Positive(t, invalid, "an invalid fixture")
}

// TestSchemaRejectsInvalidDefinitions checks that the schema catches the mistakes an
// editor should show.
func TestSchemaRejectsInvalidDefinitions(t *testing.T) {
	t.Parallel()
	sch := compiledSchema(t)
	const head = "name: a\nversion: 1\nsteps:\n"
	good := head + "  - id: x\n    if: ${ input.go }\n    activity: { name: x, task_queue: q, timeout: 30s, retry: { max_attempts: 3, initial_interval: 1s, backoff_coefficient: 1.5, max_interval: 1m } }\n" +
		"  - race: [ { timer: 1d }, { wait_event: { name: e, timeout: \"${ input.t }\" } } ]\n" +
		"  - for_each: { items: \"${ input.items }\", concurrency: 4, steps: [ { set: { v: \"${ item }\" } } ] }\n" +
		"  - continue_as_new:\n"
	require.NoError(t, validateAgainstSchema(t, sch, []byte(good)))
	_, err := ParseDefinition([]byte(good))
	require.NoError(t, err)
	for what, doc := range map[string]string{
		"a typo at the top":       "name: a\nversion: 1\nstep: []\nsteps: [ { return: 1 } ]\n",
		"a typo in a step":        head + "  - return: 1\n    continue_on_eror: true\n",
		"a typo in a retry":       head + "  - activity: { name: x, task_queue: q, retry: { max_atempts: 3 } }\n",
		"no name":                 "version: 1\nsteps: [ { return: 1 } ]\n",
		"a bad name":              "name: bad name!\nversion: 1\nsteps: [ { return: 1 } ]\n",
		"no steps":                "name: a\nversion: 1\nsteps: []\n",
		"a step with two actions": head + "  - timer: 1s\n    return: 1\n",
		"a step with no action":   head + "  - id: x\n",
		"a race of one":           head + "  - race: [ { timer: 1s } ]\n",
		"attempts out of range":   head + "  - activity: { name: x, task_queue: q, retry: { max_attempts: 0 } }\n",
		"not a duration":          head + "  - timer: 10 parsecs\n",
		"a condition as text":     head + "  - if: \"yes\"\n    return: 1\n",
		"a bad variable":          head + "  - set: { bad-var: 1 }\n",
		"a null fail":             head + "  - fail: null\n",
		"items neither":           head + "  - for_each: { items: 3, steps: [ { return: 1 } ] }\n",
	} {
		require.Error(t, validateAgainstSchema(t, sch, []byte(doc)), what)
		_, err := ParseDefinition([]byte(doc))
		require.Error(t, err, "%s: the parser accepts it", what)
	}
}
