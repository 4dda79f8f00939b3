package engine

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// doublingDefinition sets n variables, each a list of the previous one twice: every
// step is cheap, and the last value is 2^n times the first.
func doublingDefinition(n int) string {
	var b strings.Builder
	b.WriteString("name: doubling\nversion: 1\nsteps:\n  - set: { v1: \"0123456789abcdef\" }\n")
	for i := 2; i <= n; i++ {
		fmt.Fprintf(&b, "  - set: { v%d: \"${ [vars.v%d, vars.v%d] }\" }\n", i, i-1, i-1)
	}
	fmt.Fprintf(&b, "  - return: \"${ vars.v%d }\"\n", n)
	return b.String()
}

// childMemoryCap is the live heap a child test process may reach before it kills itself.
const childMemoryCap = 256 << 20

// runCapped runs the test named name again in a child process whose memory is capped:
// its address space (when the race detector, which reserves terabytes of it, is off)
// and its live heap, watched; past either, the child dies. It returns the child's
// output and error.
func runCapped(t *testing.T, name string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ORCHARD_CAPPED_CHILD="+name)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// inCappedChild reports whether this process is the capped child running name; it caps
// the process when it is.
func inCappedChild(t *testing.T, name string) bool {
	if os.Getenv("ORCHARD_CAPPED_CHILD") != name {
		return false
	}
	if !raceEnabled {
		limit := &syscall.Rlimit{Cur: 2 << 30, Max: 2 << 30}
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, limit))
	}
	go func() {
		// A watchdog: it samples the heap on a period, it waits for nothing.
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for range time.Tick(5 * time.Millisecond) {
			metrics.Read(sample)
			if heap := sample[0].Value.Uint64(); heap > childMemoryCap {
				fmt.Fprintf(os.Stderr, "memory cap: live heap %d bytes passed %d\n", heap, childMemoryCap)
				os.Exit(3)
			}
		}
	}()
	return true
}

// TestDoublingValuesFailTheExecutionInsideAMemoryCap runs the 30-step doubling
// definition in a memory-capped process: the execution must fail on the value limit,
// and the process must live.
func TestDoublingValuesFailTheExecutionInsideAMemoryCap(t *testing.T) {
	const name = "TestDoublingValuesFailTheExecutionInsideAMemoryCap"
	if inCappedChild(t, name) {
		def, err := ParseDefinition([]byte(doublingDefinition(30)))
		require.NoError(t, err)
		d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{StartMessage{Input: raw(`{}`)}}})
		require.NoError(t, err)
		require.Equal(t, StatusFailed, d.Outcome.Status)
		require.Equal(t, FailureKindLimit, d.Outcome.Failure.Kind)
		fmt.Println("CHILD OUTCOME:", d.Outcome.Failure.Message)
		return
	}
	t.Parallel()
	out, err := runCapped(t, name)
	require.NoError(t, err, "the capped child died:\n%s", out)
	require.Contains(t, out, "CHILD OUTCOME: steps[16].set.v17: ${ [vars.v16, vars.v16] }: the value is larger than the limit of 1048576 bytes")
}

// TestValueLimits: each way a value is built stops at the tenant's limit, and the
// turn's state stops at its own.
func TestValueLimits(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 600)
	cases := map[string]struct {
		doc    string
		input  string
		limits Limits
		want   string // the failure's message; empty: the execution completes
	}{
		"an object template sharing a variable": {
			doc: `
name: l
version: 1
steps:
  - set: { a: "${ input.s }" }
  - return: { x: "${ vars.a }", y: "${ vars.a }" }
`,
			input:  `{"s":"` + big + `"}`,
			limits: Limits{MaxValueBytes: 1000},
			want:   "steps[1].return.y: ${ vars.a }: the value is larger than the limit of 1000 bytes",
		},
		"a map literal sharing a variable": {
			doc: `
name: l
version: 1
steps:
  - set: { a: "${ input }" }
  - set: { b: "${ {'x': vars.a, 'y': vars.a} }" }
`,
			input:  `{"s":"` + big + `"}`,
			limits: Limits{MaxValueBytes: 1000},
			want:   "steps[1].set.b: ${ {'x': vars.a, 'y': vars.a} }: the value is larger than the limit of 1000 bytes",
		},
		"a string template": {
			doc: `
name: l
version: 1
steps:
  - return: "${ input.s }-${ input.s }"
`,
			input:  `{"s":"` + big + `"}`,
			limits: Limits{MaxValueBytes: 1000},
			want:   "steps[0].return: ${ input.s }: the value is larger than the limit of 1000 bytes",
		},
		"a parallel step's output": {
			doc: `
name: l
version: 1
steps:
  - id: both
    parallel:
      - set: { a: "${ input.s }" }
      - set: { b: "${ input.s }" }
`,
			input:  `{"s":"` + big + `"}`,
			limits: Limits{MaxValueBytes: 1000},
			want:   "steps.both.output: the value is larger than the limit of 1000 bytes",
		},
		"the input": {
			doc: `
name: l
version: 1
steps:
  - return: 1
`,
			input:  `{"s":"` + big + big + `"}`,
			limits: Limits{MaxValueBytes: 1000},
			want:   "input: the value is larger than the limit of 1000 bytes",
		},
		"variables replaced stay within the state": {
			doc: `
name: l
version: 1
steps:
  - set: { a: "${ input.s }" }
  - set: { a: "${ input.s }" }
  - set: { a: "${ input.s }" }
`,
			input:  `{"s":"` + big + `"}`,
			limits: Limits{MaxStateBytes: 2000},
		},
		"variables kept pass the state": {
			doc: `
name: l
version: 1
steps:
  - set: { a: "${ input.s }" }
  - set: { b: "${ input.s }" }
  - set: { c: "${ input.s }" }
`,
			input:  `{"s":"` + big + `"}`,
			limits: Limits{MaxStateBytes: 2000},
			want:   "the turn's state is larger than the limit of 2000 bytes",
		},
		"many iterations pass the state": {
			doc: `
name: l
version: 1
steps:
  - for_each:
      items: "${ input.items }"
      concurrency: 1000
      steps:
        - set: { x: 1 }
`,
			input:  `{"items":[` + strings.TrimSuffix(strings.Repeat("0,", 500), ",") + `]}`,
			limits: Limits{MaxStateBytes: 8000},
			want:   "the turn's state is larger than the limit of 8000 bytes",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			def, err := ParseDefinition([]byte(tc.doc))
			require.NoError(t, err)
			d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Limits: tc.limits,
				Messages: []Message{StartMessage{Input: raw(tc.input)}}})
			require.NoError(t, err)
			if tc.want == "" {
				require.Equal(t, StatusCompleted, d.Outcome.Status, "%+v", d.Outcome.Failure)
				return
			}
			require.Equal(t, StatusFailed, d.Outcome.Status)
			require.Equal(t, Failure{Kind: FailureKindLimit, Message: tc.want}, *d.Outcome.Failure)
		})
	}
}

// TestStoppedTurn: a turn whose Stop is closed gives up with ErrTurnStopped, even in
// the middle of a long step.
func TestStoppedTurn(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(`
name: l
version: 1
steps:
  - for_each:
      items: "${ input.items }"
      steps:
        - set: { x: "${ item }" }
`))
	require.NoError(t, err)
	stop := make(chan struct{})
	close(stop)
	_, err = Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Stop: stop,
		Messages: []Message{StartMessage{Input: raw(`{"items":[1,2,3]}`)}}})
	require.ErrorIs(t, err, ErrTurnStopped)
}
