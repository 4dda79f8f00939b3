package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func readExample(t testing.TB, name string) string {
	doc, err := os.ReadFile(filepath.Join("examples", name))
	require.NoError(t, err)
	return string(doc)
}

// examplesWorld loads every example definition.
func examplesWorld(t *testing.T) *world {
	files, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 4)
	w := newWorld(t)
	for _, f := range files {
		w.define(readExample(t, filepath.Base(f)))
	}
	return w
}

func orderWorker(payAfter time.Duration) func(ActivityTask, any) reply {
	return func(task ActivityTask, input any) reply {
		switch task.Name {
		case "reserve-stock":
			return reply{result: map[string]any{"reservation_id": "res-1"}}
		case "charge-card":
			return reply{result: map[string]any{"receipt": "rcpt-9"}, after: payAfter}
		case "ship":
			return reply{result: map[string]any{"tracking": "TRK-1"}}
		}
		return reply{result: nil}
	}
}

func orderInput(lines int, total int) map[string]any {
	items := make([]any, lines)
	for i := range items {
		items[i] = map[string]any{"sku": "sku", "price": 10, "quantity": 1}
	}
	return map[string]any{"order_id": "o-1", "customer": "c-1", "lines": items, "total": total, "address": "1 Main St"}
}

func TestExampleOrderFulfilment(t *testing.T) {
	t.Parallel()
	t.Run("small order paid in time", func(t *testing.T) {
		t.Parallel()
		w := examplesWorld(t)
		w.worker = orderWorker(time.Minute)
		w.start("o", "order-fulfilment", orderInput(2, 20))
		w.run()
		require.Equal(t, Outcome{Status: StatusCompleted, Output: json.RawMessage(`{"order":"o-1","receipt":"rcpt-9","tracking":"TRK-1"}`)}, w.outcome("o"))
		w.checkReplay()
	})
	t.Run("payment too slow", func(t *testing.T) {
		t.Parallel()
		w := examplesWorld(t)
		w.worker = orderWorker(time.Hour)
		w.start("o", "order-fulfilment", orderInput(2, 20))
		w.run()
		out := w.outcome("o")
		require.Equal(t, StatusFailed, out.Status)
		require.Equal(t, "payment for order o-1 did not complete within 15 minutes", out.Failure.Message)
		require.Equal(t, []string{"o/1/5"}, w.cancelled, "the charge lost the race")
		require.Contains(t, w.summary("o"), `9 schedule release-stock #1 "res-1"`)
		w.checkReplay()
	})
	t.Run("large order approved before the wait", func(t *testing.T) {
		t.Parallel()
		w := examplesWorld(t)
		w.worker = orderWorker(time.Minute)
		w.start("o", "order-fulfilment", orderInput(2, 5000))
		w.at(time.Second, "o", EventRaisedMessage{Name: "approval", Payload: json.RawMessage(`{"approved":true}`)})
		w.run()
		require.Equal(t, StatusCompleted, w.outcome("o").Status)
		w.checkReplay()
	})
	t.Run("large order never approved", func(t *testing.T) {
		t.Parallel()
		w := examplesWorld(t)
		w.worker = orderWorker(time.Minute)
		w.start("o", "order-fulfilment", orderInput(12, 120))
		w.run()
		out := w.outcome("o")
		require.Equal(t, StatusFailed, out.Status)
		require.Equal(t, "order o-1 was not approved", out.Failure.Message)
		require.Contains(t, w.summary("o"), `10 schedule release-stock #1 "res-1"`)
		w.checkReplay()
	})
}

func TestExampleNightlyReport(t *testing.T) {
	t.Parallel()
	w := examplesWorld(t)
	w.worker = func(task ActivityTask, input any) reply {
		if task.Name == "build-report" {
			return reply{result: map[string]any{"url": "https://r/1"}}
		}
		return reply{result: "sent"}
	}
	w.start("n", "nightly-report", map[string]any{"day": 1, "last_day": 5, "tenant": "t", "recipients": []any{"a@b"}, "sent": 0})
	w.run()
	inst := w.instances["n"]
	require.Equal(t, int64(5), inst.exec)
	require.Equal(t, Outcome{Status: StatusCompleted, Output: json.RawMessage(`{"last_day":5,"reports":5}`)}, w.outcome("n"))
	require.Equal(t, []string{
		`1 started {"day":5,"last_day":5,"recipients":["a@b"],"sent":4,"tenant":"t"}`,
		`2 schedule build-report #1 {"day":5,"tenant":"t"}`,
		`3 timer timeout 02:00:08`,
		`4 completed 2 {"url":"https://r/1"}`,
		`5 schedule send-mail #1 {"link":"https://r/1","subject":"Report for day 5","to":["a@b"]}`,
		`6 completed 5 "sent"`,
		`7 completed {"last_day":5,"reports":5}`,
	}, w.summary("n"))
	w.checkReplay()
}

func TestExampleFanOut(t *testing.T) {
	t.Parallel()
	w := examplesWorld(t)
	w.worker = func(task ActivityTask, input any) reply {
		switch task.Name {
		case "list-images":
			images := make([]any, 20)
			for i := range images {
				images[i] = string(rune('a' + i))
			}
			return reply{result: map[string]any{"images": images}}
		case "resize":
			in := input.(map[string]any)
			return reply{result: map[string]any{"url": in["image"].(string) + "@" + json.Number(func() string { b, _ := json.Marshal(in["width"]); return string(b) }()).String()}}
		case "render-album-page":
			return reply{result: map[string]any{"url": "https://album"}}
		}
		return reply{}
	}
	w.start("f", "album-fan-out", map[string]any{"album": "summer"})
	w.run()
	require.Equal(t, Outcome{Status: StatusCompleted, Output: json.RawMessage(`{"album":"summer","published":"https://album"}`)}, w.outcome("f"))
	child := w.instances["publish-summer"]
	require.NotNil(t, child)
	started := child.history[0].(ExecutionStarted)
	var in struct {
		Urls [][]string `json:"urls"`
	}
	require.NoError(t, json.Unmarshal(started.Input, &in))
	require.Len(t, in.Urls, 20)
	require.Equal(t, []string{"a@256", "a@1024"}, in.Urls[0])
	w.checkReplay()
}

// TestPackageDocExample runs the complete example of the package documentation, so
// that the documentation cannot drift from the language.
func TestPackageDocExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var lines []string
	inBlock := false
	for _, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "//\tname: order"):
			inBlock = true
			lines = append(lines, strings.TrimPrefix(l, "//\t"))
		case inBlock && strings.HasPrefix(l, "//\t"):
			lines = append(lines, strings.TrimPrefix(l, "//\t"))
		case inBlock:
			inBlock = false
		}
	}
	require.NotEmpty(t, lines, "doc.go has no example definition")
	w := newWorld(t, strings.Join(lines, "\n"))
	w.worker = func(task ActivityTask, input any) reply {
		if task.Name == "charge-card" {
			return reply{result: "receipt-1"}
		}
		return reply{result: map[string]any{"tracking": "T-1"}}
	}
	w.start("doc", "order", map[string]any{"order_id": "o-7", "amount": 12})
	w.at(time.Hour, "doc", EventRaisedMessage{Name: "approved"})
	w.run()
	require.Equal(t, Outcome{Status: StatusCompleted, Output: json.RawMessage(`{"receipt":"receipt-1","tracking":"T-1"}`)}, w.outcome("doc"))
	w.checkReplay()
}
