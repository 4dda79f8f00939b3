package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"

	"github.com/orchardhq/orchard/internal/traceparent"
)

// Worker runs a tenant's activities: it polls one task queue, runs the
// handler registered for each task's activity name, heartbeats while the
// handler runs, and completes or fails the task. Register handlers with
// Register, then call Run.
type Worker struct {
	client *Client
	// reports is the client of the reports (see reporter).
	reports *Client
	queue   string
	opts    workerOptions
	log     *slog.Logger

	mu       sync.RWMutex
	handlers map[string]handlerFunc
	started  bool
	// stopCalled: Stop was called, so its context (not StopTimeout) bounds
	// the wait for running handlers.
	stopCalled bool

	stopping, hard       chan struct{} // closed to stop polling, to cancel handlers
	stopOnce, hardOnce   sync.Once
	done                 chan struct{} // closed when Run returns
	defaultPollers       int
	reportTimeout        time.Duration
	minHeartbeatInterval time.Duration
}

// handlerFunc runs an activity on its JSON input and returns its JSON
// result.
type handlerFunc func(ctx context.Context, input []byte) ([]byte, error)

// WorkerOption configures a Worker.
type WorkerOption func(*workerOptions)

type workerOptions struct {
	concurrency int
	lease       time.Duration
	pollWait    time.Duration
	identity    string
	stopTimeout time.Duration
	logger      *slog.Logger
}

// WithConcurrency bounds how many handlers run at once (default 8). The
// worker polls only when it has room for a task, and asks each poll for as
// many tasks as it has room for (at most 64).
func WithConcurrency(n int) WorkerOption {
	return func(o *workerOptions) { o.concurrency = n }
}

// WithLeaseDuration sets the lease asked for each task (1 second to 10
// minutes; default 30 seconds): how long the task stays with this worker
// without a heartbeat. The worker heartbeats every third of it.
func WithLeaseDuration(d time.Duration) WorkerOption {
	return func(o *workerOptions) { o.lease = d }
}

// WithPollWait sets how long one poll waits for a task (at most 60
// seconds; default 30 seconds).
func WithPollWait(d time.Duration) WorkerOption {
	return func(o *workerOptions) { o.pollWait = d }
}

// WithIdentity names the worker in the server's logs (default
// "hostname@pid").
func WithIdentity(id string) WorkerOption {
	return func(o *workerOptions) { o.identity = id }
}

// WithStopTimeout sets how long running handlers may finish once Run's
// context ends (default 30 seconds); then their contexts are cancelled.
// Stop uses its own context instead.
func WithStopTimeout(d time.Duration) WorkerOption {
	return func(o *workerOptions) { o.stopTimeout = d }
}

// WithLogger sets where the worker logs (default slog.Default()).
func WithLogger(l *slog.Logger) WorkerOption {
	return func(o *workerOptions) { o.logger = l }
}

// NewWorker returns a worker of the task queue, calling the API through c
// (whose token needs the worker role).
func NewWorker(c *Client, taskQueue string, opts ...WorkerOption) *Worker {
	o := workerOptions{concurrency: 8, lease: 30 * time.Second, pollWait: 30 * time.Second, stopTimeout: 30 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.identity == "" {
		host, _ := os.Hostname()
		o.identity = fmt.Sprintf("%s@%d", host, os.Getpid())
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	return &Worker{
		client:               c,
		reports:              reporter(c),
		queue:                taskQueue,
		opts:                 o,
		log:                  o.logger.With(slog.String("task_queue", taskQueue)),
		handlers:             map[string]handlerFunc{},
		stopping:             make(chan struct{}),
		hard:                 make(chan struct{}),
		done:                 make(chan struct{}),
		defaultPollers:       2,
		reportTimeout:        30 * time.Second,
		minHeartbeatInterval: 10 * time.Millisecond,
	}
}

// Register registers fn as the handler of the activity name on w. The
// task's input is decoded from JSON into an In (a null or empty input
// leaves it zero), and fn's Out is encoded as the result. An input that
// does not decode, or an output that does not encode, fails the task
// without retry.
//
// fn's context is cancelled as soon as the task is lost (cancelled by the
// orchestration, its instance deleted, its lease lapsed) or the worker
// stops for good; fn should return then, and what it returns is dropped.
// An error fn returns fails the attempt; the activity's retry policy
// decides whether another follows, unless the error is NonRetryable. A
// panic fails the attempt like an error.
//
// Register panics if name is empty or already registered.
func Register[In, Out any](w *Worker, name string, fn func(ctx context.Context, in In) (Out, error)) {
	w.register(name, func(ctx context.Context, input []byte) ([]byte, error) {
		var in In
		if len(input) > 0 {
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, &ActivityError{
					Kind: "InvalidInput", Message: fmt.Sprintf("activity %q: cannot decode its input into %T: %v", name, in, err), NonRetryable: true,
				}
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, &ActivityError{
				Kind: "InvalidOutput", Message: fmt.Sprintf("activity %q: cannot encode its output as JSON: %v", name, err), NonRetryable: true,
			}
		}
		return b, nil
	})
}

func (w *Worker) register(name string, h handlerFunc) {
	if name == "" {
		panic("sdk: Register: empty activity name")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.handlers[name]; dup {
		panic(fmt.Sprintf("sdk: Register: activity %q registered twice", name))
	}
	w.handlers[name] = h
}

// ActivityError is an activity failure with a kind that definitions can
// test (for example "InvalidInput") and JSON details. Any other error a
// handler returns fails the attempt with its text and the server's default
// kind.
type ActivityError struct {
	// Kind is machine-readable: 1 to 200 characters of [A-Za-z0-9._:@/-].
	Kind string
	// Message is for people.
	Message string
	// Details, when not nil, are sent encoded as JSON.
	Details any
	// NonRetryable fails the activity now, whatever its retry policy.
	NonRetryable bool
}

func (e *ActivityError) Error() string {
	if e.Kind == "" {
		return e.Message
	}
	return e.Kind + ": " + e.Message
}

// NonRetryable marks err so that the attempt it fails is the activity's
// last: the worker reports it as not retryable, whatever the activity's
// retry policy. It returns nil for nil.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryableError{err}
}

type nonRetryableError struct{ err error }

func (e *nonRetryableError) Error() string { return e.err.Error() }
func (e *nonRetryableError) Unwrap() error { return e.err }

// IsNonRetryable reports whether err was marked by NonRetryable or is an
// ActivityError with NonRetryable set.
func IsNonRetryable(err error) bool {
	var n *nonRetryableError
	if errors.As(err, &n) {
		return true
	}
	var ae *ActivityError
	return errors.As(err, &ae) && ae.NonRetryable
}

// ActivityInfo describes the task a handler runs.
type ActivityInfo struct {
	// TaskQueue and Name: where the task came from and which activity.
	TaskQueue, Name string
	// InstanceID, ExecutionID and ActivityID identify the activity within
	// its orchestration.
	InstanceID              string
	ExecutionID, ActivityID int64
	// Attempt is 1 for the first attempt, one more at each retry.
	Attempt int
	// ScheduledAt is when the task was scheduled.
	ScheduledAt time.Time
}

type activityInfoKey struct{}

// ActivityInfoFrom returns the task of a handler's context.
func ActivityInfoFrom(ctx context.Context) (ActivityInfo, bool) {
	info, ok := ctx.Value(activityInfoKey{}).(ActivityInfo)
	return info, ok
}

// errWorkerStopped is the cause of a handler's cancellation when the worker
// stops before the handler returns.
var errWorkerStopped = errors.New("sdk: the worker stopped")

// Run polls the task queue and runs tasks until ctx ends or Stop is called,
// then stops: it stops polling, lets the running handlers finish (for
// StopTimeout after ctx ends, or until Stop's context ends), cancels those
// still running, and returns once every handler has returned. A handler
// cancelled this way leaves its task to another worker once the lease
// lapses.
//
// Run returns nil after a stop, and an error when the worker cannot work:
// the token is refused (ErrUnauthenticated, ErrPermissionDenied), or the
// server rejects the task queue (ErrInvalidArgument). Other poll failures
// are logged and retried with backoff. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("sdk: Worker.Run called twice")
	}
	w.started = true
	w.mu.Unlock()
	defer close(w.done)

	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	select {
	case <-w.stopping:
		// Stopped before it ran: no poller may poll, not even once before
		// the goroutine below sees it.
		stopPolling()
	default:
	}
	go func() {
		select {
		case <-w.stopping:
			stopPolling()
		case <-pollCtx.Done():
		}
	}()
	// Handlers outlive ctx for the grace period.
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)

	concurrency := max(w.opts.concurrency, 1)
	slots := make(chan struct{}, concurrency)
	run := &runners{w: w, base: handlerCtx, slots: slots, tasks: make(chan *orchardv1.ActivityTask), max: int32(concurrency)}
	var pollers sync.WaitGroup
	var fatalOnce sync.Once
	var fatal error
	for range min(w.defaultPollers, concurrency) {
		pollers.Go(func() {
			if err := w.poll(pollCtx, slots, run); err != nil {
				fatalOnce.Do(func() { fatal = err })
				stopPolling()
			}
		})
	}
	pollers.Wait()
	// No task comes any more: the idle runners return, the busy ones once
	// their handlers have.
	close(run.tasks)

	handlersDone := make(chan struct{})
	go func() {
		run.wg.Wait()
		close(handlersDone)
	}()
	w.mu.RLock()
	stopCalled := w.stopCalled
	w.mu.RUnlock()
	var grace <-chan time.Time
	if !stopCalled {
		t := time.NewTimer(w.opts.stopTimeout)
		defer t.Stop()
		grace = t.C
	}
	select {
	case <-handlersDone:
	case <-grace:
		w.log.Warn("sdk: worker stop timeout: cancelling the running handlers")
		cancelHandlers(errWorkerStopped)
	case <-w.hard:
		w.log.Warn("sdk: worker stop deadline: cancelling the running handlers")
		cancelHandlers(errWorkerStopped)
	}
	<-handlersDone
	return fatal
}

// Stop stops a running worker: it stops polling and waits for the running
// handlers to finish. When ctx ends first, it cancels their contexts,
// waits for them to return, and returns ctx's error. Stop before Run makes
// Run return at once.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	w.stopCalled = true
	started := w.started
	w.mu.Unlock()
	w.stopOnce.Do(func() { close(w.stopping) })
	if !started {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.hardOnce.Do(func() { close(w.hard) })
		<-w.done
		return ctx.Err()
	}
}

// pollBackoff spaces the polls after failures.
var pollBackoff = RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second}

// maxPollTasks is the most tasks one poll asks for (the API's bound on
// max_tasks).
const maxPollTasks = 64

// poll is one poller: take the free slots (at least one), lease as many
// tasks in one poll, run each in a slot and hand back the slots left over.
// It returns an error only when the worker cannot work at all.
func (w *Worker) poll(ctx context.Context, slots chan struct{}, run *runners) error {
	failures := pollBackoff.waits()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		held := 1
	more:
		for held < maxPollTasks {
			select {
			case slots <- struct{}{}:
				held++
			default:
				break more
			}
		}
		maxTasks := int32(held)
		resp, err := call(ctx, w.client, notIdempotent, w.client.workers.PollActivityTask, &orchardv1.PollActivityTaskRequest{
			TaskQueue: w.queue, Wait: duration(w.opts.pollWait), LeaseDuration: duration(w.opts.lease), WorkerIdentity: w.opts.identity,
			MaxTasks: &maxTasks,
		})
		if err != nil {
			for range held {
				<-slots
			}
			if ctx.Err() != nil {
				return nil
			}
			var e *Error
			if errors.As(err, &e) {
				switch e.Code {
				case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeUnimplemented:
					w.log.Error("sdk: worker cannot poll", slog.Any("error", err))
					return fmt.Errorf("sdk: worker of task queue %q: %w", w.queue, err)
				}
			}
			wait := failures.next()
			if e != nil {
				wait = max(wait, e.RetryAfter)
			}
			w.log.Warn("sdk: poll failed", slog.Any("error", err), slog.Duration("retry_in", wait))
			if !sleep(ctx, wait) {
				return nil
			}
			continue
		}
		failures.reset()
		tasks := resp.GetTasks()
		if len(tasks) > held {
			// Running them would exceed the concurrency: they go to another
			// worker when their leases lapse.
			w.log.Warn("sdk: the server handed out more tasks than asked for; the extra ones are left to their leases",
				slog.Int("asked", held), slog.Int("got", len(tasks)))
			tasks = tasks[:held]
		}
		for range held - len(tasks) {
			<-slots
		}
		for _, task := range tasks {
			run.start(task)
		}
	}
}

// runners run the leased tasks, each task in a slot. A runner is a
// goroutine that, its task done and the slot handed back, waits for the
// next task: a goroutine per task would start each time on a small stack
// and grow it again through the handler and the report, a cost as large
// as the rest of a short task's local work. There are at most as many
// runners as slots; they return once the pollers have, and their handlers.
type runners struct {
	w       *Worker
	base    context.Context // the handlers' contexts derive from it
	slots   chan struct{}
	tasks   chan *orchardv1.ActivityTask // to the idle runners; closed when the pollers have returned
	max     int32
	started atomic.Int32
	wg      sync.WaitGroup
}

// start runs a leased task, which holds a slot: in an idle runner, else in
// a new one while there are fewer runners than slots. When there are as
// many, one of them is idle or about to be (the slot it handed back is the
// task's), and takes the task.
func (r *runners) start(t *orchardv1.ActivityTask) {
	select {
	case r.tasks <- t:
		return
	default:
	}
	if r.started.Add(1) <= r.max {
		r.wg.Go(func() { r.loop(t) })
		return
	}
	r.started.Add(-1)
	r.tasks <- t
}

// loop is one runner: its first task, then those handed to it until the
// pollers have returned.
func (r *runners) loop(t *orchardv1.ActivityTask) {
	h := &heart{w: r.w}
	for {
		r.w.execute(r.base, t, h)
		<-r.slots
		var ok bool
		if t, ok = <-r.tasks; !ok {
			return
		}
	}
}

// execute runs one task: the handler under a context that a lost lease
// cancels, heartbeats (through its runner's heart) from when the first is
// due, then the report.
func (w *Worker) execute(base context.Context, t *orchardv1.ActivityTask, h *heart) {
	info := ActivityInfo{
		TaskQueue: t.GetTaskQueue(), Name: t.GetName(), InstanceID: t.GetInstanceId(), ExecutionID: t.GetExecutionId(),
		ActivityID: t.GetActivityId(), Attempt: int(t.GetAttempt()), ScheduledAt: fromTimestamp(t.GetCreatedAt()),
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(base, activityInfoKey{}, info))
	defer cancel(nil)
	// The handler runs in a span of its own, in the trace of the turn that
	// scheduled the task; the calls it makes through an SDK client, and the
	// report of its outcome, carry it on.
	ctx, span := w.client.tracer.Start(traceparent.Context(ctx, t.GetTraceparent()), "orchard.activity "+info.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("orchard.task_queue", info.TaskQueue), attribute.String("orchard.instance", info.InstanceID),
			attribute.Int64("orchard.activity_id", info.ActivityID), attribute.Int("orchard.attempt", info.Attempt)))
	defer span.End()

	expires := fromTimestamp(t.GetLeaseExpiresAt())
	if expires.IsZero() {
		expires = time.Now().Add(w.opts.lease)
	}
	h.arm(base, t.GetTaskToken(), expires, cancel, info)
	result, err := w.invoke(ctx, t.GetName(), t.GetInput())
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	h.disarm()

	if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
		w.taskLog(&info).Info("sdk: task lost while its handler ran; its outcome is dropped", slog.Any("cause", cause))
		return
	}
	if err != nil && base.Err() != nil {
		// The worker stopped and cancelled the handler: the task goes to
		// another worker when its lease lapses, without using an attempt.
		w.taskLog(&info).Info("sdk: handler cancelled by the worker's stop; the task is left to its lease", slog.Any("error", err))
		return
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), w.reportTimeout)
	defer rcancel()
	if err == nil {
		w.complete(rctx, t.GetTaskToken(), result, &info)
		return
	}
	w.fail(rctx, t.GetTaskToken(), err, &info)
}

// taskLog is the worker's logger with the task's attributes, made only
// when there is something to log.
func (w *Worker) taskLog(info *ActivityInfo) *slog.Logger {
	return w.log.With(slog.String("instance", info.InstanceID), slog.Int64("activity_id", info.ActivityID),
		slog.String("activity", info.Name), slog.Int("attempt", info.Attempt))
}

// invoke runs the handler of an activity, turning a panic into an error.
func (w *Worker) invoke(ctx context.Context, name string, input []byte) (result []byte, err error) {
	w.mu.RLock()
	h, ok := w.handlers[name]
	var known []string
	if !ok {
		for n := range w.handlers {
			known = append(known, n)
		}
	}
	w.mu.RUnlock()
	if !ok {
		slices.Sort(known)
		return nil, &ActivityError{
			Kind: "UnknownActivity",
			Message: fmt.Sprintf("no handler for activity %q on task queue %q (worker %s handles %s)",
				name, w.queue, w.opts.identity, describe(known)),
			NonRetryable: true,
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = &ActivityError{
				Kind: "Panic", Message: fmt.Sprintf("activity %q panicked: %v", name, r),
				Details: map[string]string{"stack": truncate(string(debug.Stack()), 16<<10)},
			}
		}
	}()
	return h(ctx, input)
}

func describe(names []string) string {
	if len(names) == 0 {
		return "no activity"
	}
	return strings.Join(names, ", ")
}

// heart heartbeats for the task its runner runs, from when the first
// heartbeat is due (a third of the lease): a task done sooner costs no
// goroutine and no call. Its timer serves the runner's every task.
type heart struct {
	w     *Worker
	timer *time.Timer // runs beat
	// The task's, set by arm before the timer is set.
	base    context.Context
	token   string
	expires time.Time
	lost    context.CancelCauseFunc
	info    ActivityInfo
	// stop closes when the task's handler has returned; done, when beat
	// has. Made anew once a beat has used them.
	stop, done chan struct{}
}

// arm sets the first heartbeat of a task whose lease ends at expires.
func (h *heart) arm(base context.Context, token string, expires time.Time, lost context.CancelCauseFunc, info ActivityInfo) {
	h.base, h.token, h.expires, h.lost, h.info = base, token, expires, lost, info
	if h.stop == nil {
		h.stop, h.done = make(chan struct{}), make(chan struct{})
	}
	first := h.w.nextHeartbeat(expires)
	if h.timer == nil {
		h.timer = time.AfterFunc(first, h.beat)
		return
	}
	h.timer.Reset(first)
}

// disarm stops the task's heartbeats once its handler has returned, and
// waits for one being sent.
func (h *heart) disarm() {
	if h.timer.Stop() {
		return
	}
	// The timer fired: beat runs, or has run.
	close(h.stop)
	<-h.done
	h.stop, h.done = nil, nil
}

func (h *heart) beat() {
	defer close(h.done)
	h.w.heartbeat(h.base, h.token, h.expires, h.stop, h.lost, &h.info)
}

// nextHeartbeat is the wait before the heartbeat of a lease ending at
// expires: a third of what is left of it.
func (w *Worker) nextHeartbeat(expires time.Time) time.Duration {
	return max(time.Until(expires)/3, w.minHeartbeatInterval)
}

// heartbeat renews the task's lease now, then every third of what is left
// of it, until stop closes. A heartbeat the server refuses (the task was
// cancelled or lost), or heartbeats failing until the lease has run out,
// cancel the handler with a cause that matches ErrLeaseLost.
func (w *Worker) heartbeat(base context.Context, token string, expires time.Time, stop <-chan struct{}, lost context.CancelCauseFunc, info *ActivityInfo) {
	var timer *time.Timer
	for {
		select {
		case <-stop:
			return
		case <-base.Done():
			return
		default:
		}
		// An attempt is bounded by the lease it asks for, not by the local
		// estimate of the lease's end: a worker whose scheduler or clock runs
		// late by more than that would give up before asking, and take a task
		// it still holds for lost. Only the server's answer, or failing to get
		// one until the lease has run out, says the task is lost.
		cctx, cancel := context.WithTimeout(base, w.opts.lease)
		resp, err := w.client.workers.HeartbeatActivityTask(cctx, connect.NewRequest(&orchardv1.HeartbeatActivityTaskRequest{
			TaskToken: token, LeaseDuration: duration(w.opts.lease),
		}))
		cancel()
		select {
		case <-stop:
			return
		default:
		}
		if base.Err() != nil {
			return
		}
		if err == nil {
			if e := fromTimestamp(resp.Msg.GetLeaseExpiresAt()); !e.IsZero() {
				expires = e
			}
		} else {
			e := apiError(err)
			if errors.Is(e, ErrFailedPrecondition) || errors.Is(e, ErrNotFound) {
				lost(fmt.Errorf("%w: the heartbeat was refused: %w", ErrLeaseLost, e))
				return
			}
			if !time.Now().Before(expires) {
				lost(fmt.Errorf("%w: heartbeats failed until the lease ran out: %w", ErrLeaseLost, e))
				return
			}
			w.taskLog(info).Warn("sdk: heartbeat failed; trying again before the lease runs out", slog.Any("error", e))
		}
		if timer == nil {
			timer = time.NewTimer(w.nextHeartbeat(expires))
			defer timer.Stop()
		} else {
			timer.Reset(w.nextHeartbeat(expires))
		}
		select {
		case <-stop:
			return
		case <-base.Done():
			return
		case <-timer.C:
		}
	}
}

// reporter is the worker's client for reports of results and failures:
// those are idempotent (a repeat of one that landed finds the task gone,
// and the result stays recorded once), so it tries again on Unavailable
// until the report's deadline rather than for the policy's attempts: a
// report outlives a database restart, and the activity does not run again
// after its lease because its result was lost on the way.
func reporter(client *Client) *Client {
	c := *client
	c.retry.MaxAttempts = math.MaxInt
	return &c
}

// complete reports a result. A result the server refuses (too large, not
// JSON) fails the task instead, not retryably.
func (w *Worker) complete(ctx context.Context, token string, result []byte, info *ActivityInfo) {
	_, err := call(ctx, w.reports, idempotent, w.client.workers.CompleteActivityTask,
		&orchardv1.CompleteActivityTaskRequest{TaskToken: token, Result: result})
	if err == nil {
		return
	}
	if refused(err) {
		w.taskLog(info).Warn("sdk: the result was refused; failing the task", slog.Any("error", err))
		w.fail(ctx, token, &ActivityError{Kind: "InvalidOutput", Message: "the result was refused: " + err.Error(), NonRetryable: true}, info)
		return
	}
	w.reportFailed(err, "result", info)
}

// fail reports a failed attempt. A failure the server refuses (details too
// large, a malformed kind) is reported again with its message only.
func (w *Worker) fail(ctx context.Context, token string, cause error, info *ActivityInfo) {
	f, retryable := failureOf(cause)
	_, err := call(ctx, w.reports, idempotent, w.client.workers.FailActivityTask,
		&orchardv1.FailActivityTaskRequest{TaskToken: token, Failure: f, Retryable: retryable})
	if err != nil && refused(err) {
		w.taskLog(info).Warn("sdk: the failure was refused; reporting its message only", slog.Any("error", err))
		f = &orchardv1.ActivityFailure{Message: f.GetMessage()}
		_, err = call(ctx, w.reports, idempotent, w.client.workers.FailActivityTask,
			&orchardv1.FailActivityTaskRequest{TaskToken: token, Failure: f, Retryable: retryable})
	}
	if err != nil {
		w.reportFailed(err, "failure", info)
	}
}

func (w *Worker) reportFailed(err error, what string, info *ActivityInfo) {
	log := w.taskLog(info)
	if errors.Is(err, ErrFailedPrecondition) {
		log.Info("sdk: task lost before its "+what+" was reported; it is dropped", slog.Any("error", err))
		return
	}
	log.Error("sdk: could not report the task's "+what+"; it goes to another worker when its lease lapses", slog.Any("error", err))
}

// refused reports a server's refusal of a report's content (rather than
// of the task): retrying the same report cannot help.
func refused(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == connect.CodeInvalidArgument || e.Code == connect.CodeResourceExhausted && e.RetryAfter == 0
}

var kindPattern = regexp.MustCompile(`^[A-Za-z0-9._:@/-]{1,200}$`)

// failureOf turns a handler's error into the failure to report.
func failureOf(err error) (*orchardv1.ActivityFailure, bool) {
	f := &orchardv1.ActivityFailure{Message: truncate(err.Error(), 4096)}
	if f.Message == "" {
		f.Message = "the activity failed"
	}
	var ae *ActivityError
	if errors.As(err, &ae) {
		if kindPattern.MatchString(ae.Kind) {
			f.Kind = ae.Kind
		}
		if ae.Details != nil {
			if b, jerr := json.Marshal(ae.Details); jerr == nil {
				f.Details = b
			}
		}
	}
	return f, !IsNonRetryable(err)
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
