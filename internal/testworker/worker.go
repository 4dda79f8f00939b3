// Package testworker runs activity tasks straight from the store's worker
// queue: the stand-in for tenants' workers in end-to-end tests and
// benchmarks, until they go through the API and the SDK. It behaves like a
// real worker: it leases a task, heartbeats while the handler runs, cancels
// the handler's context as soon as a heartbeat fails (the task was cancelled
// or lost, seed 004), and completes or fails the task.
//
// It is for tests: it must never be used by a service.
package testworker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
)

// Handler runs one activity task. An error that is an engine.Failure (or
// *engine.Failure) fails the attempt with it; any other error fails it with
// kind "activity_failed".
type Handler func(ctx context.Context, task *store.WorkItem) (result any, err error)

// Config configures a Worker.
type Config struct {
	Store store.Runtime
	// TenantID restricts the worker to one tenant; empty serves all.
	TenantID   string
	TaskQueues []string
	Handler    Handler
	// Loops is the number of concurrent fetch → run → complete loops (default 4).
	Loops int
	// LeaseDuration is the lease asked for each task (default 1h).
	LeaseDuration time.Duration
	// Heartbeat is the interval of lease renewals while a handler runs
	// (default 20ms).
	Heartbeat time.Duration
	// Poll is the first wait of an idle loop before it fetches again; it
	// doubles with each empty pass, up to 32 × Poll (default 1ms).
	Poll time.Duration
}

// Worker runs activity tasks.
type Worker struct {
	cfg    Config
	cancel context.CancelFunc
	done   sync.WaitGroup

	completed, failed, emptyPolls, leaseLosses, running atomic.Int64
	// loopEmptyPolls counts each loop's empty passes.
	loopEmptyPolls []atomic.Int64
}

// Stats counts what a worker did.
type Stats struct {
	Completed, Failed, LeaseLosses int64
	// EmptyPolls counts the passes over every task queue that found nothing;
	// EmptyPollsByLoop counts them for each loop.
	EmptyPolls       int64
	EmptyPollsByLoop []int64
	// Running is the number of tasks fetched and not yet completed (or
	// failed, or lost): a task is counted in Completed, Failed or
	// LeaseLosses before it stops running.
	Running int64
}

// Start starts the worker's loops; they run until Stop or until ctx ends.
func Start(ctx context.Context, cfg Config) *Worker {
	if cfg.Loops == 0 {
		cfg.Loops = 4
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = time.Hour
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 20 * time.Millisecond
	}
	if cfg.Poll == 0 {
		cfg.Poll = time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Worker{cfg: cfg, cancel: cancel, loopEmptyPolls: make([]atomic.Int64, cfg.Loops)}
	for i := range cfg.Loops {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			w.loop(ctx, i)
		}()
	}
	return w
}

// Stop stops the loops and waits for them; running handlers see their
// context cancelled.
func (w *Worker) Stop() {
	w.cancel()
	w.done.Wait()
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	st := Stats{Completed: w.completed.Load(), Failed: w.failed.Load(), EmptyPolls: w.emptyPolls.Load(),
		LeaseLosses: w.leaseLosses.Load(), Running: w.running.Load(), EmptyPollsByLoop: make([]int64, len(w.loopEmptyPolls))}
	for i := range w.loopEmptyPolls {
		st.EmptyPollsByLoop[i] = w.loopEmptyPolls[i].Load()
	}
	return st
}

func (w *Worker) loop(ctx context.Context, n int) {
	q := n % len(w.cfg.TaskQueues)
	var wait time.Duration
	for ctx.Err() == nil {
		found := false
		// One pass over the queues, starting from a different one each time.
		for range w.cfg.TaskQueues {
			q = (q + 1) % len(w.cfg.TaskQueues)
			// One task at a time: a loop runs what it leases.
			items, err := w.cfg.Store.FetchWorkItems(ctx, &store.FetchWorkItemsParams{
				TenantID: w.cfg.TenantID, TaskQueue: w.cfg.TaskQueues[q], LeaseDuration: w.cfg.LeaseDuration, Max: 1,
			})
			if err == nil && len(items) == 1 {
				found = true
				w.running.Add(1)
				w.run(ctx, items[0])
				w.running.Add(-1)
			}
		}
		if found {
			wait = 0
		} else {
			w.emptyPolls.Add(1)
			w.loopEmptyPolls[n].Add(1)
			// Idle: wait longer after each empty pass, up to 32 × Poll.
			wait = min(max(2*wait, w.cfg.Poll), 32*w.cfg.Poll)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// run runs one task: the handler under a context that a failed heartbeat
// cancels, then the completion.
func (w *Worker) run(ctx context.Context, item *store.WorkItem) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	var beats sync.WaitGroup
	beats.Add(1)
	go func() {
		defer beats.Done()
		tick := time.NewTicker(w.cfg.Heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, err := w.cfg.Store.RenewWorkItemLease(ctx, &store.RenewWorkItemLeaseParams{Lease: item.Lease, Duration: w.cfg.LeaseDuration})
				if errors.Is(err, store.ErrLeaseLost) {
					cancel()
					return
				}
			}
		}
	}()
	result, herr := w.cfg.Handler(hctx, item)
	close(stop)
	beats.Wait()
	// After a failed heartbeat the late result is offered anyway: the store
	// must drop it.

	var msg engine.Message
	if herr != nil {
		f := engine.Failure{Kind: "activity_failed", Message: herr.Error()}
		var ef engine.Failure
		var pf *engine.Failure
		switch {
		case errors.As(herr, &ef):
			f = ef
		case errors.As(herr, &pf):
			f = *pf
		}
		msg = engine.ActivityFailedMessage{ExecutionID: item.ExecutionID, ActivityID: item.ActivityID, Attempt: item.Attempt, Failure: f}
	} else {
		raw, err := json.Marshal(result)
		if err != nil {
			msg = engine.ActivityFailedMessage{ExecutionID: item.ExecutionID, ActivityID: item.ActivityID, Attempt: item.Attempt,
				Failure: engine.Failure{Kind: "activity_failed", Message: "result is not JSON: " + err.Error(), NonRetryable: true}}
		} else {
			msg = engine.ActivityCompletedMessage{ExecutionID: item.ExecutionID, ActivityID: item.ActivityID, Attempt: item.Attempt, Result: raw}
		}
	}
	kind, payload, err := engine.EncodeMessage(msg)
	if err != nil {
		return
	}
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer acancel()
	err = w.cfg.Store.AckWorkItem(actx, &store.AckWorkItemParams{Lease: item.Lease, Result: &store.Message{Kind: kind, Payload: payload}})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		w.leaseLosses.Add(1)
	case err != nil:
		// Left to the lease: the task becomes visible again.
	case herr != nil:
		w.failed.Add(1)
	default:
		w.completed.Add(1)
	}
}
