package api_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// postJSON calls a procedure with the Connect protocol's JSON encoding, as a
// hand-written client would.
func postJSON(t *testing.T, e *env, token, procedure, body string) (int, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.Server.URL+procedure, strings.NewReader(body))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.Server.Client().Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

// TestDestructiveFiltersNeverWiden: an unknown enum name in Connect JSON is
// InvalidArgument (it used to be dropped, and the filter became "any
// status"); unknown fields are still ignored; a bulk delete or prune whose
// filter has no criterion needs all: true, and all excludes criteria.
func TestDestructiveFiltersNeverWiden(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.QuickDef)
	e.dispatch()
	token := e.token(acme, tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin)
	c := e.clients(token)
	ctx := t.Context()
	for _, id := range []string{"a", "b"} {
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: id, Input: []byte(`1`)}))
		require.NoError(t, err)
		c.waitDone(t, id)
	}

	for _, body := range []string{
		`{"filter":{"statuses":["INSTANCE_STATUS_COMPLETD"]}}`,
		`{"filter":{"statuses":["INSTANCE_STATUS_FAILED","INSTANCE_STATUS_COMPLETD"]}}`,
	} {
		code, out := postJSON(t, e, token, "/orchard.v1.ClientService/DeleteInstances", body)
		require.Equal(t, http.StatusBadRequest, code, out)
		require.Contains(t, out, "invalid_argument")
		require.Contains(t, out, `\"INSTANCE_STATUS_COMPLETD\" is not a value of orchard.v1.InstanceStatus`)
	}
	code, out := postJSON(t, e, token, "/orchard.v1.ClientService/CountInstances", `{"filter":{"statuses":["INSTANCE_STATUS_COMPLETED"]},"fieldOfANewerClient":1}`)
	require.Equal(t, http.StatusOK, code, out)
	require.Contains(t, out, `"total":"2"`)

	// No criterion: all is required; all with a criterion is refused.
	for _, r := range []*orchardv1.DeleteInstancesRequest{
		{Filter: &orchardv1.InstanceFilter{}},
		{Filter: &orchardv1.InstanceFilter{RootsOnly: true}},
		{All: true, Filter: &orchardv1.InstanceFilter{Name: "quick"}},
		{All: true, InstanceIds: []string{"a"}},
	} {
		_, err := c.client.DeleteInstances(ctx, req(r))
		requireCode(t, err, connect.CodeInvalidArgument, "all")
	}
	for _, r := range []*orchardv1.PruneExecutionsBulkRequest{
		{Options: &orchardv1.PruneOptions{KeepLast: 1}},
		{Options: &orchardv1.PruneOptions{KeepLast: 1}, Filter: &orchardv1.InstanceFilter{}},
		{Options: &orchardv1.PruneOptions{KeepLast: 1}, Filter: &orchardv1.InstanceFilter{Name: "quick"}, All: true},
	} {
		_, err := c.client.PruneExecutionsBulk(ctx, req(r))
		requireCode(t, err, connect.CodeInvalidArgument, "all")
	}
	counts, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	require.Equal(t, int64(2), counts.Msg.Total, "nothing was deleted")
	pruned, err := c.client.PruneExecutionsBulk(ctx, req(&orchardv1.PruneExecutionsBulkRequest{Options: &orchardv1.PruneOptions{KeepLast: 1}, All: true}))
	require.NoError(t, err)
	require.True(t, pruned.Msg.Complete)
	del, err := c.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{All: true}))
	require.NoError(t, err)
	require.Equal(t, int64(2), del.Msg.Counts.InstancesDeleted)
}

// row is what the brute-force evaluation of a filter reads of an instance.
type row struct {
	id, name                       string
	status                         orchardv1.InstanceStatus
	tags                           map[string]string
	created, updated, completed    time.Time
	parent                         string
	terminal, root, completedIsSet bool
}

func (r row) matches(f *orchardv1.InstanceFilter) bool {
	within := func(t time.Time, set bool, after, before *timestamppb.Timestamp) bool {
		if (after != nil || before != nil) && !set {
			return false
		}
		ms := t.UnixMilli()
		return (after == nil || ms >= after.AsTime().UnixMilli()) && (before == nil || ms < before.AsTime().UnixMilli())
	}
	switch {
	case len(f.InstanceIds) > 0 && !slices.Contains(f.InstanceIds, r.id),
		len(f.Statuses) > 0 && !slices.Contains(f.Statuses, r.status),
		f.Name != "" && r.name != f.Name,
		f.NamePrefix != "" && !strings.HasPrefix(r.name, f.NamePrefix),
		f.InstanceIdPrefix != "" && !strings.HasPrefix(r.id, f.InstanceIdPrefix),
		!within(r.created, true, f.CreatedAfter, f.CreatedBefore),
		!within(r.updated, true, f.UpdatedAfter, f.UpdatedBefore),
		!within(r.completed, r.completedIsSet, f.CompletedAfter, f.CompletedBefore),
		f.RootsOnly && !r.root,
		f.ParentInstanceId != "" && r.parent != f.ParentInstanceId:
		return false
	}
	for k, v := range f.Tags {
		if r.tags[k] != v {
			return false
		}
	}
	return true
}

// TestFilterProperty: for random filters over a varied population,
// ListInstances returns exactly the instances a brute-force evaluation of
// the filter over every row selects, CountInstances agrees, and
// DeleteInstances deletes only instances ListInstances(filter) returned
// (terminal roots).
func TestFilterProperty(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Hundreds of listings in a burst: more than the default request rate
	// allows when the machine is fast.
	acme := e.tenant("acme", &store.Limits{RequestsPerSecond: 100_000, Burst: 100_000}, testsystem.QuickDef, testsystem.WaiterDef)
	e.dispatch()
	c := e.all(acme)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(17, 42))
	names := []string{"quick", "waiter"}
	for i := range 24 {
		name := names[i%2]
		tags := map[string]string{"team": []string{"red", "blue"}[rng.IntN(2)]}
		if rng.IntN(2) == 0 {
			tags["tier"] = "gold"
		}
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{
			Name: name, InstanceId: fmt.Sprintf("%s-%02d", []string{"ord", "inv", "pay"}[i%3], i), Input: []byte(`1`), Tags: tags}))
		require.NoError(t, err)
	}
	// Quick ones complete; some waiters are cancelled, the others run.
	for i := 1; i < 24; i += 4 {
		_, err := c.client.CancelInstance(ctx, req(&orchardv1.CancelInstanceRequest{InstanceId: fmt.Sprintf("%s-%02d", []string{"ord", "inv", "pay"}[i%3], i)}))
		require.NoError(t, err)
	}
	all := func() []row {
		var rows []row
		var page string
		for {
			res, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1000, PageToken: page}))
			require.NoError(t, err)
			for _, in := range res.Msg.Instances {
				rows = append(rows, row{id: in.InstanceId, name: in.Name, status: in.Status, tags: in.Tags,
					created: in.CreatedAt.AsTime(), updated: in.UpdatedAt.AsTime(),
					completed: in.CompletedAt.AsTime(), completedIsSet: in.CompletedAt != nil,
					parent: in.ParentInstanceId, root: in.ParentInstanceId == "",
					terminal: in.Status == orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED || in.Status == orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED || in.Status == orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED})
			}
			if page = res.Msg.NextPageToken; page == "" {
				return rows
			}
		}
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, r := range all() {
			if r.terminal {
				n++
			}
		}
		return n == 18 // 12 quick, 6 cancelled
	}, 30*time.Second, 10*time.Millisecond)

	rows := all()
	times := make([]time.Time, 0, len(rows))
	for _, r := range rows {
		times = append(times, r.created, r.updated)
		if r.completedIsSet {
			times = append(times, r.completed)
		}
	}
	pickTime := func() *timestamppb.Timestamp {
		switch rng.IntN(4) {
		case 0:
			return timestamppb.New(time.Time{})
		case 1:
			return timestamppb.New(time.Unix(0, 0))
		default:
			return timestamppb.New(times[rng.IntN(len(times))].Add(time.Duration(rng.IntN(3)-1) * time.Millisecond))
		}
	}
	statuses := []orchardv1.InstanceStatus{
		orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED,
		orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED, orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED,
	}
	randomFilter := func() *orchardv1.InstanceFilter {
		f := &orchardv1.InstanceFilter{}
		for f.String() == "" || rng.IntN(3) == 0 {
			switch rng.IntN(11) {
			case 0:
				for range 1 + rng.IntN(3) {
					f.InstanceIds = append(f.InstanceIds, rows[rng.IntN(len(rows))].id)
				}
				slices.Sort(f.InstanceIds)
				f.InstanceIds = slices.Compact(f.InstanceIds)
			case 1:
				if s := statuses[rng.IntN(len(statuses))]; !slices.Contains(f.Statuses, s) {
					f.Statuses = append(f.Statuses, s)
				}
			case 2:
				f.Name = names[rng.IntN(2)]
			case 3:
				f.NamePrefix = []string{"q", "wa", "x"}[rng.IntN(3)]
			case 4:
				f.InstanceIdPrefix = []string{"ord", "inv-1", "pay-0", "z"}[rng.IntN(4)]
			case 5:
				f.CreatedAfter = pickTime()
			case 6:
				f.CreatedBefore = pickTime()
			case 7:
				f.CompletedBefore = pickTime()
			case 8:
				f.CompletedAfter = pickTime()
			case 9:
				f.Tags = map[string]string{"team": []string{"red", "blue"}[rng.IntN(2)]}
				if rng.IntN(2) == 0 {
					f.Tags["tier"] = "gold"
				}
			case 10:
				f.RootsOnly = true
			}
		}
		return f
	}
	list := func(f *orchardv1.InstanceFilter) []string {
		var ids []string
		var page string
		for {
			res, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{Filter: f, PageSize: 7, PageToken: page}))
			require.NoError(t, err)
			for _, in := range res.Msg.Instances {
				ids = append(ids, in.InstanceId)
			}
			if page = res.Msg.NextPageToken; page == "" {
				slices.Sort(ids)
				return ids
			}
		}
	}
	brute := func(f *orchardv1.InstanceFilter, rows []row) []string {
		var ids []string
		for _, r := range rows {
			if r.matches(f) {
				ids = append(ids, r.id)
			}
		}
		slices.Sort(ids)
		return ids
	}
	valid := func(f *orchardv1.InstanceFilter) bool {
		for _, r := range [][2]*timestamppb.Timestamp{{f.CreatedAfter, f.CreatedBefore}, {f.CompletedAfter, f.CompletedBefore}} {
			if r[0] != nil && r[1] != nil && !r[0].AsTime().Before(r[1].AsTime()) {
				return false
			}
		}
		return true
	}
	checked, deletes := 0, 0
	for checked < 100 {
		f := randomFilter()
		if !valid(f) {
			continue
		}
		checked++
		rows := all()
		want := brute(f, rows)
		require.Equal(t, want, list(f), "filter %v", f)
		count, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{Filter: f}))
		require.NoError(t, err)
		require.Equal(t, int64(len(want)), count.Msg.Total, "filter %v", f)
		if rng.IntN(10) != 0 || (f.RootsOnly && proto.Equal(f, &orchardv1.InstanceFilter{RootsOnly: true})) {
			continue // roots only is no criterion for a bulk delete (it takes roots only)
		}
		// A bulk delete takes only what the listing of the filter returned,
		// and of that, only the terminal roots (nothing here has a child).
		deletes++
		var deletable []string
		for _, r := range rows {
			if r.matches(f) && r.terminal && r.root {
				deletable = append(deletable, r.id)
			}
		}
		del, err := c.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{Filter: f}))
		require.NoError(t, err)
		gone := []string{}
		after := map[string]bool{}
		for _, r := range all() {
			after[r.id] = true
		}
		for _, r := range rows {
			if !after[r.id] {
				gone = append(gone, r.id)
			}
		}
		require.Subset(t, want, gone, "filter %v", f)
		require.ElementsMatch(t, deletable, gone, "filter %v", f)
		require.Equal(t, int64(len(gone)), del.Msg.Counts.InstancesDeleted)
	}
	t.Logf("%d random filters checked, %d bulk deletes", checked, deletes)
}
