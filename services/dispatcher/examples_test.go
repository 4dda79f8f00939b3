package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// exampleWorker answers the activities of the engine's example definitions.
// When slowCharge is set, charge-card never answers: it waits for its
// context, which a failed heartbeat cancels, and then returns a late result.
type exampleWorker struct {
	s          *system
	slowCharge bool
	cancelled  atomic.Int32 // charge-card handlers that saw their context end
}

func (w *exampleWorker) handle(ctx context.Context, task *store.WorkItem) (any, error) {
	var in map[string]any
	_ = json.Unmarshal(task.Input, &in)
	switch task.Name {
	case "reserve-stock":
		return map[string]any{"reservation_id": "res-1"}, nil
	case "charge-card":
		if w.slowCharge {
			w.s.blocked.Add(1)
			defer w.s.blocked.Add(-1)
			<-ctx.Done()
			w.cancelled.Add(1)
			return map[string]any{"receipt": "too-late"}, nil
		}
		return map[string]any{"receipt": "rcpt-9"}, nil
	case "ship":
		return map[string]any{"tracking": "TRK-1"}, nil
	case "build-report":
		return map[string]any{"url": "https://r/1"}, nil
	case "send-mail":
		return "sent", nil
	case "list-images":
		images := make([]string, 20)
		for i := range images {
			images[i] = string(rune('a' + i))
		}
		return map[string]any{"images": images}, nil
	case "resize":
		return map[string]any{"url": fmt.Sprintf("%v@%v", in["image"], in["width"])}, nil
	case "render-album-page":
		return map[string]any{"url": "https://album"}, nil
	}
	return nil, nil
}

var exampleQueues = []string{"warehouse", "payments", "reports", "mail", "media"}

func orderInput(lines, total int) map[string]any {
	items := make([]any, lines)
	for i := range items {
		items[i] = map[string]any{"sku": "sku", "price": 10, "quantity": 1}
	}
	return map[string]any{"order_id": "o-1", "customer": "c-1", "lines": items, "total": total, "address": "1 Main St"}
}

// TestExamples runs every example definition of the engine through a
// dispatcher, the store and a worker, on a real database.
func TestExamples(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, w *exampleWorker) *system {
		s := newSystem(t, examples(t)...)
		w.s = s
		s.startDispatcher(s.dispatcher(dispatcher.Config{}))
		s.worker(w.handle, exampleQueues...)
		return s
	}

	t.Run("order paid in time", func(t *testing.T) {
		t.Parallel()
		s := run(t, &exampleWorker{})
		s.start("o", "order-fulfilment", orderInput(2, 20), nil)
		in := s.waitDone("o")
		require.Equal(t, store.StatusCompleted, in.Status)
		require.JSONEq(t, `{"order":"o-1","receipt":"rcpt-9","tracking":"TRK-1"}`, string(in.Output))
		require.Contains(t, s.history("o", 1), "timer_created", "the payment raced a timer")
		require.Equal(t, "execution_completed", last(s.history("o", 1)))
	})

	t.Run("payment too slow: the timer wins and the worker is cancelled", func(t *testing.T) {
		t.Parallel()
		w := &exampleWorker{slowCharge: true}
		s := run(t, w)
		s.start("o", "order-fulfilment", orderInput(2, 20), nil)
		in := s.waitDone("o")
		require.Equal(t, store.StatusFailed, in.Status)
		require.Equal(t, "payment for order o-1 did not complete within 15 minutes", in.Error)
		history := s.history("o", 1)
		require.Contains(t, history, "activity_cancel_requested")
		// The worker saw its heartbeat fail and its context end; its late
		// result was refused and changed nothing.
		s.waitFor("the charge to be cancelled", func() bool { return w.cancelled.Load() == 1 })
		s.waitFor("the late result to be refused", func() bool { return s.workers[0].Stats().LeaseLosses == 1 })
		require.Equal(t, history, s.history("o", 1))
		require.Equal(t, store.StatusFailed, s.instance("o").Status)
	})

	t.Run("large order approved", func(t *testing.T) {
		t.Parallel()
		s := run(t, &exampleWorker{})
		s.start("o", "order-fulfilment", orderInput(2, 5000), nil)
		s.raise("o", "approval", map[string]any{"approved": true})
		in := s.waitDone("o")
		require.Equal(t, store.StatusCompleted, in.Status, in.Error)
		require.Contains(t, s.history("o", 1), "event_received")
	})

	t.Run("large order never approved", func(t *testing.T) {
		t.Parallel()
		s := run(t, &exampleWorker{})
		s.start("o", "order-fulfilment", orderInput(12, 120), nil)
		in := s.waitDone("o")
		require.Equal(t, store.StatusFailed, in.Status)
		require.Equal(t, "order o-1 was not approved", in.Error)
	})

	t.Run("nightly report continues as new", func(t *testing.T) {
		t.Parallel()
		s := run(t, &exampleWorker{})
		s.start("n", "nightly-report", map[string]any{"day": 1, "last_day": 5, "tenant": "t", "recipients": []any{"a@b"}, "sent": 0}, nil)
		in := s.waitDone("n")
		require.Equal(t, store.StatusCompleted, in.Status, in.Error)
		require.Equal(t, int64(5), in.CurrentExecutionID)
		require.JSONEq(t, `{"last_day":5,"reports":5}`, string(in.Output))
		require.Equal(t, []string{
			"execution_started", "activity_scheduled", "timer_created", "activity_completed",
			"activity_scheduled", "activity_completed", "execution_completed",
		}, s.history("n", 5))
		for exec := int64(1); exec < 5; exec++ {
			require.Equal(t, "continued_as_new", last(s.history("n", exec)))
		}
	})

	t.Run("fan out to a child", func(t *testing.T) {
		t.Parallel()
		s := run(t, &exampleWorker{})
		s.start("f", "album-fan-out", map[string]any{"album": "summer"}, nil)
		in := s.waitDone("f")
		require.Equal(t, store.StatusCompleted, in.Status, in.Error)
		require.JSONEq(t, `{"album":"summer","published":"https://album"}`, string(in.Output))
		child := s.instance("publish-summer")
		require.Equal(t, store.StatusCompleted, child.Status)
		require.Equal(t, "f", child.ParentInstanceID)
		var input struct {
			URLs [][]string `json:"urls"`
		}
		require.NoError(t, json.Unmarshal(child.Input, &input))
		require.Len(t, input.URLs, 20)
		require.Equal(t, []string{"a@256", "a@1024"}, input.URLs[0])
		require.Contains(t, s.history("f", 1), "child_completed")
	})
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
