package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStepResultsInsideForEach pins how expressions see steps.<id> inside for_each
// bodies, where iterations keep their step results apart from the root's: as objects in
// every form (whole, indexed, compared, iterated, rendered into text), layered over the
// root's results, and kept in a map once an iteration records many.
func TestStepResultsInsideForEach(t *testing.T) {
	many := ""
	for i := range 10 {
		many += fmt.Sprintf("\n        - { id: m%d, set: { m%d: %d } }", i, i, i)
	}
	w := newWorld(t, yamlDoc(`
name: scopes
version: 1
steps:
  - id: top
    set: { t: 1 }
  - id: each
    for_each:
      items: "${ [1, 2] }"
      steps:
        - id: w
          activity: { name: w, task_queue: q, input: "${ item }" }
        - id: sk
          if: "${ index == 1 }"
          set: { n: 1 }`+many+`
        - set:
            a: "${ [steps.w, steps.sk] }"
            b: "${ {'x': steps.w} }"
            c: "${ steps.w == {'output': {'echo': item}, 'error': null} }"
            d: "${ steps.sk.map(k, k) }"
            e: "${ size(steps.w) + size(steps.sk) }"
            f: "${ has(steps.sk.skipped) }"
            g: "${ steps['w']['output'] }"
            h: "t ${ steps.sk }"
            i: "${ steps.top.output }"
            j: "${ steps.m9.output.m9 + steps.m0.output.m0 }"
            k: "${ size(steps) }"
output: "${ steps.each.output }"
`))
	w.start("s", "scopes", nil)
	w.run()
	out := w.outcome("s")
	require.Equal(t, StatusCompleted, out.Status, "%v", out.Failure)
	want := `[
		{"a":[{"error":null,"output":{"echo":1}},{"error":null,"output":null,"skipped":true}],"b":{"x":{"error":null,"output":{"echo":1}}},
		 "c":true,"d":["error","output","skipped"],"e":5,"f":true,"g":{"echo":1},"h":"t {\"error\":null,\"output\":null,\"skipped\":true}",
		 "i":{"t":1},"j":9,"k":13},
		{"a":[{"error":null,"output":{"echo":2}},{"error":null,"output":{"n":1}}],"b":{"x":{"error":null,"output":{"echo":2}}},
		 "c":true,"d":["error","output"],"e":4,"f":false,"g":{"echo":2},"h":"t {\"error\":null,\"output\":{\"n\":1}}",
		 "i":{"t":1},"j":9,"k":13}]`
	require.JSONEq(t, want, string(out.Output))
}

// TestVarsAndStepsAreSnapshots: a value taken from vars or steps is what they
// held at that moment. Storing it and changing them afterwards neither makes
// a cycle nor changes what was stored.
func TestVarsAndStepsAreSnapshots(t *testing.T) {
	w := newWorld(t, yamlDoc(`
name: snapshots
version: 1
steps:
  - id: first
    set: { a: 1 }
  - set: { before: "${ vars }", stepsBefore: "${ steps }" }
  - id: second
    set: { b: 2 }
output:
  vars: "${ vars }"
  steps: "${ steps.second.output }"
`))
	w.start("s", "snapshots", nil)
	w.run()
	out := w.outcome("s")
	require.Equal(t, StatusCompleted, out.Status, "%v", out.Failure)
	require.JSONEq(t, `{"vars":{"a":1,"b":2,"before":{"a":1},"stepsBefore":{"first":{"error":null,"output":{"a":1}}}},
		"steps":{"b":2}}`, string(out.Output))
}
