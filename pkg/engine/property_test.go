package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// genDefinition writes a random valid definition as JSON.
type genDefinition struct {
	rng   *rand.Rand
	steps int
	ids   int
}

func (g *genDefinition) document() string {
	def := map[string]any{
		"name":    "gen",
		"version": "1",
		"steps": append(g.list(0, false, 1+g.rng.IntN(4)), map[string]any{
			"if":              "${ input.round < 2 }",
			"continue_as_new": map[string]any{"input": map[string]any{"round": "${ input.round + 1 }"}},
		}),
		"output": "${ vars }",
	}
	doc, err := json.Marshal(def)
	if err != nil {
		panic(err)
	}
	return string(doc)
}

func (g *genDefinition) list(depth int, loop bool, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = g.step(depth, loop)
	}
	return out
}

func (g *genDefinition) step(depth int, loop bool) map[string]any {
	g.steps++
	s := map[string]any{}
	if g.rng.IntN(3) == 0 {
		g.ids++
		s["id"] = fmt.Sprintf("s%d", g.ids)
	}
	if g.rng.IntN(6) == 0 {
		s["if"] = fmt.Sprintf("${ size(vars) %% 2 == %d }", g.rng.IntN(2))
	}
	if g.rng.IntN(4) == 0 {
		s["continue_on_error"] = true
	}
	input := "${ input }"
	if loop {
		input = "${ [item, index] }"
	}
	kinds := 8
	if depth >= 2 || g.steps > 25 {
		kinds = 5 // no more nesting
	}
	switch g.rng.IntN(kinds) {
	case 0, 1:
		a := map[string]any{"name": fmt.Sprintf("act%d", g.rng.IntN(3)), "task_queue": "q", "input": input}
		if g.rng.IntN(2) == 0 {
			a["retry"] = map[string]any{"max_attempts": 1 + g.rng.IntN(3), "initial_interval": "2s"}
		}
		if g.rng.IntN(3) == 0 {
			a["timeout"] = fmt.Sprintf("%ds", 2+g.rng.IntN(5))
		}
		s["activity"] = a
	case 2:
		s["timer"] = fmt.Sprintf("%ds", 1+g.rng.IntN(10))
	case 3:
		w := map[string]any{"name": fmt.Sprintf("ev%d", g.rng.IntN(2))}
		if g.rng.IntN(2) == 0 {
			w["timeout"] = fmt.Sprintf("%ds", 1+g.rng.IntN(20))
		}
		s["wait_event"] = w
	case 4:
		if g.rng.IntN(2) == 0 {
			s["set"] = map[string]any{fmt.Sprintf("v%d", g.rng.IntN(4)): input}
		} else {
			s["sub_orchestration"] = map[string]any{"name": "leaf", "input": input}
		}
	case 5:
		s["parallel"] = g.list(depth+1, loop, 1+g.rng.IntN(3))
	case 6:
		s["race"] = g.list(depth+1, loop, 2+g.rng.IntN(2))
	case 7:
		s["for_each"] = map[string]any{
			"items":       []any{1, 2, 3, 4}[:1+g.rng.IntN(4)],
			"concurrency": 1 + g.rng.IntN(3),
			"steps":       g.list(depth+1, true, 1+g.rng.IntN(2)),
		}
	}
	return s
}

const leafDoc = `
name: leaf
version: 1
steps:
  - activity: { name: leafwork, task_queue: q, input: "${ input }" }
`

// TestPropertyReplayReproducesEveryDecision runs random definitions with random
// completion orders, failures, events and cancellations, then replays every turn from
// the final history and requires identical decisions.
func TestPropertyReplayReproducesEveryDecision(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(6 * time.Second)
	runs, turns := 0, 0
	statuses := map[Status]int{}
	// At least minRuns seeds whatever the machine's load, more while time allows.
	const minRuns = 50
	for seed := uint64(1); seed <= 3000 && (seed <= minRuns || time.Now().Before(deadline)); seed++ {
		runs++
		rng := rand.New(rand.NewPCG(seed, seed*7919))
		g := &genDefinition{rng: rng}
		doc := g.document()
		w := newWorld(t, leafDoc)
		w.maxTurns = 20_000
		w.define(doc)
		w.rng = rng
		w.worker = func(task ActivityTask, input any) reply {
			switch rng.IntN(8) {
			case 0:
				return reply{fail: &Failure{Message: "random failure"}}
			case 1:
				return reply{never: true}
			}
			return reply{result: map[string]any{"in": input, "n": rng.IntN(100)}, after: time.Duration(rng.IntN(8)) * time.Second}
		}
		w.start("root", "gen", map[string]any{"round": 0})
		for i := range rng.IntN(4) {
			w.at(time.Duration(rng.IntN(30))*time.Second, "root", EventRaisedMessage{Name: fmt.Sprintf("ev%d", rng.IntN(2)), Payload: mustJSON(t, i)})
		}
		if rng.IntN(5) == 0 {
			w.at(time.Duration(rng.IntN(40))*time.Second, "root", CancelMessage{Reason: "random"})
		}
		w.run()
		if t.Failed() {
			t.Fatalf("seed %d, definition %s", seed, doc)
		}
		w.checkReplay()
		turns += len(w.turns)
		statuses[w.outcome("root").Status]++
		if t.Failed() {
			t.Fatalf("seed %d, definition %s", seed, doc)
		}
	}
	t.Logf("%d runs, %d turns replayed, final statuses %v", runs, turns, statuses)
	for _, s := range []Status{StatusCompleted, StatusFailed, StatusCancelled} {
		require.Positive(t, statuses[s], "no random run ended %s", s)
	}
}

// TestPropertyNoInputPanics feeds random histories and messages, most of them nonsense,
// to Turn; a recovered panic would show as an internal failure.
func TestPropertyNoInputPanics(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(42, 4242))
	var defs []*Definition
	for range 10 {
		g := &genDefinition{rng: rng}
		def, err := ParseDefinition([]byte(g.document()))
		require.NoError(t, err)
		defs = append(defs, def)
	}
	payloads := []json.RawMessage{nil, raw(`null`), raw(`{"round":1}`), raw(`[1,2]`), raw(`"x"`), raw(`{bad`), raw(`1e999`)}
	randomEvent := func(id int64) Event {
		p := payloads[rng.IntN(len(payloads))]
		ref := int64(rng.IntN(int(id) + 2))
		switch rng.IntN(17) {
		case 0:
			return ExecutionStarted{ID: id, Input: p}
		case 1:
			return ActivityScheduled{ID: id, Name: fmt.Sprintf("act%d", rng.IntN(3)), TaskQueue: "q", Attempt: rng.IntN(3)}
		case 2:
			return ActivityCompleted{ID: id, ScheduledID: ref, Result: p}
		case 3:
			return ActivityFailed{ID: id, ScheduledID: ref}
		case 4:
			return ActivityCancelRequested{ID: id, ScheduledID: ref}
		case 5:
			return TimerCreated{ID: id, Purpose: []string{"timer", "retry", "timeout", "event_timeout"}[rng.IntN(4)]}
		case 6:
			return TimerFired{ID: id, TimerID: ref}
		case 7:
			return EventReceived{ID: id, Name: fmt.Sprintf("ev%d", rng.IntN(2)), Payload: p}
		case 8:
			return ChildScheduled{ID: id, Name: "leaf", InstanceID: "x"}
		case 9:
			return ChildCompleted{ID: id, ScheduledID: ref, Result: p}
		case 10:
			return ChildFailed{ID: id, ScheduledID: ref}
		case 11:
			return ChildCancelRequested{ID: id, ScheduledID: ref}
		case 12:
			return CancelRequested{ID: id}
		case 13:
			return ContinuedAsNew{ID: id}
		case 14:
			return ExecutionCompleted{ID: id}
		case 15:
			return ExecutionFailed{ID: id}
		}
		return ExecutionCancelled{ID: id}
	}
	randomMessage := func() Message {
		p := payloads[rng.IntN(len(payloads))]
		ref := int64(rng.IntN(10))
		switch rng.IntN(8) {
		case 0:
			return StartMessage{Input: p}
		case 1:
			return ActivityCompletedMessage{ExecutionID: 1, ActivityID: ref, Attempt: rng.IntN(3), Result: p}
		case 2:
			return ActivityFailedMessage{ExecutionID: 1, ActivityID: ref, Attempt: rng.IntN(3)}
		case 3:
			return TimerFiredMessage{ExecutionID: 1, TimerID: ref}
		case 4:
			return EventRaisedMessage{Name: "ev0", Payload: p}
		case 5:
			return ChildCompletedMessage{ExecutionID: 1, ScheduledID: ref, ChildInstanceID: "x", Result: p}
		case 6:
			return ChildFailedMessage{ExecutionID: 1, ScheduledID: ref, ChildInstanceID: "x"}
		}
		return CancelMessage{}
	}
	for range 3000 {
		def := defs[rng.IntN(len(defs))]
		var history []Event
		if rng.IntN(4) > 0 {
			history = append(history, ExecutionStarted{ID: 1, Input: payloads[rng.IntN(len(payloads))]})
		}
		for range rng.IntN(12) {
			history = append(history, randomEvent(int64(len(history)+1)))
		}
		msgs := []Message{StartMessage{Input: raw(`{"round":0}`)}}
		for range rng.IntN(6) {
			msgs = append(msgs, randomMessage())
		}
		d, err := Turn(def, TurnInput{InstanceID: "p", ExecutionID: 1, History: history, Messages: msgs, Now: epoch})
		require.NoError(t, err)
		if d.Outcome.Failure != nil {
			require.NotEqual(t, "internal", d.Outcome.Failure.Kind, d.Outcome.Failure.Message)
		}
		for i, e := range d.Events {
			require.Equal(t, int64(len(history)+i+1), e.EventID())
		}
	}
}

// TestDeterministicMapIteration checks that comprehensions over objects, from data or
// from literals, iterate in sorted key order, so that decisions are stable.
func TestDeterministicMapIteration(t *testing.T) {
	t.Parallel()
	def, err := ParseDefinition([]byte(`
name: maps
version: 1
steps:
  - return: "${ [input.map(k, k), {'z': 1, 'b': 2, 'm': 3, 'a': 4}.map(k, k), input.filter(k, k != 'q')] }"
`))
	require.NoError(t, err)
	input := map[string]any{}
	for i := range 26 {
		input[string(rune('a'+i))] = i
	}
	want := `[["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r","s","t","u","v","w","x","y","z"],["a","b","m","z"],["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","r","s","t","u","v","w","x","y","z"]]`
	for range 20 {
		d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{StartMessage{Input: mustJSON(t, input)}}})
		require.NoError(t, err)
		require.Equal(t, want, string(d.Outcome.Output))
	}
}
