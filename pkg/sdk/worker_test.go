package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/pkg/sdk"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// taskServer is a WorkerService that hands out the tasks put in its
// channel and records what workers report.
type taskServer struct {
	orchardv1connect.UnimplementedWorkerServiceHandler
	tasks chan *orchardv1.ActivityTask
	// lease is the lease each poll and heartbeat grants (default 1h): the
	// worker heartbeats every third of it.
	lease time.Duration
	// skew is how far the server's clock is ahead of the worker's.
	skew time.Duration
	// heartbeatErr, when set, answers heartbeats.
	heartbeatErr func(token string) error
	// pollErr, when set, answers polls (n: 1 for the first).
	pollErr func(n int32) error

	polls      atomic.Int32
	mu         sync.Mutex
	asked      []*int32 // each poll's max_tasks
	completed  map[string][]byte
	failed     map[string]*orchardv1.FailActivityTaskRequest
	heartbeats map[string]int
	reported   chan string // the token of each report
}

func newTaskServer() *taskServer {
	return &taskServer{
		tasks: make(chan *orchardv1.ActivityTask, 100), lease: time.Hour,
		completed: map[string][]byte{}, failed: map[string]*orchardv1.FailActivityTaskRequest{},
		heartbeats: map[string]int{}, reported: make(chan string, 100),
	}
}

var taskSeq atomic.Int64

// add queues a task of activity name with input and returns its token.
func (s *taskServer) add(name string, input string) string {
	return s.addLeased(name, input, 0)
}

// addLeased is add of a task whose poll grants it lease rather than the
// server's (0: the server's).
func (s *taskServer) addLeased(name string, input string, lease time.Duration) string {
	n := taskSeq.Add(1)
	token := "token-" + strconv.FormatInt(n, 10)
	task := &orchardv1.ActivityTask{
		TaskToken: token, InstanceId: "instance-" + strconv.FormatInt(n, 10), ExecutionId: 1, ActivityId: n, Name: name,
		TaskQueue: "q", Input: []byte(input), Attempt: 2, CreatedAt: timestamppb.Now(),
	}
	if lease > 0 {
		task.LeaseExpiresAt = timestamppb.New(time.Now().Add(lease))
	}
	s.tasks <- task
	return token
}

func (s *taskServer) PollActivityTask(ctx context.Context, req *connect.Request[orchardv1.PollActivityTaskRequest]) (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
	n := s.polls.Add(1)
	if s.pollErr != nil {
		if err := s.pollErr(n); err != nil {
			return nil, err
		}
	}
	t := time.NewTimer(req.Msg.Wait.AsDuration())
	defer t.Stop()
	max := int(req.Msg.GetMaxTasks())
	s.mu.Lock()
	s.asked = append(s.asked, req.Msg.MaxTasks)
	s.mu.Unlock()
	select {
	case task := <-s.tasks:
		// The first task, and as many more as are queued, up to max.
		tasks := []*orchardv1.ActivityTask{task}
	more:
		for len(tasks) < max {
			select {
			case task := <-s.tasks:
				tasks = append(tasks, task)
			default:
				break more
			}
		}
		for _, task := range tasks {
			if task.LeaseExpiresAt == nil {
				task.LeaseExpiresAt = timestamppb.New(time.Now().Add(s.skew + s.lease))
			}
		}
		return connect.NewResponse(&orchardv1.PollActivityTaskResponse{Tasks: tasks}), nil
	case <-t.C:
		return connect.NewResponse(&orchardv1.PollActivityTaskResponse{}), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *taskServer) HeartbeatActivityTask(_ context.Context, req *connect.Request[orchardv1.HeartbeatActivityTaskRequest]) (*connect.Response[orchardv1.HeartbeatActivityTaskResponse], error) {
	s.mu.Lock()
	s.heartbeats[req.Msg.TaskToken]++
	s.mu.Unlock()
	if s.heartbeatErr != nil {
		if err := s.heartbeatErr(req.Msg.TaskToken); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&orchardv1.HeartbeatActivityTaskResponse{LeaseExpiresAt: timestamppb.New(time.Now().Add(s.skew + s.lease))}), nil
}

func (s *taskServer) CompleteActivityTask(_ context.Context, req *connect.Request[orchardv1.CompleteActivityTaskRequest]) (*connect.Response[orchardv1.CompleteActivityTaskResponse], error) {
	s.mu.Lock()
	s.completed[req.Msg.TaskToken] = req.Msg.Result
	s.mu.Unlock()
	s.reported <- req.Msg.TaskToken
	return connect.NewResponse(&orchardv1.CompleteActivityTaskResponse{}), nil
}

func (s *taskServer) FailActivityTask(_ context.Context, req *connect.Request[orchardv1.FailActivityTaskRequest]) (*connect.Response[orchardv1.FailActivityTaskResponse], error) {
	s.mu.Lock()
	s.failed[req.Msg.TaskToken] = req.Msg
	s.mu.Unlock()
	s.reported <- req.Msg.TaskToken
	return connect.NewResponse(&orchardv1.FailActivityTaskResponse{}), nil
}

// waitReports waits for n reports and returns their tokens.
func (s *taskServer) waitReports(t *testing.T, n int) []string {
	t.Helper()
	var tokens []string
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for len(tokens) < n {
		select {
		case tok := <-s.reported:
			tokens = append(tokens, tok)
		case <-timeout.C:
			require.FailNow(t, "timed out waiting for reports", "got %d of %d", len(tokens), n)
		}
	}
	return tokens
}

// askedFor returns the max_tasks of each poll so far.
func (s *taskServer) askedFor() []*int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

func (s *taskServer) heartbeatsOf(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeats[token]
}

// awaitHeartbeats is a handler's body that ends once the server has had n
// heartbeats of the task token, or with the handler's context.
func (s *taskServer) awaitHeartbeats(ctx context.Context, token string, n int) (string, error) {
	for s.heartbeatsOf(token) < n {
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-time.After(time.Millisecond): // polls a counter the server bumps
		}
	}
	return "done", nil
}

// startWorker runs w in the background; the test's end stops it.
func startWorker(t testing.TB, w *sdk.Worker) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.Run(context.WithoutCancel(t.Context())) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return done
}

func newWorker(t testing.TB, s *taskServer, opts ...sdk.WorkerOption) *sdk.Worker {
	t.Helper()
	c := newClient(t, serve(t, services{worker: s}))
	opts = append([]sdk.WorkerOption{sdk.WithLogger(quiet()), sdk.WithPollWait(50 * time.Millisecond)}, opts...)
	return sdk.NewWorker(c, "q", opts...)
}

type greeting struct {
	Name string `json:"name"`
}

func TestWorkerRunsHandlersAndReportsTheirOutcome(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w := newWorker(t, s)
	var infos sync.Map
	sdk.Register(w, "greet", func(ctx context.Context, in greeting) (string, error) {
		info, ok := sdk.ActivityInfoFrom(ctx)
		if ok {
			infos.Store(info.InstanceID, info)
		}
		return "hello " + in.Name, nil
	})
	sdk.Register(w, "fail", func(ctx context.Context, in string) (any, error) {
		return nil, fmt.Errorf("cannot %s", in)
	})
	sdk.Register(w, "refuse", func(ctx context.Context, in string) (any, error) {
		return nil, sdk.NonRetryable(errors.New("never"))
	})
	sdk.Register(w, "typed", func(ctx context.Context, in string) (any, error) {
		return nil, &sdk.ActivityError{Kind: "OutOfStock", Message: "no apples", Details: map[string]int{"left": 0}}
	})
	sdk.Register(w, "panic", func(ctx context.Context, in string) (any, error) {
		panic("boom")
	})
	sdk.Register(w, "raw", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return in, nil
	})
	sdk.Register(w, "nothing", func(ctx context.Context, in *greeting) (*greeting, error) {
		return in, nil
	})
	greet := s.add("greet", `{"name":"Ada"}`)
	fail := s.add("fail", `"fly"`)
	refuse := s.add("refuse", `""`)
	typed := s.add("typed", `""`)
	panics := s.add("panic", `""`)
	raw := s.add("raw", `[1, 2, 3]`)
	badInput := s.add("greet", `[1, 2, 3]`)
	unknown := s.add("paint", `{}`)
	nothing := s.add("nothing", ``)
	startWorker(t, w)
	s.waitReports(t, 9)

	s.mu.Lock()
	defer s.mu.Unlock()
	require.JSONEq(t, `"hello Ada"`, string(s.completed[greet]))
	require.JSONEq(t, `[1,2,3]`, string(s.completed[raw]))
	require.JSONEq(t, `null`, string(s.completed[nothing]), "an empty input decodes to the zero value")

	require.Equal(t, "cannot fly", s.failed[fail].Failure.Message)
	require.True(t, s.failed[fail].Retryable)
	require.Empty(t, s.failed[fail].Failure.Kind, "the server's default kind")

	require.False(t, s.failed[refuse].Retryable)
	require.Equal(t, "never", s.failed[refuse].Failure.Message)

	require.Equal(t, "OutOfStock", s.failed[typed].Failure.Kind)
	require.True(t, s.failed[typed].Retryable)
	require.JSONEq(t, `{"left":0}`, string(s.failed[typed].Failure.Details))

	require.Equal(t, "Panic", s.failed[panics].Failure.Kind)
	require.Contains(t, s.failed[panics].Failure.Message, "boom")
	require.Contains(t, string(s.failed[panics].Failure.Details), "stack")

	require.Equal(t, "InvalidInput", s.failed[badInput].Failure.Kind)
	require.False(t, s.failed[badInput].Retryable)

	require.Equal(t, "UnknownActivity", s.failed[unknown].Failure.Kind)
	require.False(t, s.failed[unknown].Retryable)
	require.Contains(t, s.failed[unknown].Failure.Message, `no handler for activity "paint" on task queue "q"`)
	require.Contains(t, s.failed[unknown].Failure.Message, "fail, greet, nothing")

	v, ok := infos.Load("instance-" + greet[len("token-"):])
	require.True(t, ok)
	info := v.(sdk.ActivityInfo)
	require.Equal(t, "greet", info.Name)
	require.Equal(t, "q", info.TaskQueue)
	require.Equal(t, 2, info.Attempt)
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	t.Parallel()
	w := sdk.NewWorker(sdk.NewClient("http://127.0.0.1:1"), "q")
	sdk.Register(w, "a", func(context.Context, int) (int, error) { return 0, nil })
	require.Panics(t, func() { sdk.Register(w, "a", func(context.Context, int) (int, error) { return 0, nil }) })
	require.Panics(t, func() { sdk.Register(w, "", func(context.Context, int) (int, error) { return 0, nil }) })
}

func TestHeartbeatsRunWhileTheHandlerDoes(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	s.lease = 150 * time.Millisecond // a heartbeat every 50ms
	w := newWorker(t, s)
	release := make(chan struct{})
	sdk.Register(w, "slow", func(ctx context.Context, _ any) (string, error) {
		select {
		case <-release:
			return "done", ctx.Err()
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	token := s.add("slow", `{}`)
	startWorker(t, w)
	eventually(t, "three heartbeats", func() bool { return s.heartbeatsOf(token) >= 3 })
	close(release)
	s.waitReports(t, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.JSONEq(t, `"done"`, string(s.completed[token]), "a renewed lease outlives its first expiry")
}

// A runner runs one task after another: each task's heartbeats start a
// third of its lease in, also after the runner's previous task was
// heartbeated; a task whose lease is long and that is done sooner has
// none.
func TestHeartbeatsOfTasksThatFollowInOneRunner(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	s.lease = 150 * time.Millisecond
	w := newWorker(t, s, sdk.WithConcurrency(1))
	sdk.Register(w, "slow", func(ctx context.Context, _ any) (string, error) {
		info, _ := sdk.ActivityInfoFrom(ctx)
		return s.awaitHeartbeats(ctx, "token-"+strings.TrimPrefix(info.InstanceID, "instance-"), 2)
	})
	sdk.Register(w, "quick", func(context.Context, any) (string, error) { return "done", nil })
	slow1 := s.add("slow", `{}`)
	quick := s.addLeased("quick", `{}`, time.Hour)
	slow2, slow3 := s.add("slow", `{}`), s.add("slow", `{}`)
	startWorker(t, w)
	s.waitReports(t, 4)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, token := range []string{slow1, quick, slow2, slow3} {
		require.JSONEq(t, `"done"`, string(s.completed[token]), "task %s failed: %v", token, s.failed[token])
	}
	require.Zero(t, s.heartbeats[quick], "heartbeats of the quick task")
}

// A worker whose clock or scheduler is late by more than its lease (here,
// the lease ends in its past as soon as it gets the task) still asks the
// server before it takes the task for lost: the server says it holds the
// task, so the handler runs to its end. This is what made the heartbeat
// tests flaky on a loaded machine: a heartbeat that woke up after the
// lease's local end gave up before it was sent.
func TestALateWorkerAsksTheServerBeforeItGivesUpATask(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	s.lease = 150 * time.Millisecond
	s.skew = -time.Minute
	w := newWorker(t, s)
	var token string
	sdk.Register(w, "slow", func(ctx context.Context, _ any) (string, error) {
		return s.awaitHeartbeats(ctx, token, 3)
	})
	token = s.add("slow", `{}`)
	startWorker(t, w)
	s.waitReports(t, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.JSONEq(t, `"done"`, string(s.completed[token]), "failed: %v", s.failed[token])
}

func TestAFailedHeartbeatCancelsTheHandler(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	s.lease = 150 * time.Millisecond
	w := newWorker(t, s)
	causes := make(chan error, 1)
	sdk.Register(w, "block", func(ctx context.Context, _ any) (string, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "too late", nil
	})
	sdk.Register(w, "quick", func(context.Context, any) (int, error) { return 1, nil })
	lost := s.add("block", `{}`)
	s.heartbeatErr = func(token string) error {
		if token != lost {
			return nil
		}
		return withDetails(connect.CodeFailedPrecondition,
			"the task's lease is lost: it was cancelled, its instance deleted, or the lease lapsed",
			&errdetails.ErrorInfo{Reason: "LEASE_LOST", Domain: "orchard.dev"})
	}
	startWorker(t, w)
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the handler's context was not cancelled")
	}
	require.ErrorIs(t, cause, sdk.ErrLeaseLost)
	require.Equal(t, 1, s.heartbeatsOf(lost), "the first refused heartbeat cancels the handler")

	// The outcome of a lost task is dropped: a later task's report is the
	// first one the server sees.
	next := s.add("quick", `{}`)
	require.Equal(t, []string{next}, s.waitReports(t, 1))
}

func TestHeartbeatsThatFailUntilTheLeaseEndsCancelTheHandler(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	// Long enough that a loaded machine's scheduler cannot be late by all
	// of it: the retries before its end are what this checks.
	s.lease = 3 * time.Second
	s.heartbeatErr = func(string) error { return unavailable() }
	w := newWorker(t, s)
	causes := make(chan error, 1)
	sdk.Register(w, "block", func(ctx context.Context, _ any) (string, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", ctx.Err()
	})
	token := s.add("block", `{}`)
	startWorker(t, w)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, sdk.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the handler's context was not cancelled")
	}
	require.Greater(t, s.heartbeatsOf(token), 1, "transient failures are retried while the lease lasts")
}

func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w := newWorker(t, s, sdk.WithConcurrency(3))
	var running, most atomic.Int32
	release := make(chan struct{})
	sdk.Register(w, "hold", func(ctx context.Context, _ any) (int, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		return 1, nil
	})
	for range 10 {
		s.add("hold", `{}`)
	}
	startWorker(t, w)
	eventually(t, "three handlers running", func() bool { return running.Load() == 3 })
	polls := s.polls.Load()
	require.Len(t, s.tasks, 7, "no task is leased without room to run it")
	close(release)
	s.waitReports(t, 10)
	require.Equal(t, int32(3), most.Load())
	require.Greater(t, s.polls.Load(), polls)
}

// TestAPollAsksForTheFreeSlots: a poll asks for as many tasks as the
// worker has room to run, at most 64, and runs each it gets.
func TestAPollAsksForTheFreeSlots(t *testing.T) {
	t.Parallel()
	const concurrency = 70
	s := newTaskServer()
	w := newWorker(t, s, sdk.WithConcurrency(concurrency))
	var running atomic.Int32
	release := make(chan struct{})
	sdk.Register(w, "hold", func(ctx context.Context, _ any) (int, error) {
		running.Add(1)
		<-release
		return 1, nil
	})
	for range concurrency {
		s.add("hold", `{}`)
	}
	startWorker(t, w)
	eventually(t, "every handler running", func() bool { return running.Load() == concurrency })
	asked := s.askedFor()
	// Two pollers, each holding what slots it could take: the one that
	// reached 64 left the rest to the other.
	require.Len(t, asked, 2, "polls: %v", asked)
	sum := int32(0)
	for _, n := range asked {
		require.NotNil(t, n, "a poll left max_tasks unset")
		require.GreaterOrEqual(t, *n, int32(1))
		require.LessOrEqual(t, *n, int32(64))
		sum += *n
	}
	require.Equal(t, int32(concurrency), sum, "the polls asked for more or less than the free slots")
	close(release)
	s.waitReports(t, concurrency)
}

// busyWorker runs a worker of concurrency 2 with two handlers in flight
// (so no poll is in flight either); closing release lets them finish.
func busyWorker(t *testing.T, s *taskServer, opts ...sdk.WorkerOption) (w *sdk.Worker, tokens []string, started, release chan struct{}, cancelled *atomic.Int32) {
	t.Helper()
	w = newWorker(t, s, append([]sdk.WorkerOption{sdk.WithConcurrency(2)}, opts...)...)
	started = make(chan struct{}, 2)
	release = make(chan struct{})
	cancelled = new(atomic.Int32)
	sdk.Register(w, "work", func(ctx context.Context, _ any) (string, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			cancelled.Add(1)
		}
		return "finished", nil
	})
	for range 2 {
		tokens = append(tokens, s.add("work", `{}`))
	}
	return w, tokens, started, release, cancelled
}

func TestStopWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w, tokens, started, release, cancelled := busyWorker(t, s)
	done := startWorker(t, w)
	<-started
	<-started

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.WithoutCancel(t.Context())) }()
	select {
	case err := <-stopped:
		require.FailNow(t, "Stop returned with handlers in flight", "%v", err)
	default:
	}
	close(release)
	require.NoError(t, <-stopped)
	// Stop returned: the handlers finished and their results were reported.
	s.mu.Lock()
	for _, tok := range tokens {
		require.JSONEq(t, `"finished"`, string(s.completed[tok]))
	}
	s.mu.Unlock()
	require.NoError(t, <-done)
	require.Zero(t, cancelled.Load())
}

func TestRunContextEndStopsPollingAndWaitsForHandlers(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w, tokens, started, release, cancelled := busyWorker(t, s, sdk.WithStopTimeout(time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	<-started
	cancel()
	extra := s.add("work", `{}`)
	close(release)
	require.NoError(t, <-done)
	require.Zero(t, cancelled.Load())
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tok := range tokens {
		require.JSONEq(t, `"finished"`, string(s.completed[tok]))
	}
	require.NotContains(t, s.completed, extra)
	require.Len(t, s.tasks, 1, "a stopped worker takes no new task")
}

func TestStopCancelsHandlersAtItsDeadline(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w := newWorker(t, s)
	started := make(chan struct{})
	causes := make(chan error, 1)
	sdk.Register(w, "stubborn", func(ctx context.Context, _ any) (string, error) {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", ctx.Err()
	})
	s.add("stubborn", `{}`)
	done := startWorker(t, w)
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Stop(ctx), context.DeadlineExceeded)
	require.NoError(t, <-done)
	require.Error(t, <-causes)
	select {
	case tok := <-s.reported:
		require.FailNow(t, "a handler cancelled by the stop reported its task", tok)
	default:
	}
}

func TestRunContextEndStopsWithinTheStopTimeout(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w := newWorker(t, s, sdk.WithStopTimeout(50*time.Millisecond))
	started := make(chan struct{})
	sdk.Register(w, "stubborn", func(ctx context.Context, _ any) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	})
	s.add("stubborn", `{}`)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return after its stop timeout")
	}
}

func TestRunFailsWhenTheTokenIsRefused(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	s.pollErr = func(int32) error { return connect.NewError(connect.CodeUnauthenticated, errors.New("token expired")) }
	w := newWorker(t, s)
	err := w.Run(t.Context())
	require.ErrorIs(t, err, sdk.ErrUnauthenticated)
	require.Error(t, w.Run(t.Context()), "a worker runs once")
}

func TestPollFailuresAreRetried(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	s.pollErr = func(n int32) error {
		if n <= 2 {
			return unavailable()
		}
		return nil
	}
	// One poller, no client retries: the worker's own backoff retries.
	c := newClient(t, serve(t, services{worker: s}), sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 1}))
	w := sdk.NewWorker(c, "q", sdk.WithLogger(quiet()), sdk.WithPollWait(50*time.Millisecond), sdk.WithConcurrency(1))
	sdk.Register(w, "ok", func(context.Context, any) (bool, error) { return true, nil })
	token := s.add("ok", `{}`)
	startWorker(t, w)
	require.Equal(t, []string{token}, s.waitReports(t, 1))
	require.GreaterOrEqual(t, s.polls.Load(), int32(3))
}

func TestStopBeforeRun(t *testing.T) {
	t.Parallel()
	s := newTaskServer()
	w := newWorker(t, s)
	require.NoError(t, w.Stop(t.Context()))
	require.NoError(t, w.Run(t.Context()))
	require.Zero(t, s.polls.Load())
}

// BenchmarkWorkerTask runs tasks of an echo activity through a worker, as
// a load of short activities does: allocs/op, B/op and goroutines/op are
// per task, the test server's share included.
func BenchmarkWorkerTask(b *testing.B) {
	s := newTaskServer()
	w := newWorker(b, s, sdk.WithConcurrency(64), sdk.WithPollWait(time.Second))
	sdk.Register(w, "echo", func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	startWorker(b, w)
	// The first tasks make the connections and the worker's goroutines.
	for range 64 {
		s.add("echo", `{"seq":1}`)
	}
	for range 64 {
		<-s.reported
	}
	b.ReportAllocs()
	b.ResetTimer()
	g0 := goroutinesCreated()
	go func() {
		for range b.N {
			s.add("echo", `{"seq":1}`)
		}
	}()
	for range b.N {
		<-s.reported
	}
	b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
}

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
