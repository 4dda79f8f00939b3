package api_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/notify"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// Hints carry the work to whoever waits for it. With every poll interval
// (the API's long polls, the dispatcher's idle loop) set to an hour, an
// orchestration started through the API still runs to its end: the start
// wakes the dispatcher, the scheduled task reaches the worker's waiting
// poll, the task's completion wakes the dispatcher again, and the end
// answers WaitForCompletion; each long poll queries the store once when it
// starts and once per hint (counted, not timed).
func TestHintsWakeTheWaiters(t *testing.T) {
	t.Parallel()
	hints := notify.NewLocal()
	e := newEnv(t, func(c *api.Config) { c.Notifier, c.MinPoll, c.MaxPoll = hints, time.Hour, time.Hour })
	e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))
	ctx := t.Context()

	poll := inBackground(t, func() (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
		return c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
	})
	testwait.Until(t, 30*time.Second, "the worker's poll to wait", func() bool { return e.API.ActiveLongPolls() == 1 })
	queriesBefore := e.API.LongPollQueries()

	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "e", Input: []byte(`7`)}))
	require.NoError(t, err)
	p := poll("the scheduled task did not reach the waiting poll")
	require.Len(t, p.Msg.Tasks, 1, "the poll answered without the task")
	require.LessOrEqual(t, e.API.LongPollQueries()-queriesBefore, int64(1), "the poll looked once, on the hint")

	wait := inBackground(t, func() (*connect.Response[orchardv1.WaitForCompletionResponse], error) {
		return c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: "e", Timeout: durationpb.New(time.Minute)}))
	})
	testwait.Until(t, 30*time.Second, "WaitForCompletion to wait", func() bool { return e.API.ActiveLongPolls() == 1 })
	queriesBefore = e.API.LongPollQueries()
	_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: p.Msg.Tasks[0].TaskToken, Result: []byte(`8`)}))
	require.NoError(t, err)
	w := wait("the instance's end did not reach WaitForCompletion")
	require.True(t, w.Msg.Done)
	require.Equal(t, `8`, string(w.Msg.Instance.Output))
	require.LessOrEqual(t, e.API.LongPollQueries()-queriesBefore, int64(1), "the wait looked once, on the hint")
	require.Zero(t, hints.Subscribers()-1, "only the dispatcher still listens")
}

// With hints reaching the API (Hinted), a WaitForCompletion reads its
// instance when the hint of its end comes, and also as it starts unless
// this server started the instance: a start subscribes to its instance's
// end before writing it, and its wait takes that subscription. Its polls,
// for a lost hint, are MaxPoll apart, not doubling from MinPoll (counted,
// not timed: MinPoll is a millisecond, MaxPoll an hour).
func TestHintedWaitForCompletionReads(t *testing.T) {
	t.Parallel()
	hints := notify.NewLocal()
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Hinted, c.MinPoll, c.MaxPoll = hints, true, time.Millisecond, time.Hour
	})
	e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Hinted: true, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))
	echo := func(id string) *orchardv1.StartOrchestrationRequest {
		return &orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: id, Input: []byte(`7`)}
	}

	// Started here, still running: no read until the hint.
	token := startAndPoll(t, c, echo("e"))
	require.Equal(t, 1, e.API.EndWatches())
	queriesBefore := e.API.LongPollQueries()
	wait := waitFor(t, c, "e")
	testwait.Until(t, 30*time.Second, "WaitForCompletion to wait", func() bool { return e.API.ActiveLongPolls() == 1 })
	require.Zero(t, e.API.LongPollQueries()-queriesBefore, "the wait read before the hint")
	require.Zero(t, e.API.EndWatches(), "the wait took its start's subscription")
	complete(t, c, token)
	w := wait("the instance's end did not reach WaitForCompletion")
	require.True(t, w.Msg.Done)
	require.Equal(t, `8`, string(w.Msg.Instance.Output))
	require.Equal(t, int64(1), e.API.LongPollQueries()-queriesBefore, "reads: one, on the hint")

	// No subscription of a start left (a second wait): a read at the start.
	queriesBefore = e.API.LongPollQueries()
	w = waitFor(t, c, "e")("a wait for an ended instance did not answer")
	require.True(t, w.Msg.Done)
	require.Equal(t, int64(1), e.API.LongPollQueries()-queriesBefore)

	// Ended before its wait came: the start's subscription holds the hint.
	runToEnd(t, c, echo("f"))
	queriesBefore = e.API.LongPollQueries()
	w = waitFor(t, c, "f")("a wait for an instance that ended before it did not answer")
	require.True(t, w.Msg.Done)
	require.Equal(t, int64(1), e.API.LongPollQueries()-queriesBefore)
	require.Zero(t, e.API.EndWatches())
	require.Zero(t, hints.Subscribers()-1, "only the dispatcher still listens")
}

// With the dispatcher of its process sharing a Handoff, a poll that waits
// gets the task an ack schedules in memory, leased to it by the ack: it
// makes no claim of its own (its one query was the one it made as it
// started; counted, not timed, with every poll interval an hour). The
// task's token completes it like a claimed task's.
func TestAWaitingPollGetsItsTaskHandedOver(t *testing.T) {
	t.Parallel()
	hints, handoff := notify.NewLocal(), notify.NewHandoff(0)
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Handoff, c.MinPoll, c.MaxPoll = hints, handoff, time.Hour, time.Hour
	})
	e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Handoff: handoff, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))
	ctx := t.Context()

	poll := inBackground(t, func() (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
		return c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
	})
	testwait.Until(t, 30*time.Second, "the worker's poll to offer its place", func() bool { return handoff.Waiting() == 1 })
	queriesBefore := e.API.LongPollQueries()

	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "e", Input: []byte(`7`)}))
	require.NoError(t, err)
	p := poll("the scheduled task was not handed to the waiting poll")
	require.Len(t, p.Msg.Tasks, 1, "the poll answered without the task")
	require.Equal(t, "e", p.Msg.Tasks[0].InstanceId)
	require.Equal(t, `7`, string(p.Msg.Tasks[0].Input))
	require.Zero(t, e.API.LongPollQueries()-queriesBefore, "the poll claimed the task handed to it")
	require.Zero(t, handoff.Waiting())

	completeAndAwait(t, c, p.Msg.Tasks[0].TaskToken, "e")
}

// With the dispatcher of its process sharing a Handoff, a task's
// completion takes the idle loop's place and runs the instance's turn
// before its write, on the instance as the dispatcher's last ack of it
// left it (store.EagerLease.Ahead), and the instance ends as a loop's turn
// would have ended it.
func TestACompletionsTurnRunsAheadOfItsWrite(t *testing.T) {
	t.Parallel()
	hints, handoff := notify.NewLocal(), notify.NewHandoff(0)
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Handoff, c.MinPoll, c.MaxPoll = hints, handoff, time.Hour, time.Hour
	})
	d := e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Handoff: handoff, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))

	token := startAndPoll(t, c, &orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "e", Input: []byte(`7`)})
	testwait.Until(t, 30*time.Second, "the loop to wait for work", func() bool { return handoff.IdleLoops() == 1 })
	completeAndAwait(t, c, token, "e")
	stats := d.Stats()
	require.Equal(t, int64(1), stats.Ahead, "the completion's turn did not run ahead of its write")
	require.Zero(t, stats.LeaseLosses)
}

// With the dispatcher of its process sharing a Handoff, a
// WaitForCompletion gets its instance as the ack that ended it left it,
// and answers without reading it: whether it waited when the end came, or
// came after the end to the watch its start kept. The answer is the
// instance a read returns (counted, not timed: every poll interval is an
// hour). A wait whose watch was not kept from the start (a second wait)
// reads, as without a Handoff.
func TestAWaitGetsItsInstanceHandedOver(t *testing.T) {
	t.Parallel()
	hints, handoff := notify.NewLocal(), notify.NewHandoff(0)
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Handoff, c.Hinted, c.MinPoll, c.MaxPoll = hints, handoff, true, time.Hour, time.Hour
	})
	e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Handoff: handoff, Hinted: true, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))
	ctx := t.Context()
	echo := func(id string) *orchardv1.StartOrchestrationRequest {
		return &orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: id,
			Input: []byte(`7`), Tags: map[string]string{"team": "a"}, Retention: durationpb.New(time.Hour)}
	}
	asRead := func(w *connect.Response[orchardv1.WaitForCompletionResponse]) {
		t.Helper()
		require.True(t, w.Msg.Done)
		read, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: w.Msg.Instance.InstanceId}))
		require.NoError(t, err)
		require.Equal(t, `8`, string(w.Msg.Instance.Output))
		require.True(t, proto.Equal(read.Msg.Instance, w.Msg.Instance), "answered %v, read %v", w.Msg.Instance, read.Msg.Instance)
	}

	// Waiting when the end came.
	token := startAndPoll(t, c, echo("e"))
	queriesBefore := e.API.LongPollQueries()
	wait := waitFor(t, c, "e")
	testwait.Until(t, 30*time.Second, "WaitForCompletion to wait", func() bool { return e.API.ActiveLongPolls() == 1 })
	complete(t, c, token)
	w := wait("the instance's end did not reach WaitForCompletion")
	require.Zero(t, e.API.LongPollQueries()-queriesBefore, "the wait read its instance")
	asRead(w)

	// Ended before its wait came: the start's watch holds the instance.
	runToEnd(t, c, echo("f"))
	queriesBefore = e.API.LongPollQueries()
	w = waitFor(t, c, "f")("a wait for an instance that ended before it did not answer")
	require.Zero(t, e.API.LongPollQueries()-queriesBefore, "the wait read its instance")
	asRead(w)

	// A second wait has no watch of the start: it reads.
	w = waitFor(t, c, "f")("a second wait did not answer")
	require.Equal(t, int64(1), e.API.LongPollQueries()-queriesBefore)
	asRead(w)
	waits, bytes := handoff.EndWaits()
	require.Zero(t, waits+bytes, "the waits let go of their instances")
}

// A poll that starts while its queue is known empty (a query found it so,
// and every task since came to a waiting place) makes no query before it
// waits: two orchestrations in a row, each handed to its poll, cost one
// query, the first poll's. A task scheduled while no poll waits is news:
// the next poll queries as it starts, and finds it at once (counted, not
// timed: every poll interval is an hour).
func TestAPollOfAQueueKnownEmptyWaitsFirst(t *testing.T) {
	t.Parallel()
	hints, handoff := notify.NewLocal(), notify.NewHandoff(time.Hour)
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Handoff, c.MinPoll, c.MaxPoll = hints, handoff, time.Hour, time.Hour
	})
	e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Handoff: handoff, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))
	ctx := t.Context()
	queriesBefore := e.API.LongPollQueries()
	run := func(id string) {
		t.Helper()
		poll := inBackground(t, func() (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
			return c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
		})
		testwait.Until(t, 30*time.Second, "the worker's poll to offer its place", func() bool { return handoff.Waiting() == 1 })
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: id, Input: []byte(`7`)}))
		require.NoError(t, err)
		p := poll("the scheduled task was not handed to the waiting poll")
		require.Len(t, p.Msg.Tasks, 1)
		_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: p.Msg.Tasks[0].TaskToken, Result: []byte(`8`)}))
		require.NoError(t, err)
	}
	run("a")
	run("b")
	require.Equal(t, int64(1), e.API.LongPollQueries()-queriesBefore, "queries of two polls of a queue known empty")

	// The ack's hint of the task comes after its news.
	tasks := hints.Subscribe(notify.Topic{Kind: notify.Tasks, TenantID: "acme", Key: "q"})
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "c", Input: []byte(`7`)}))
	require.NoError(t, err)
	select {
	case <-tasks.C:
	case <-time.After(30 * time.Second):
		t.Fatal("the task was not scheduled")
	}
	tasks.Close()
	p, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
	require.NoError(t, err)
	require.Len(t, p.Msg.Tasks, 1, "a poll after a task no place took waited instead of querying")
	require.Equal(t, "c", p.Msg.Tasks[0].InstanceId)
	require.Equal(t, int64(2), e.API.LongPollQueries()-queriesBefore)
}

// inBackground starts call on a goroutine of its own and returns a function
// that waits for its answer, failing the test with what when none comes
// within 30 seconds.
// completeAndAwait completes the echo activity of instance id with 8, and
// waits for the instance to end with that output.
func completeAndAwait(t *testing.T, c *clients, taskToken, id string) {
	t.Helper()
	complete(t, c, taskToken)
	w := waitFor(t, c, id)("the instance's end did not reach WaitForCompletion")
	require.True(t, w.Msg.Done)
	require.Equal(t, `8`, string(w.Msg.Instance.Output))
}

// startAndPoll makes the start of an echo instance and polls its task
// (queue q); it returns the task's token.
func startAndPoll(t *testing.T, c *clients, start *orchardv1.StartOrchestrationRequest) string {
	t.Helper()
	ctx := t.Context()
	_, err := c.client.StartOrchestration(ctx, req(start))
	require.NoError(t, err)
	task, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
	require.NoError(t, err)
	require.Len(t, task.Msg.Tasks, 1)
	return task.Msg.Tasks[0].TaskToken
}

// runToEnd starts an echo instance, completes its task and waits until
// it has completed, with no WaitForCompletion of its own.
func runToEnd(t *testing.T, c *clients, start *orchardv1.StartOrchestrationRequest) {
	t.Helper()
	complete(t, c, startAndPoll(t, c, start))
	testwait.Until(t, 30*time.Second, "instance "+start.InstanceId+" to complete", func() bool {
		in, err := c.client.GetInstance(t.Context(), req(&orchardv1.GetInstanceRequest{InstanceId: start.InstanceId}))
		require.NoError(t, err)
		return in.Msg.Instance.Status == orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED
	})
}

// waitFor waits for the end of instance id in the background (inBackground).
func waitFor(t *testing.T, c *clients, id string) func(what string) *connect.Response[orchardv1.WaitForCompletionResponse] {
	return inBackground(t, func() (*connect.Response[orchardv1.WaitForCompletionResponse], error) {
		return c.client.WaitForCompletion(t.Context(), req(&orchardv1.WaitForCompletionRequest{InstanceId: id, Timeout: durationpb.New(time.Minute)}))
	})
}

// complete completes a task with the result 8.
func complete(t *testing.T, c *clients, token string) {
	t.Helper()
	_, err := c.worker.CompleteActivityTask(t.Context(), req(&orchardv1.CompleteActivityTaskRequest{TaskToken: token, Result: []byte(`8`)}))
	require.NoError(t, err)
}

func inBackground[T any](t *testing.T, call func() (*connect.Response[T], error)) func(what string) *connect.Response[T] {
	type answer struct {
		res *connect.Response[T]
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		res, err := call()
		answers <- answer{res, err}
	}()
	return func(what string) *connect.Response[T] {
		t.Helper()
		select {
		case a := <-answers:
			require.NoError(t, a.err)
			return a.res
		case <-time.After(30 * time.Second):
			t.Fatal(what)
			return nil
		}
	}
}

// A start that finds no loop idle runs its first turn before its write,
// in the dispatcher of its process (store.StartOrchestrationParams.First):
// the start creates the instance with the turn's task, which goes to the
// waiting poll, with no fetch and no hint (counted, not timed: every poll
// interval is an hour).
func TestAStartThatFindsNoIdleLoopWritesItsFirstTurn(t *testing.T) {
	t.Parallel()
	c, d, handoff, noHint := busyLoop(t)
	ctx := t.Context()
	before := d.Stats()

	poll := inBackground(t, func() (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
		return c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
	})
	testwait.Until(t, 30*time.Second, "the worker's poll to offer its place", func() bool { return handoff.Waiting() == 1 })
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "e", Input: []byte(`7`)}))
	require.NoError(t, err)
	p := poll("the scheduled task was not handed to the waiting poll")
	require.Len(t, p.Msg.Tasks, 1)
	after := d.Stats()
	require.Equal(t, int64(1), after.Held-before.Held, "the first turn was not written with its start")
	require.Zero(t, after.Fetches-before.Fetches, "the loop fetched the instance")
	noHint()
	completeAndAwait(t, c, p.Msg.Tasks[0].TaskToken, "e")
}

// busyLoop runs the API with a dispatcher of one loop in its process, and
// takes that loop's place once it offers it: as far as the API's calls can
// tell, the loop is busy (every poll interval is an hour). noHint fails
// the test when a hint of the tenant's instances was sent; the place is
// given back at the test's end.
func busyLoop(t *testing.T) (c *clients, d *dispatcher.Dispatcher, handoff *notify.Handoff, noHint func()) {
	t.Helper()
	hints := notify.NewLocal()
	handoff = notify.NewHandoff(0)
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Handoff, c.Hinted, c.MinPoll, c.MaxPoll = hints, handoff, true, time.Hour, time.Hour
	})
	d = e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Handoff: handoff, Hinted: true, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c = e.all(e.tenant("acme", nil, testsystem.EchoDef))
	orchestrations := hints.Subscribe(notify.Topic{Kind: notify.Orchestrations, TenantID: "acme"})
	t.Cleanup(orchestrations.Close)
	testwait.Until(t, 30*time.Second, "the loop to offer its place", func() bool { return handoff.IdleLoops() == 1 && d.Stats().Running == 0 })
	place := handoff.TakeIdle("acme")
	require.NotNil(t, place)
	t.Cleanup(func() { place.Deliver(nil) })
	return c, d, handoff, func() {
		t.Helper()
		select {
		case <-orchestrations.C:
			t.Fatal("a hint was sent for an instance whose turn was written")
		default:
		}
	}
}

// A completion that finds no loop idle runs its instance's next turn before
// its write, when the dispatcher of its process has the instance as its
// last ack left it (store.AckWorkItemParams.Next): the completion writes
// the turn that ends the instance in place of its result, and the wait
// gets the end, with no fetch and no hint (counted, not timed: every poll
// interval is an hour).
func TestACompletionThatFindsNoIdleLoopWritesItsTurn(t *testing.T) {
	t.Parallel()
	c, d, _, noHint := busyLoop(t)
	before := d.Stats()

	token := startAndPoll(t, c, &orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "e", Input: []byte(`7`)})
	completeAndAwait(t, c, token, "e")
	after := d.Stats()
	require.Equal(t, int64(2), after.Held-before.Held, "the start's and the completion's turns were not written with them")
	require.Zero(t, after.Fetches-before.Fetches, "the loop fetched the instance")
	noHint()
}

// A start, and a task's completion, that find the dispatcher's loop idle
// lease their instance in their own transaction and run its turn there, in
// the loop's place: both turns of a one-activity orchestration run with no
// fetch and no hint (counted, not timed: every poll interval is an hour),
// and the loop stays idle. The activity's task goes to the waiting poll
// with no claim either.
func TestAStartAndACompletionHandTheirInstanceToAnIdleLoop(t *testing.T) {
	t.Parallel()
	hints, handoff := notify.NewLocal(), notify.NewHandoff(0)
	e := newEnv(t, func(c *api.Config) {
		c.Notifier, c.Handoff, c.MinPoll, c.MaxPoll = hints, handoff, time.Hour, time.Hour
	})
	d := e.StartDispatcher(t, dispatcher.Config{Notifier: hints, Handoff: handoff, Hinted: true, Loops: 1, MinPoll: time.Hour, MaxPoll: time.Hour})
	c := e.all(e.tenant("acme", nil, testsystem.EchoDef))
	ctx := t.Context()
	orchestrations := hints.Subscribe(notify.Topic{Kind: notify.Orchestrations, TenantID: "acme"})
	defer orchestrations.Close()
	idle := func(why string) {
		t.Helper()
		testwait.Until(t, 30*time.Second, why, func() bool { return handoff.IdleLoops() == 1 && d.Stats().Running == 0 })
	}
	idle("the loop to offer its place")
	before := d.Stats()

	poll := inBackground(t, func() (*connect.Response[orchardv1.PollActivityTaskResponse], error) {
		return c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
	})
	testwait.Until(t, 30*time.Second, "the worker's poll to offer its place", func() bool { return handoff.Waiting() == 1 })
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "e", Input: []byte(`7`)}))
	require.NoError(t, err)
	p := poll("the scheduled task was not handed to the waiting poll")
	require.Len(t, p.Msg.Tasks, 1)
	idle("the loop to offer its place again")

	completeAndAwait(t, c, p.Msg.Tasks[0].TaskToken, "e")

	after := d.Stats()
	require.Equal(t, int64(2), after.Turns-before.Turns)
	require.Equal(t, int64(2), after.Held-before.Held, "turns run in the idle loop's place")
	require.Equal(t, 1, handoff.IdleLoops(), "the loop's place was not offered again")
	require.Zero(t, after.Fetches-before.Fetches, "the loop fetched an instance handed to it")
	select {
	case <-orchestrations.C:
		t.Fatal("a hint was sent for an instance handed to the loop")
	default:
	}
}
