package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/pkg/sdk"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// recordingClient answers the ClientService calls the tests need and
// records their requests. fail, when set, fails the calls before they
// are recorded as successes.
type recordingClient struct {
	orchardv1connect.UnimplementedClientServiceHandler
	mu       sync.Mutex
	starts   []*orchardv1.StartOrchestrationRequest
	events   []*orchardv1.RaiseEventRequest
	cancels  []*orchardv1.CancelInstanceRequest
	calls    atomic.Int32
	fail     func(n int32) error // n: 1 for the first call
	instance *orchardv1.Instance
}

func (r *recordingClient) failing() error {
	n := r.calls.Add(1)
	if r.fail != nil {
		return r.fail(n)
	}
	return nil
}

func (r *recordingClient) StartOrchestration(_ context.Context, req *connect.Request[orchardv1.StartOrchestrationRequest]) (*connect.Response[orchardv1.StartOrchestrationResponse], error) {
	if err := r.failing(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, req.Msg)
	id := req.Msg.InstanceId
	if id == "" {
		id = "generated-" + strconv.Itoa(len(r.starts))
	}
	return connect.NewResponse(&orchardv1.StartOrchestrationResponse{InstanceId: id, ExecutionId: 1, CreatedAt: timestamppb.Now()}), nil
}

func (r *recordingClient) RaiseEvent(_ context.Context, req *connect.Request[orchardv1.RaiseEventRequest]) (*connect.Response[orchardv1.RaiseEventResponse], error) {
	if err := r.failing(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, req.Msg)
	return connect.NewResponse(&orchardv1.RaiseEventResponse{}), nil
}

func (r *recordingClient) CancelInstance(_ context.Context, req *connect.Request[orchardv1.CancelInstanceRequest]) (*connect.Response[orchardv1.CancelInstanceResponse], error) {
	if err := r.failing(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels = append(r.cancels, req.Msg)
	return connect.NewResponse(&orchardv1.CancelInstanceResponse{}), nil
}

func (r *recordingClient) GetInstance(_ context.Context, req *connect.Request[orchardv1.GetInstanceRequest]) (*connect.Response[orchardv1.GetInstanceResponse], error) {
	if err := r.failing(); err != nil {
		return nil, err
	}
	in := proto.CloneOf(r.instance)
	if in == nil {
		in = &orchardv1.Instance{}
	}
	in.InstanceId = req.Msg.InstanceId
	return connect.NewResponse(&orchardv1.GetInstanceResponse{Instance: in}), nil
}

func TestStartSendsItsOptionsAndInputAsJSON(t *testing.T) {
	t.Parallel()
	rec := &recordingClient{}
	c := newClient(t, serve(t, services{client: rec}))
	type order struct {
		Item  string `json:"item"`
		Count int    `json:"count"`
	}
	id, err := c.Start(t.Context(), "checkout", order{Item: "apple", Count: 3},
		sdk.WithVersion("v2"), sdk.WithInstanceID("order-1"), sdk.WithTags(map[string]string{"team": "fruit"}),
		sdk.WithRetention(48*time.Hour))
	require.NoError(t, err)
	require.Equal(t, "order-1", id)

	id, err = c.Start(t.Context(), "checkout", nil)
	require.NoError(t, err)
	require.Equal(t, "generated-2", id)

	_, err = c.Start(t.Context(), "checkout", json.RawMessage(`{"raw":true}`))
	require.NoError(t, err)

	require.Len(t, rec.starts, 3)
	first := rec.starts[0]
	require.Equal(t, "checkout", first.Name)
	require.Equal(t, "v2", first.Version)
	require.Equal(t, "order-1", first.InstanceId)
	require.JSONEq(t, `{"item":"apple","count":3}`, string(first.Input))
	require.Equal(t, map[string]string{"team": "fruit"}, first.Tags)
	require.Equal(t, 48*time.Hour, first.Retention.AsDuration())
	second := rec.starts[1]
	require.Empty(t, second.Input, "nil input is sent empty (null)")
	require.Empty(t, second.InstanceId)
	require.Nil(t, second.Retention)
	require.JSONEq(t, `{"raw":true}`, string(rec.starts[2].Input))
}

func TestPayloadsThatAreNotJSONFailBeforeAnyCall(t *testing.T) {
	t.Parallel()
	rec := &recordingClient{}
	c := newClient(t, serve(t, services{client: rec}))
	_, err := c.Start(t.Context(), "x", make(chan int))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	var e *sdk.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "input", e.FieldViolations[0].Field)

	err = c.RaiseEvent(t.Context(), "i", "approved", json.RawMessage(`{not json`))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.Zero(t, rec.calls.Load())
}

func TestTokenOption(t *testing.T) {
	t.Parallel()
	ts := serve(t, services{client: &recordingClient{}})
	_, err := sdk.NewClient(ts.URL, sdk.WithToken("abc")).Get(t.Context(), "x")
	require.NoError(t, err)
	_, err = sdk.NewClient(ts.URL, sdk.WithToken("")).Get(t.Context(), "x")
	require.NoError(t, err)
	require.Equal(t, []string{"Bearer abc", ""}, ts.authorizations())
}

// TestTokenFromEnvironment cannot run in parallel: it sets the environment.
func TestTokenFromEnvironment(t *testing.T) {
	t.Setenv(sdk.TokenEnv, "from-env")
	ts := serve(t, services{client: &recordingClient{}})
	_, err := sdk.NewClient(ts.URL+"/").Get(t.Context(), "x")
	require.NoError(t, err)
	_, err = sdk.NewClient(ts.URL, sdk.WithToken("explicit")).Get(t.Context(), "x")
	require.NoError(t, err)
	require.Equal(t, []string{"Bearer from-env", "Bearer explicit"}, ts.authorizations())
}

func TestRetries(t *testing.T) {
	t.Parallel()
	failTwice := func(n int32) error {
		if n <= 2 {
			return unavailable()
		}
		return nil
	}
	rateLimited := func(n int32) error {
		if n == 1 {
			return withDetails(connect.CodeResourceExhausted, "rate limit", &errdetails.RetryInfo{RetryDelay: durationpb.New(5 * time.Millisecond)})
		}
		return nil
	}
	for _, tc := range []struct {
		name      string
		fail      func(n int32) error
		do        func(ctx context.Context, c *sdk.Client) error
		opts      []sdk.Option
		wantCalls int32
		wantErr   error
	}{
		{
			name: "a read is retried on Unavailable", fail: failTwice, wantCalls: 3,
			do: func(ctx context.Context, c *sdk.Client) error { _, err := c.Get(ctx, "x"); return err },
		},
		{
			name: "cancel is retried on Unavailable", fail: failTwice, wantCalls: 3,
			do: func(ctx context.Context, c *sdk.Client) error { return c.Cancel(ctx, "x", "because") },
		},
		{
			name: "start with an instance id is retried", fail: failTwice, wantCalls: 3,
			do: func(ctx context.Context, c *sdk.Client) error {
				_, err := c.Start(ctx, "n", 1, sdk.WithInstanceID("i"))
				return err
			},
		},
		{
			name: "start without an instance id is not retried", fail: failTwice, wantCalls: 1, wantErr: sdk.ErrUnavailable,
			do: func(ctx context.Context, c *sdk.Client) error { _, err := c.Start(ctx, "n", 1); return err },
		},
		{
			name: "an event is not raised twice", fail: failTwice, wantCalls: 1, wantErr: sdk.ErrUnavailable,
			do: func(ctx context.Context, c *sdk.Client) error { return c.RaiseEvent(ctx, "i", "e", nil) },
		},
		{
			name: "attempts are bounded", fail: func(int32) error { return unavailable() }, wantCalls: 5, wantErr: sdk.ErrUnavailable,
			do: func(ctx context.Context, c *sdk.Client) error { _, err := c.Get(ctx, "x"); return err },
		},
		{
			name: "one attempt disables retries", fail: failTwice, wantCalls: 1, wantErr: sdk.ErrUnavailable,
			opts: []sdk.Option{sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 1})},
			do:   func(ctx context.Context, c *sdk.Client) error { _, err := c.Get(ctx, "x"); return err },
		},
		{
			name: "a rate limit with a hint is retried, even for an event", fail: rateLimited, wantCalls: 2,
			do: func(ctx context.Context, c *sdk.Client) error { return c.RaiseEvent(ctx, "i", "e", nil) },
		},
		{
			name: "a hint longer than the longest backoff is not waited for", wantCalls: 1, wantErr: sdk.ErrResourceExhausted,
			fail: func(int32) error {
				return withDetails(connect.CodeResourceExhausted, "rate limit", &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Minute)})
			},
			do: func(ctx context.Context, c *sdk.Client) error { _, err := c.Get(ctx, "x"); return err },
		},
		{
			name: "a quota without a hint is not retried", wantCalls: 1, wantErr: sdk.ErrResourceExhausted,
			fail: func(int32) error {
				return connect.NewError(connect.CodeResourceExhausted, errors.New("running instances limit"))
			},
			do: func(ctx context.Context, c *sdk.Client) error {
				_, err := c.Start(ctx, "n", 1, sdk.WithInstanceID("i"))
				return err
			},
		},
		{
			name: "other errors are not retried", wantCalls: 1, wantErr: sdk.ErrNotFound,
			fail: func(int32) error { return connect.NewError(connect.CodeNotFound, errors.New("nope")) },
			do:   func(ctx context.Context, c *sdk.Client) error { _, err := c.Get(ctx, "x"); return err },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordingClient{fail: tc.fail}
			c := newClient(t, serve(t, services{client: rec}), tc.opts...)
			err := tc.do(t.Context(), c)
			if tc.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
			}
			require.Equal(t, tc.wantCalls, rec.calls.Load())
		})
	}
}

// countingTransport counts the requests it is asked to send.
type countingTransport struct {
	n  atomic.Int32
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

func TestCallsThatNeverReachedTheServerAreRetried(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: every attempt fails to connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	tr := &countingTransport{rt: http.DefaultTransport}
	c := sdk.NewClient("http://"+addr, sdk.WithToken("t"), sdk.WithRetryPolicy(fastRetries), sdk.WithHTTPClient(&http.Client{Transport: tr}))
	err = c.RaiseEvent(t.Context(), "i", "e", nil)
	require.ErrorIs(t, err, sdk.ErrUnavailable)
	require.Equal(t, int32(fastRetries.MaxAttempts), tr.n.Load(), "a refused connection sent nothing: even an event is retried")
}

func TestRetriesStopWithTheContext(t *testing.T) {
	t.Parallel()
	rec := &recordingClient{fail: func(int32) error { return unavailable() }}
	slow := sdk.RetryPolicy{MaxAttempts: 100, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
	c := newClient(t, serve(t, services{client: rec}), sdk.WithRetryPolicy(slow))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := c.Get(ctx, "x")
	require.ErrorIs(t, err, sdk.ErrUnavailable, "a backoff that would outlast the deadline is not started")
	require.Less(t, time.Since(start), 30*time.Second)
	require.Equal(t, int32(1), rec.calls.Load())
}

// waiter answers WaitForCompletion: not done for the first calls, then
// done.
type waiter struct {
	orchardv1connect.UnimplementedClientServiceHandler
	calls    atomic.Int32
	doneAt   int32
	timeouts chan time.Duration
}

func (w *waiter) WaitForCompletion(_ context.Context, req *connect.Request[orchardv1.WaitForCompletionRequest]) (*connect.Response[orchardv1.WaitForCompletionResponse], error) {
	n := w.calls.Add(1)
	select {
	case w.timeouts <- req.Msg.Timeout.AsDuration():
	default:
	}
	in := &orchardv1.Instance{InstanceId: req.Msg.InstanceId, Status: orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING}
	if w.doneAt > 0 && n >= w.doneAt {
		in.Status = orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED
		in.Output = []byte(`{"total":42}`)
		in.CompletedAt = timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		return connect.NewResponse(&orchardv1.WaitForCompletionResponse{Instance: in, Done: true}), nil
	}
	return connect.NewResponse(&orchardv1.WaitForCompletionResponse{Instance: in}), nil
}

func TestWaitLongPollsUntilDone(t *testing.T) {
	t.Parallel()
	w := &waiter{doneAt: 3, timeouts: make(chan time.Duration, 1)}
	c := newClient(t, serve(t, services{client: w}))
	in, err := c.Wait(t.Context(), "i")
	require.NoError(t, err)
	require.Equal(t, int32(3), w.calls.Load())
	require.Equal(t, sdk.StatusCompleted, in.Status)
	require.True(t, in.Status.Terminal())
	require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), in.CompletedAt.UTC())
	var out struct{ Total int }
	require.NoError(t, in.DecodeOutput(&out))
	require.Equal(t, 42, out.Total)
	require.Equal(t, 30*time.Second, <-w.timeouts, "each call waits up to 30s on the server")
}

// TestWaitEndsWithTheContext: the first call asks the server to wait no
// longer than the caller's deadline, and Wait ends with the context. The deadline is
// long enough for a call to reach the server on a loaded machine; if none
// did, the test fails rather than waits for one.
func TestWaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	w := &waiter{timeouts: make(chan time.Duration, 1)}
	c := newClient(t, serve(t, services{client: w}))
	const deadline = 3 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx, "i")
		ended <- err
	}()
	select {
	case d := <-w.timeouts:
		require.LessOrEqual(t, d, deadline, "the server wait is bounded by the deadline")
	case err := <-ended:
		require.FailNow(t, "Wait ended before a call reached the server", "%v", err)
	}
	cancel()
	require.ErrorIs(t, <-ended, context.Canceled)
}

// pager serves an instance listing, an execution history and definition
// listings in pages, recording the requests.
type pager struct {
	orchardv1connect.UnimplementedClientServiceHandler
	orchardv1connect.UnimplementedDefinitionServiceHandler
	total    int
	mu       sync.Mutex
	lists    []*orchardv1.ListInstancesRequest
	history  []*orchardv1.GetHistoryRequest
	failPage int // fail the call for this page (1-based); 0: none
}

func (p *pager) ListInstances(_ context.Context, req *connect.Request[orchardv1.ListInstancesRequest]) (*connect.Response[orchardv1.ListInstancesResponse], error) {
	p.mu.Lock()
	p.lists = append(p.lists, req.Msg)
	page := len(p.lists)
	p.mu.Unlock()
	if page == p.failPage {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token: tampered with"))
	}
	start := 0
	if req.Msg.PageToken != "" {
		var err error
		if start, err = strconv.Atoi(req.Msg.PageToken); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	size := int(req.Msg.PageSize)
	if size == 0 {
		size = 100
	}
	resp := &orchardv1.ListInstancesResponse{}
	for i := start; i < min(start+size, p.total); i++ {
		resp.Instances = append(resp.Instances, &orchardv1.Instance{
			InstanceId: fmt.Sprintf("i-%04d", i), Status: orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED,
			CreatedAt: timestamppb.New(time.Unix(int64(i), 0)),
		})
	}
	if start+size < p.total {
		resp.NextPageToken = strconv.Itoa(start + size)
	}
	return connect.NewResponse(resp), nil
}

func (p *pager) GetHistory(_ context.Context, req *connect.Request[orchardv1.GetHistoryRequest]) (*connect.Response[orchardv1.GetHistoryResponse], error) {
	p.mu.Lock()
	p.history = append(p.history, req.Msg)
	p.mu.Unlock()
	exec := req.Msg.ExecutionId
	if exec == 0 {
		exec = 7 // the current execution
	}
	resp := &orchardv1.GetHistoryResponse{ExecutionId: exec}
	for id := req.Msg.AfterEventId + 1; id <= min(req.Msg.AfterEventId+int64(req.Msg.PageSize), int64(p.total)); id++ {
		resp.Events = append(resp.Events, &orchardv1.HistoryEvent{EventId: id, Kind: "TimerFired", Payload: []byte(`{}`)})
	}
	if n := len(resp.Events); n > 0 && resp.Events[n-1].EventId < int64(p.total) {
		resp.NextAfterEventId = resp.Events[n-1].EventId
	}
	return connect.NewResponse(resp), nil
}

func (p *pager) ListDefinitions(_ context.Context, req *connect.Request[orchardv1.ListDefinitionsRequest]) (*connect.Response[orchardv1.ListDefinitionsResponse], error) {
	start := 0
	if req.Msg.PageToken != "" {
		start, _ = strconv.Atoi(req.Msg.PageToken)
	}
	resp := &orchardv1.ListDefinitionsResponse{}
	for i := start; i < min(start+int(req.Msg.PageSize), p.total); i++ {
		resp.Definitions = append(resp.Definitions, &orchardv1.Definition{Name: req.Msg.Name, Version: strconv.Itoa(i)})
	}
	if start+int(req.Msg.PageSize) < p.total {
		resp.NextPageToken = strconv.Itoa(start + int(req.Msg.PageSize))
	}
	return connect.NewResponse(resp), nil
}

func TestListIteratesOverEveryPage(t *testing.T) {
	t.Parallel()
	p := &pager{total: 250}
	c := newClient(t, serve(t, services{client: p}))
	filter := sdk.Filter{
		Statuses: []sdk.Status{sdk.StatusFailed, sdk.StatusCancelled}, NamePrefix: "pay", Tags: map[string]string{"env": "prod"},
		CompletedBefore: new(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), RootsOnly: true,
	}
	var ids []string
	for in, err := range c.List(t.Context(), filter, sdk.WithPageSize(100), sdk.WithOrder(sdk.OldestFirst)) {
		require.NoError(t, err)
		ids = append(ids, in.ID)
		require.Equal(t, sdk.StatusFailed, in.Status)
	}
	require.Len(t, ids, 250)
	require.Equal(t, "i-0000", ids[0])
	require.Equal(t, "i-0249", ids[249])
	require.Len(t, p.lists, 3)
	for i, req := range p.lists {
		require.Equal(t, int32(100), req.PageSize)
		require.Equal(t, orchardv1.InstanceOrder_INSTANCE_ORDER_CREATED_ASC, req.Order)
		require.Equal(t, []orchardv1.InstanceStatus{orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED, orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED}, req.Filter.Statuses)
		require.Equal(t, "pay", req.Filter.NamePrefix)
		require.True(t, req.Filter.RootsOnly)
		require.Equal(t, map[string]string{"env": "prod"}, req.Filter.Tags)
		require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), req.Filter.CompletedBefore.AsTime())
		require.Nil(t, req.Filter.CreatedAfter, "unset times stay unset")
		require.Equal(t, []string{"", "100", "200"}[i], req.PageToken)
	}
}

func TestListStopsFetchingWhenTheLoopStops(t *testing.T) {
	t.Parallel()
	p := &pager{total: 1000}
	c := newClient(t, serve(t, services{client: p}))
	n := 0
	for _, err := range c.List(t.Context(), sdk.Filter{}, sdk.WithPageSize(10)) {
		require.NoError(t, err)
		if n++; n == 15 {
			break
		}
	}
	require.Len(t, p.lists, 2)
}

func TestListEndsWithTheErrorOfAPage(t *testing.T) {
	t.Parallel()
	p := &pager{total: 1000, failPage: 2}
	c := newClient(t, serve(t, services{client: p}))
	var got []*sdk.Instance
	var errs []error
	for in, err := range c.List(t.Context(), sdk.Filter{}, sdk.WithPageSize(10)) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, in)
	}
	require.Len(t, got, 10)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], sdk.ErrInvalidArgument)
}

func TestListRejectsWhatTheAPIWould(t *testing.T) {
	t.Parallel()
	p := &pager{total: 10}
	c := newClient(t, serve(t, services{client: p}))
	for _, err := range c.List(t.Context(), sdk.Filter{Statuses: []sdk.Status{"Sleeping"}}) {
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		var e *sdk.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "filter.statuses[0]", e.FieldViolations[0].Field)
	}
	for _, err := range c.List(t.Context(), sdk.Filter{}, sdk.WithPageSize(5000)) {
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	}
	require.Empty(t, p.lists)
}

func TestHistoryReadsEveryPageOfOneExecution(t *testing.T) {
	t.Parallel()
	p := &pager{total: 2500}
	c := newClient(t, serve(t, services{client: p}))
	h, err := c.History(t.Context(), "i", 0)
	require.NoError(t, err)
	require.Equal(t, int64(7), h.ExecutionID)
	require.Len(t, h.Events, 2500)
	for i, e := range h.Events {
		require.Equal(t, int64(i+1), e.ID)
	}
	require.Len(t, p.history, 3)
	require.Equal(t, int64(0), p.history[0].ExecutionId)
	require.Equal(t, int64(7), p.history[1].ExecutionId, "later pages stay on the first page's execution")
	require.Equal(t, int64(2000), p.history[2].AfterEventId)
}

func TestListDefinitionsPages(t *testing.T) {
	t.Parallel()
	p := &pager{total: 25}
	c := newClient(t, serve(t, services{definitions: p}))
	var versions []string
	for d, err := range c.ListDefinitions(t.Context(), "checkout", sdk.WithPageSize(10)) {
		require.NoError(t, err)
		require.Equal(t, "checkout", d.Name)
		versions = append(versions, d.Version)
	}
	require.Len(t, versions, 25)
}

// deleter serves the delete and prune calls.
type deleter struct {
	orchardv1connect.UnimplementedClientServiceHandler
	mu        sync.Mutex
	bulk      []*orchardv1.DeleteInstancesRequest
	prunes    []*orchardv1.PruneExecutionsBulkRequest
	batches   int   // calls before complete
	failAt    int   // fail this call (1-based); 0: none
	stuck     bool  // answer "not complete" with the same request, deleting nothing
	deleteErr error // DeleteInstance's answer
	deleteN   atomic.Int32
}

func (d *deleter) DeleteInstance(_ context.Context, req *connect.Request[orchardv1.DeleteInstanceRequest]) (*connect.Response[orchardv1.DeleteInstanceResponse], error) {
	d.deleteN.Add(1)
	if d.deleteErr != nil {
		return nil, d.deleteErr
	}
	return connect.NewResponse(&orchardv1.DeleteInstanceResponse{Counts: &orchardv1.DeleteCounts{
		InstancesDeleted: 3, ExecutionsDeleted: 4, EventsDeleted: 50, QueueMessagesDeleted: 1,
	}}), nil
}

func (d *deleter) DeleteInstances(_ context.Context, req *connect.Request[orchardv1.DeleteInstancesRequest]) (*connect.Response[orchardv1.DeleteInstancesResponse], error) {
	d.mu.Lock()
	d.bulk = append(d.bulk, req.Msg)
	n := len(d.bulk)
	d.mu.Unlock()
	if n == d.failAt {
		return nil, unavailable()
	}
	if d.stuck {
		return connect.NewResponse(&orchardv1.DeleteInstancesResponse{Counts: &orchardv1.DeleteCounts{}, Next: req.Msg}), nil
	}
	resp := &orchardv1.DeleteInstancesResponse{Counts: &orchardv1.DeleteCounts{InstancesDeleted: 10, ExecutionsDeleted: 20, EventsDeleted: 300}}
	if n < d.batches {
		next := proto.CloneOf(req.Msg)
		// A continuation the client must pass back as it is.
		next.InstanceIds = append(next.InstanceIds, "after-"+strconv.Itoa(n))
		resp.Next = next
	} else {
		resp.Complete = true
	}
	return connect.NewResponse(resp), nil
}

func (d *deleter) PruneExecutionsBulk(_ context.Context, req *connect.Request[orchardv1.PruneExecutionsBulkRequest]) (*connect.Response[orchardv1.PruneExecutionsBulkResponse], error) {
	d.mu.Lock()
	d.prunes = append(d.prunes, req.Msg)
	n := len(d.prunes)
	d.mu.Unlock()
	resp := &orchardv1.PruneExecutionsBulkResponse{Counts: &orchardv1.PruneCounts{InstancesProcessed: 5, InstancesPruned: 4, ExecutionsDeleted: 7, EventsDeleted: 70}}
	if n < d.batches {
		next := proto.CloneOf(req.Msg)
		next.Filter.InstanceIdPrefix = "after-" + strconv.Itoa(n)
		resp.Next = next
	} else {
		resp.Complete = true
	}
	return connect.NewResponse(resp), nil
}

func TestDeleteManyFollowsNextUntilComplete(t *testing.T) {
	t.Parallel()
	d := &deleter{batches: 4}
	c := newClient(t, serve(t, services{client: d}))
	var progress []sdk.DeleteCounts
	cutoff := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	total, err := c.DeleteMany(t.Context(), sdk.DeleteSelection{CompletedBefore: &cutoff, Filter: &sdk.Filter{Name: "checkout"}},
		sdk.WithBatchSize(50), sdk.WithDeleteProgress(func(p sdk.DeleteCounts) { progress = append(progress, p) }))
	require.NoError(t, err)
	require.Equal(t, sdk.DeleteCounts{Instances: 40, Executions: 80, Events: 1200}, total)
	require.Len(t, progress, 4)
	require.Equal(t, int64(10), progress[0].Instances)
	require.Equal(t, int64(30), progress[2].Instances)
	require.Len(t, d.bulk, 4)
	first := d.bulk[0]
	require.Equal(t, int32(50), first.Limit)
	require.Equal(t, cutoff, first.CompletedBefore.AsTime())
	require.Equal(t, "checkout", first.Filter.Name)
	require.Empty(t, first.InstanceIds)
	require.Equal(t, []string{"after-1", "after-2", "after-3"}, d.bulk[3].InstanceIds, "each call is the previous answer's next")
}

func TestDeleteManyCanSelectEverything(t *testing.T) {
	t.Parallel()
	d := &deleter{batches: 1}
	c := newClient(t, serve(t, services{client: d}))
	_, err := c.DeleteMany(t.Context(), sdk.DeleteSelection{})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "an empty selection is refused before any call")
	require.Empty(t, d.bulk)

	_, err = c.DeleteMany(t.Context(), sdk.DeleteSelection{}, sdk.AllInstances())
	require.NoError(t, err)
	require.Len(t, d.bulk, 1)
	require.True(t, d.bulk[0].All, "everything is asked for explicitly")
}

func TestDeleteManyReturnsWhatItDidBeforeAFailure(t *testing.T) {
	t.Parallel()
	d := &deleter{batches: 10, failAt: 3}
	c := newClient(t, serve(t, services{client: d}), sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 1}))
	total, err := c.DeleteMany(t.Context(), sdk.DeleteSelection{InstanceIDs: []string{"a"}})
	require.ErrorIs(t, err, sdk.ErrUnavailable)
	require.Equal(t, int64(20), total.Instances)
}

func TestDeleteManyRetriesABatch(t *testing.T) {
	t.Parallel()
	d := &deleter{batches: 4, failAt: 2} // batches counts the failed call too
	c := newClient(t, serve(t, services{client: d}))
	total, err := c.DeleteMany(t.Context(), sdk.DeleteSelection{InstanceIDs: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, int64(30), total.Instances)
	require.Len(t, d.bulk, 4)
	require.True(t, proto.Equal(d.bulk[1], d.bulk[2]), "the failed batch is sent again as it was")
}

func TestDeleteManyDetectsAServerThatMakesNoProgress(t *testing.T) {
	t.Parallel()
	d := &deleter{stuck: true}
	c := newClient(t, serve(t, services{client: d}))
	_, err := c.DeleteMany(t.Context(), sdk.DeleteSelection{InstanceIDs: []string{"a"}})
	require.Error(t, err)
	require.Len(t, d.bulk, 1)
}

func TestPruneManyFollowsNextUntilComplete(t *testing.T) {
	t.Parallel()
	d := &deleter{batches: 3}
	c := newClient(t, serve(t, services{client: d}))
	var calls int
	total, err := c.PruneMany(t.Context(), sdk.Filter{Name: "poller"}, sdk.PruneOptions{KeepLast: 2},
		sdk.WithPruneProgress(func(sdk.PruneCounts) { calls++ }))
	require.NoError(t, err)
	require.Equal(t, sdk.PruneCounts{InstancesProcessed: 15, InstancesPruned: 12, Executions: 21, Events: 210}, total)
	require.Equal(t, 3, calls)
	require.Equal(t, int32(2), d.prunes[0].Options.KeepLast)
	require.Equal(t, "after-2", d.prunes[2].Filter.InstanceIdPrefix)

	_, err = c.PruneMany(t.Context(), sdk.Filter{}, sdk.PruneOptions{})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "prune options need a criterion")
	_, err = c.Prune(t.Context(), "i", sdk.PruneOptions{KeepLast: -1})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
}

func TestDelete(t *testing.T) {
	t.Parallel()
	t.Run("counts", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, serve(t, services{client: &deleter{}}))
		counts, err := c.Delete(t.Context(), "i", true)
		require.NoError(t, err)
		require.Equal(t, sdk.DeleteCounts{Instances: 3, Executions: 4, Events: 50, QueueMessages: 1}, counts)
	})
	t.Run("running", func(t *testing.T) {
		t.Parallel()
		d := &deleter{deleteErr: withDetails(connect.CodeFailedPrecondition, `instances "i": instance is running`,
			&errdetails.ErrorInfo{Reason: "INSTANCE_RUNNING", Domain: "orchard.dev"})}
		c := newClient(t, serve(t, services{client: d}))
		_, err := c.Delete(t.Context(), "i", false)
		require.ErrorIs(t, err, sdk.ErrRunning)
		require.ErrorIs(t, err, sdk.ErrFailedPrecondition)
		require.Equal(t, int32(1), d.deleteN.Load())
	})
	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		d := &deleter{deleteErr: connect.NewError(connect.CodeNotFound, errors.New("not found"))}
		c := newClient(t, serve(t, services{client: d}))
		_, err := c.Delete(t.Context(), "i", false)
		require.ErrorIs(t, err, sdk.ErrNotFound)
	})
}

// flakyDelete deletes on the first call but loses the answer (Unavailable);
// the retry finds nothing.
type flakyDelete struct {
	orchardv1connect.UnimplementedClientServiceHandler
	n atomic.Int32
}

func (f *flakyDelete) DeleteInstance(context.Context, *connect.Request[orchardv1.DeleteInstanceRequest]) (*connect.Response[orchardv1.DeleteInstanceResponse], error) {
	if f.n.Add(1) == 1 {
		return nil, unavailable()
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("not found"))
}

func TestDeleteRetriedAfterItsFirstAttemptWorked(t *testing.T) {
	t.Parallel()
	f := &flakyDelete{}
	c := newClient(t, serve(t, services{client: f}))
	counts, err := c.Delete(t.Context(), "i", false)
	require.NoError(t, err)
	require.Zero(t, counts)
	require.Equal(t, int32(2), f.n.Load())
}

func TestGetMapsTheInstance(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	rec := &recordingClient{instance: &orchardv1.Instance{
		Name: "checkout", Version: "v1", Status: orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING, CurrentExecutionId: 2,
		ParentInstanceId: "p", RootInstanceId: "r", Input: []byte(`{"a":1}`), Tags: map[string]string{"k": "v"},
		CreatedAt: timestamppb.New(created), UpdatedAt: timestamppb.New(created.Add(time.Second)),
		ExecutionCount: 2, EventCount: 9, Retention: durationpb.New(time.Hour),
	}}
	c := newClient(t, serve(t, services{client: rec}))
	in, err := c.Get(t.Context(), "i-1")
	require.NoError(t, err)
	require.Equal(t, "i-1", in.ID)
	require.Equal(t, sdk.StatusRunning, in.Status)
	require.False(t, in.Status.Terminal())
	require.Equal(t, int64(2), in.CurrentExecutionID)
	require.Equal(t, "p", in.ParentID)
	require.Equal(t, "r", in.RootID)
	require.True(t, in.CreatedAt.Equal(created))
	require.True(t, in.CompletedAt.IsZero())
	require.Nil(t, in.Output)
	require.Equal(t, time.Hour, *in.Retention)
	var input map[string]int
	require.NoError(t, in.DecodeInput(&input))
	require.Equal(t, 1, input["a"])
}
