package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func validationErrors(t *testing.T, doc string) []FieldError {
	t.Helper()
	def, err := ParseDefinition([]byte(doc))
	require.Nil(t, def)
	var ve *ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
	return ve.Errors
}

func TestParseDefinitionReportsEveryErrorByPath(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		doc  string
		want []FieldError
	}{
		"bad duration in a race branch": {
			doc: yamlDoc(`
				name: a
				version: 1
				steps:
				  - timer: 1s
				  - set: { x: 1 }
				  - timer: 2s
				  - race:
				      - timer: 1m
				      - timer: 10 parsecs
			`),
			want: []FieldError{{Path: "steps[3].race[1].timer", Reason: `"10 parsecs" is not a duration`}},
		},
		"every problem at once": {
			doc: yamlDoc(`
				version: [1]
				steps:
				  - id: a
				    activity: { name: x, task_queue: q, retry: { max_attempts: 0, backoff_coefficient: 0.5 }, colour: red }
				  - id: a
				    timer: 5s
				    wait_event: { name: e }
				  - {}
				  - frobnicate: 1
			`),
			want: []FieldError{
				{Path: "name", Reason: "is required"},
				{Path: "version", Reason: "must be a string or a number"},
				{Path: "steps[0].activity.colour", Reason: "unknown field"},
				{Path: "steps[0].activity.retry.max_attempts", Reason: "must be an integer from 1 to 1000"},
				{Path: "steps[0].activity.retry.backoff_coefficient", Reason: "must be a number from 1 to 100"},
				{Path: "steps[1].id", Reason: `duplicate id "a" (also at steps[0])`},
				{Path: "steps[1]", Reason: "has 2 actions (timer, wait_event); a step has exactly one"},
				{Path: "steps[2]", Reason: "has no action (one of activity, timer, wait_event, sub_orchestration, parallel, race, for_each, set, fail, continue_as_new, return)"},
				{Path: "steps[3].frobnicate", Reason: "unknown field"},
				{Path: "steps[3]", Reason: "has no action (one of activity, timer, wait_event, sub_orchestration, parallel, race, for_each, set, fail, continue_as_new, return)"},
			},
		},
		"unreachable steps": {
			doc: yamlDoc(`
				name: a
				version: 1
				steps:
				  - parallel:
				      - fail: stop
				      - set: { x: 1 }
				  - if: ${ input.x }
				    return: 1
				  - continue_as_new: { input: 2 }
				  - set: { y: 1 }
				  - set: { z: 1 }
			`),
			want: []FieldError{{Path: "steps[3]", Reason: "unreachable: follows the unconditional continue_as_new at steps[2]"}},
		},
		"unknown step references": {
			doc: yamlDoc(`
				name: a
				version: 1
				steps:
				  - id: known
				    set: { x: "${ steps.known.output }" }
				  - return: '${ [steps.missing.output, steps["other"].error] }'
			`),
			want: []FieldError{
				{Path: "steps[1].return", Reason: `unknown step id "missing"`},
				{Path: "steps[1].return", Reason: `unknown step id "other"`},
			},
		},
		"shapes": {
			doc: yamlDoc(`
				name: "bad name!"
				version: 1
				steps:
				  - race: [ { timer: 1s } ]
				  - parallel: []
				  - for_each: { items: 3, steps: [ { set: { "bad-var": 1 } } ], concurrency: 0 }
				  - id: 9lives
				    if: "yes"
				    timer: 0s
				  - sub_orchestration: { name: c, instance_id: 7 }
				  - activity: { name: x, task_queue: q, retry: { initial_interval: 1m, max_interval: 1s } }
			`),
			want: []FieldError{
				{Path: "name", Reason: `"bad name!" is not a valid name (letters, digits and _.:/-, at most 200)`},
				{Path: "steps[0].race", Reason: "a race needs at least two branches"},
				{Path: "steps[1].parallel", Reason: "must hold at least one step"},
				{Path: "steps[2].for_each.items", Reason: "must be a list or an expression"},
				{Path: "steps[2].for_each.concurrency", Reason: "must be an integer from 1 to 1000"},
				{Path: "steps[2].for_each.steps[0].set.bad-var", Reason: `"bad-var" is not a valid variable name`},
				{Path: "steps[3].id", Reason: `"9lives" is not a valid id (a letter or _, then letters, digits or _, at most 64)`},
				{Path: "steps[3].if", Reason: "must be a boolean or a single ${ ... } expression"},
				{Path: "steps[3].timer", Reason: `"0s" is not a duration between 1ns and 10 years`},
				{Path: "steps[4].sub_orchestration.instance_id", Reason: "must be a string"},
				{Path: "steps[5].activity.retry.max_interval", Reason: "is shorter than initial_interval"},
			},
		},
		"not a document": {
			doc:  "name: [",
			want: []FieldError{{Reason: "not a YAML or JSON document: yaml: line 1: did not find expected node content"}},
		},
		"not an object": {
			doc:  "[1, 2]",
			want: []FieldError{{Reason: "a definition is an object with name, version and steps"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, validationErrors(t, tc.doc))
		})
	}
}

// TestParseDefinitionRejectsUnknownFields checks that a typo is reported with its path
// at every level of the language, in YAML and in JSON alike.
func TestParseDefinitionRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ yaml, json, path string }{
		"definition": {
			yaml: "name: a\nversion: 1\nstep: []\nsteps: [ { return: 1 } ]\n",
			json: `{"name":"a","version":1,"step":[],"steps":[{"return":1}]}`,
			path: "step",
		},
		"step": {
			yaml: "name: a\nversion: 1\nsteps:\n  - return: 1\n    continue_on_eror: true\n",
			json: `{"name":"a","version":1,"steps":[{"return":1,"continue_on_eror":true}]}`,
			path: "steps[0].continue_on_eror",
		},
		"retry": {
			yaml: "name: a\nversion: 1\nsteps:\n  - set: { x: 1 }\n  - timer: 1s\n  - wait_event: { name: e }\n  - activity: { name: x, task_queue: q, retry: { max_atempts: 3 } }\n",
			json: `{"name":"a","version":1,"steps":[{"set":{"x":1}},{"timer":"1s"},{"wait_event":{"name":"e"}},{"activity":{"name":"x","task_queue":"q","retry":{"max_atempts":3}}}]}`,
			path: "steps[3].activity.retry.max_atempts",
		},
		"wait_event": {
			yaml: "name: a\nversion: 1\nsteps:\n  - wait_event: { name: e, timout: 1s }\n",
			json: `{"name":"a","version":1,"steps":[{"wait_event":{"name":"e","timout":"1s"}}]}`,
			path: "steps[0].wait_event.timout",
		},
		"sub_orchestration": {
			yaml: "name: a\nversion: 1\nsteps:\n  - sub_orchestration: { name: c, inptu: 1 }\n",
			json: `{"name":"a","version":1,"steps":[{"sub_orchestration":{"name":"c","inptu":1}}]}`,
			path: "steps[0].sub_orchestration.inptu",
		},
		"for_each in a parallel": {
			yaml: "name: a\nversion: 1\nsteps:\n  - parallel:\n      - for_each: { items: [1], step: [], steps: [ { return: 1 } ] }\n",
			json: `{"name":"a","version":1,"steps":[{"parallel":[{"for_each":{"items":[1],"step":[],"steps":[{"return":1}]}}]}]}`,
			path: "steps[0].parallel[0].for_each.step",
		},
		"continue_as_new": {
			yaml: "name: a\nversion: 1\nsteps:\n  - continue_as_new: { input: 1, inputs: 2 }\n",
			json: `{"name":"a","version":1,"steps":[{"continue_as_new":{"input":1,"inputs":2}}]}`,
			path: "steps[0].continue_as_new.inputs",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, doc := range []string{tc.yaml, tc.json} {
				require.Equal(t, []FieldError{{Path: tc.path, Reason: "unknown field"}}, validationErrors(t, doc), doc)
			}
		})
	}
}

// TestParseDefinitionNeedsStepLists checks that steps, branches and for_each bodies are
// lists of steps: null is not an empty list.
func TestParseDefinitionNeedsStepLists(t *testing.T) {
	t.Parallel()
	for doc, path := range map[string]string{
		"name: a\nversion: 1\nsteps:\n":                                            "steps",
		"name: a\nversion: 1\nsteps: { return: 1 }\n":                              "steps",
		"name: a\nversion: 1\nsteps:\n  - parallel:\n":                             "steps[0].parallel",
		"name: a\nversion: 1\nsteps:\n  - for_each: { items: [1], steps: null }\n": "steps[0].for_each.steps",
	} {
		require.Equal(t, []FieldError{{Path: path, Reason: "must be a list of steps"}}, validationErrors(t, doc), doc)
	}
}

func TestParseDefinitionRejectsBadExpressions(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ doc, path, reason string }{
		"syntax": {
			doc:  "name: a\nversion: 1\nsteps:\n  - return: ${ 1 + }\n",
			path: "steps[0].return", reason: "invalid expression \"1 +\"",
		},
		"unterminated": {
			doc:  "name: a\nversion: 1\nsteps:\n  - return: \"x ${ input \"\n",
			path: "steps[0].return", reason: "unterminated expression",
		},
		"item outside for_each": {
			doc:  "name: a\nversion: 1\nsteps:\n  - return: ${ item }\n",
			path: "steps[0].return", reason: "undeclared reference to 'item'",
		},
		"unknown variable": {
			doc:  "name: a\nversion: 1\nsteps:\n  - activity: { name: x, task_queue: q, input: { a: [ \"${ secrets }\" ] } }\n",
			path: "steps[0].activity.input.a[0]", reason: "undeclared reference to 'secrets'",
		},
		"too long": {
			doc:  "name: a\nversion: 1\nsteps:\n  - return: ${ " + strings.Repeat("1 + ", MaxExpressionSize/4) + "1 }\n",
			path: "steps[0].return", reason: fmt.Sprintf("expression is longer than %d bytes", MaxExpressionSize),
		},
		"empty": {
			doc:  "name: a\nversion: 1\nsteps:\n  - return: ${ }\n",
			path: "steps[0].return", reason: "empty expression ${}",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			errs := validationErrors(t, tc.doc)
			require.Len(t, errs, 1)
			require.Equal(t, tc.path, errs[0].Path)
			require.Contains(t, errs[0].Reason, tc.reason)
		})
	}
}

func TestParseDefinitionLimits(t *testing.T) {
	t.Parallel()
	t.Run("depth", func(t *testing.T) {
		t.Parallel()
		step := "set: { x: 1 }"
		for range MaxDepth + 1 {
			step = "parallel: [ { " + step + " } ]"
		}
		errs := validationErrors(t, "name: a\nversion: 1\nsteps:\n  - "+step+"\n")
		path := "steps[0]" + strings.Repeat(".parallel[0]", MaxDepth) + ".parallel"
		require.Equal(t, []FieldError{{Path: path, Reason: fmt.Sprintf("nesting deeper than %d levels", MaxDepth)}}, errs)
	})
	t.Run("steps", func(t *testing.T) {
		t.Parallel()
		var b strings.Builder
		b.WriteString("name: a\nversion: 1\nsteps:\n")
		for range MaxSteps + 5 {
			b.WriteString("  - set: { x: 1 }\n")
		}
		errs := validationErrors(t, b.String())
		require.Equal(t, []FieldError{{Path: fmt.Sprintf("steps[%d]", MaxSteps), Reason: fmt.Sprintf("more than %d steps in the definition", MaxSteps)}}, errs)
	})
	t.Run("ten thousand levels", func(t *testing.T) {
		t.Parallel()
		deep := map[string]string{
			"yaml":  "name: a\nversion: 1\nsteps:\n  - return: " + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + "\n",
			"json":  `{"name":"a","version":1,"steps":[{"return":` + strings.Repeat(`{"a":`, 10_000) + "1" + strings.Repeat("}", 10_000) + `}]}`,
			"steps": "name: a\nversion: 1\nsteps:\n  - " + strings.Repeat("parallel: [ { ", 10_000) + "return: 1" + strings.Repeat(" } ]", 10_000) + "\n",
		}
		for format, doc := range deep {
			errs := validationErrors(t, doc)
			require.Len(t, errs, 1, format)
			require.Regexp(t, `^not a YAML or JSON document: .*(nested more than 100 levels|exceeded max depth)`, errs[0].Reason, format)
		}
	})
	t.Run("size", func(t *testing.T) {
		t.Parallel()
		errs := validationErrors(t, "name: a\n#"+strings.Repeat("x", MaxDefinitionSize))
		require.Equal(t, []FieldError{{Reason: fmt.Sprintf("definition is larger than %d bytes", MaxDefinitionSize)}}, errs)
	})
}

func TestValidationErrorMessage(t *testing.T) {
	t.Parallel()
	err := &ValidationError{Errors: []FieldError{{Path: "steps[3].race[1].timer", Reason: `"10 parsecs" is not a duration`}, {Reason: "general"}}}
	require.Equal(t, `invalid definition: steps[3].race[1].timer: "10 parsecs" is not a duration; general`, err.Error())
}

func TestParseDefinitionTypedValues(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(yamlDoc(`
		name: typed
		version: 2.1
		steps:
		  - id: pay
		    activity:
		      name: charge
		      task_queue: payments
		      input: { amount: 5, who: "${ input.who }" }
		      retry: { max_attempts: 3, initial_interval: 2s, backoff_coefficient: 1.5, max_interval: 1m }
		      timeout: 30s
		  - wait_event: { name: go, timeout: 1d }
		  - for_each: { items: [1, 2], steps: [ { set: { v: "${ item }" } } ] }
		output: "${ steps.pay.output }"
	`)))
	require.NoError(t, err)
	require.Equal(t, "typed", def.Name)
	require.Equal(t, "2.1", def.Version)
	require.Len(t, def.Steps, 3)
	a := def.Steps[0].Activity
	require.Equal(t, "pay", def.Steps[0].ID)
	require.Equal(t, "charge", a.Name)
	require.Equal(t, "payments", a.TaskQueue)
	require.Equal(t, RetryPolicy{MaxAttempts: 3, InitialInterval: 2 * time.Second, BackoffCoefficient: 1.5, MaxInterval: time.Minute}, a.Retry)
	require.False(t, a.Input.IsConstant())
	require.Equal(t, "30s", a.Timeout.Source())
	require.Equal(t, "1d", def.Steps[1].WaitEvent.Timeout.Source())
	require.Equal(t, 1, def.Steps[2].ForEach.Concurrency)
	require.True(t, def.Steps[2].ForEach.Items.IsConstant())
	require.NotNil(t, def.Output)
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	r := RetryPolicy{MaxAttempts: 10, InitialInterval: time.Second, BackoffCoefficient: 2, MaxInterval: 10 * time.Second}
	var got []time.Duration
	for attempt := 1; attempt <= 6; attempt++ {
		got = append(got, r.delay(attempt))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, got)
}

func TestParseDurations(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "1h30m": 90 * time.Minute, "2d": 48 * time.Hour, " 250ms ": 250 * time.Millisecond} {
		got, err := parseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "10 parsecs", "-1s", "0", "d", "99999d", "-2d", "1.5d"} {
		_, err := parseDuration(in)
		require.Error(t, err, in)
	}
}

func TestDefinitionDocumentIsJSON(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte("name: d\nversion: 1\nsteps:\n  - n: 1\n    set: { n: 1 }\n"))
	require.Nil(t, def)
	require.Error(t, err, "n is an unknown field, not a YAML 1.1 boolean")
	def, err = ParseDefinition([]byte("name: d\nversion: 1\nsteps:\n  - set: { n: 1.50, yes: no }\n"))
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"d","version":1,"steps":[{"set":{"n":1.50,"yes":"no"}}]}`, string(def.Document()))
	again, err := ParseDefinition(def.Document())
	require.NoError(t, err)
	require.Equal(t, def.Document(), again.Document())
}
