package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

const benchDoc = `
name: bench
version: 1
steps:
  - id: each
    for_each:
      items: "${ input.items }"
      steps:
        - id: work
          activity: { name: work, task_queue: q, input: { item: "${ item }", at: "${ index }" } }
        - if: "${ steps.work.output.ok }"
          set: { last: "${ index }" }
output: "${ size(steps.each.output) }"
`

// benchHistory returns a definition and a history of n events ending with an
// outstanding activity, plus the message that completes it. It writes the history the
// definition produces: one activity per item, scheduled then completed.
func benchHistory(b *testing.B, n int) (*Definition, []Event, Message) {
	def, err := ParseDefinition([]byte(benchDoc))
	require.NoError(b, err)
	items := make([]any, n/2+1)
	for i := range items {
		items[i] = i
	}
	history := []Event{ExecutionStarted{ID: 1, Name: "bench", Version: "1", Input: mustJSON(b, map[string]any{"items": items})}}
	for i := 0; len(history) < n; i++ {
		id := int64(len(history) + 1)
		history = append(history, ActivityScheduled{ID: id, Name: "work", TaskQueue: "q", Input: mustJSON(b, map[string]any{"item": i, "at": i}), Attempt: 1})
		if len(history) < n {
			history = append(history, ActivityCompleted{ID: id + 1, ScheduledID: id, Result: raw(`{"ok":true,"size":1234}`)})
		}
	}
	last := history[n-1].(ActivityScheduled)
	return def, history, ActivityCompletedMessage{ExecutionID: 1, ActivityID: last.ID, Attempt: 1, Result: raw(`{"ok":true,"size":1234}`)}
}

// BenchmarkTurn measures a turn that replays a history of n events and applies one
// activity result. ns/event shows whether replay stays linear in the history length.
func BenchmarkTurn(b *testing.B) {
	for _, n := range []int{10, 1_000, 10_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			def, history, msg := benchHistory(b, n)
			in := TurnInput{InstanceID: "b", ExecutionID: 1, History: history, Messages: []Message{msg}, Now: epoch}
			d, err := Turn(def, in)
			require.NoError(b, err)
			require.Len(b, d.Activities, 1, "the history replays and the turn schedules the next item")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := Turn(def, in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/event")
		})
	}
}

// BenchmarkParseDefinition measures parsing, validating and compiling the order example.
func BenchmarkParseDefinition(b *testing.B) {
	doc := []byte(readExample(b, "order_fulfilment.yaml"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDefinition(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEventCodec measures encoding and decoding one activity result event.
func BenchmarkEventCodec(b *testing.B) {
	e := ActivityCompleted{ID: 7, ScheduledID: 6, Result: raw(`{"ok":true,"size":1234}`)}
	b.ReportAllocs()
	for b.Loop() {
		kind, payload, err := EncodeEvent(e)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeEvent(7, kind, payload); err != nil {
			b.Fatal(err)
		}
	}
}
