package crdb

import (
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/storetest"
)

var updateShapes = flag.Bool("update", false, "rewrite testdata/filter_shapes.sql")

const shapesFile = "testdata/filter_shapes.sql"

// The statements the filter builder makes, one per branch it can take:
// each order, each criterion of a filter, the driving tag, a position; the
// count by counters and by instances; the bulk prune's candidates by each
// way of naming statuses. testdata/filter_shapes.sql holds their text, so
// that they can be read and EXPLAINed without running Go (-update rewrites
// it); each one runs against the database, where the listing must return
// the instances it names, and where sqlcapture hands it to crdb-check.
func TestFilterShapes(t *testing.T) {
	t.Parallel()
	const tenant = "shapes"
	at := func(ms int64) *time.Time { t := time.UnixMilli(ms).UTC(); return &t }
	clock := storetest.NewManualClock(time.UnixMilli(1_000))
	s := New(testdb.Pool(t, 4), Options{Clock: clock})
	ctx := t.Context()
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: tenant}))
	// Created at 1000, 1001, 1002, 1003 ms.
	for _, in := range []struct {
		id, name string
		tags     map[string]string
	}{
		{"ord-1", "order", map[string]string{"region": "eu", "tier": "gold"}},
		{"ord-2", "order", map[string]string{"region": "us"}},
		{"bil-1", "billing", map[string]string{"region": "eu"}},
		{"bil_2", "billing", nil},
	} {
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, InstanceID: in.id, Name: in.name,
			Tags: in.tags, Start: store.Message{Kind: "start"}})
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
	}

	var out strings.Builder
	out.WriteString("-- The statements of the filter builder (filter.go), one per shape, as\n" +
		"-- TestFilterShapes makes them; go test ./pkg/store/crdb -run TestFilterShapes -update\n" +
		"-- rewrites this file.\n")
	write := func(name, sql string, args namedArgs) {
		fmt.Fprintf(&out, "\n-- %s\n", name)
		for _, name := range slices.Sorted(maps.Keys(args)) {
			a := args[name]
			v := fmt.Sprintf("%#v", a)
			if p, ok := a.(*int64); ok {
				v = "NULL"
				if p != nil {
					v = fmt.Sprint(*p)
				}
			}
			fmt.Fprintf(&out, "-- @%s = %s\n", name, v)
		}
		out.WriteString(sql + ";\n")
	}

	for _, tc := range []struct {
		name string
		p    store.ListInstancesParams
		want []string
	}{
		{"newest first", store.ListInstancesParams{}, []string{"bil_2", "bil-1", "ord-2", "ord-1"}},
		{"oldest first", store.ListInstancesParams{Order: store.OrderCreatedAsc}, []string{"ord-1", "ord-2", "bil-1", "bil_2"}},
		{"updated, newest first", store.ListInstancesParams{Order: store.OrderUpdatedDesc}, []string{"bil_2", "bil-1", "ord-2", "ord-1"}},
		{"updated, oldest first", store.ListInstancesParams{Order: store.OrderUpdatedAsc}, []string{"ord-1", "ord-2", "bil-1", "bil_2"}},
		{"after a position", store.ListInstancesParams{After: &store.InstancePosition{OrderKey: 1002, InstanceID: "bil-1"}}, []string{"ord-2", "ord-1"}},
		{"after a position, oldest first", store.ListInstancesParams{Order: store.OrderCreatedAsc,
			After: &store.InstancePosition{OrderKey: 1001, InstanceID: "ord-2"}}, []string{"bil-1", "bil_2"}},
		{"instance ids", store.ListInstancesParams{Filter: store.InstanceFilter{InstanceIDs: []string{"ord-1", "bil-1", "gone"}}}, []string{"bil-1", "ord-1"}},
		{"no instance ids", store.ListInstancesParams{Filter: store.InstanceFilter{InstanceIDs: []string{}}}, []string{}},
		{"one status", store.ListInstancesParams{Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusRunning}}}, []string{"bil_2", "bil-1", "ord-2", "ord-1"}},
		{"statuses", store.ListInstancesParams{Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted, store.StatusFailed}}}, []string{}},
		{"name", store.ListInstancesParams{Filter: store.InstanceFilter{Name: "order"}}, []string{"ord-2", "ord-1"}},
		{"name prefix", store.ListInstancesParams{Filter: store.InstanceFilter{NamePrefix: "bil"}}, []string{"bil_2", "bil-1"}},
		{"id prefix with LIKE's metacharacter", store.ListInstancesParams{Filter: store.InstanceFilter{IDPrefix: "bil_"}}, []string{"bil_2"}},
		{"id prefix without an upper bound", store.ListInstancesParams{Filter: store.InstanceFilter{IDPrefix: string(utf8.MaxRune)}}, []string{}},
		{"created range", store.ListInstancesParams{Filter: store.InstanceFilter{CreatedAfter: at(1001), CreatedBefore: at(1003)}}, []string{"bil-1", "ord-2"}},
		{"updated range", store.ListInstancesParams{Filter: store.InstanceFilter{UpdatedAfter: at(1000), UpdatedBefore: at(1002)}}, []string{"ord-2", "ord-1"}},
		{"completed range", store.ListInstancesParams{Filter: store.InstanceFilter{CompletedAfter: at(0), CompletedBefore: at(5000)}}, []string{}},
		{"one tag, creation order", store.ListInstancesParams{Filter: store.InstanceFilter{Tags: map[string]string{"region": "eu"}}}, []string{"bil-1", "ord-1"}},
		{"tags, creation order", store.ListInstancesParams{Filter: store.InstanceFilter{Tags: map[string]string{"region": "eu", "tier": "gold"}}}, []string{"ord-1"}},
		{"one tag, creation order, after a position", store.ListInstancesParams{Filter: store.InstanceFilter{Tags: map[string]string{"region": "eu"}},
			After: &store.InstancePosition{OrderKey: 1002, InstanceID: "bil-1"}}, []string{"ord-1"}},
		{"one tag, update order", store.ListInstancesParams{Order: store.OrderUpdatedAsc, Filter: store.InstanceFilter{Tags: map[string]string{"region": "eu"}}}, []string{"ord-1", "bil-1"}},
		{"roots only", store.ListInstancesParams{Filter: store.InstanceFilter{RootsOnly: true}}, []string{"bil_2", "bil-1", "ord-2", "ord-1"}},
		{"children of", store.ListInstancesParams{Filter: store.InstanceFilter{ParentInstanceID: "ord-1"}}, []string{}},
	} {
		tc.p.TenantID, tc.p.Limit = tenant, 10
		sql, args, err := listInstancesQuery(&tc.p, tc.p.Limit)
		require.NoError(t, err, tc.name)
		write("ListInstances: "+tc.name, sql, args)
		page, err := s.ListInstances(ctx, &tc.p)
		require.NoError(t, err, tc.name)
		got := []string{}
		for _, in := range page.Instances {
			got = append(got, in.InstanceID)
		}
		require.Equal(t, tc.want, got, tc.name)
	}

	for _, tc := range []struct {
		name string
		f    store.InstanceFilter
		want int64
	}{
		{"by counters", store.InstanceFilter{}, 4},
		{"by counters, statuses", store.InstanceFilter{Statuses: []store.Status{store.StatusRunning, store.StatusFailed}}, 4},
		{"by instances", store.InstanceFilter{NamePrefix: "ord"}, 2},
	} {
		p := &store.CountInstancesParams{TenantID: tenant, Filter: tc.f}
		sql, args := countInstancesQuery(p)
		write("CountInstances: "+tc.name, sql, args)
		res, err := s.CountInstances(ctx, p)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, res.Total, tc.name)
	}

	// No instance has two executions here: the candidates are none, and
	// the statements run all the same.
	for _, tc := range []struct {
		name string
		f    store.InstanceFilter
		o    store.PruneOptions
	}{
		{"any status", store.InstanceFilter{}, store.PruneOptions{}},
		{"one status", store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted}}, store.PruneOptions{KeepLast: 2}},
		{"statuses", store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted, store.StatusFailed}}, store.PruneOptions{CompletedBefore: at(5000)}},
		{"a filter on the instance", store.InstanceFilter{NamePrefix: "ord"}, store.PruneOptions{}},
	} {
		sql, args := pruneBulkCandidatesQuery(tenant, &tc.f, &tc.o, pruneKey{}, 10)
		write("PruneExecutionsBulk candidates: "+tc.name, sql, args)
		cands, err := s.pruneBulkCandidates(ctx, tenant, &tc.f, &tc.o, pruneKey{}, 10)
		require.NoError(t, err, tc.name)
		require.Empty(t, cands, tc.name)
	}

	// Every instance runs: no root is a bulk delete's candidate.
	for _, tc := range []struct {
		name string
		f    store.InstanceFilter
	}{
		{"any", store.InstanceFilter{}},
		{"completed before (retention)", store.InstanceFilter{CompletedBefore: at(5000)}},
		{"one status, a name prefix", store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted}, NamePrefix: "ord"}},
	} {
		after := bulkKey{completedAt: math.MinInt64}
		sql, args := bulkCandidatesQuery(tenant, &tc.f, after, 10)
		write("DeleteInstanceBulk candidates: "+tc.name, sql, args)
		keys, err := s.bulkCandidates(ctx, tenant, &tc.f, after, 10)
		require.NoError(t, err, tc.name)
		require.Empty(t, keys, tc.name)
	}

	// Two audit records and two janitor runs, of two tenants.
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: "shapes-other"}))
	for i, tenantID := range []string{tenant, "shapes-other"} {
		require.NoError(t, s.StartAudit(ctx, &store.AuditRecord{TenantID: tenantID, RecordID: fmt.Sprintf("rec-%d", i),
			Action: "DeleteInstance", StartedAt: *at(int64(2000 + i))}))
		_, err := s.StartJanitorRun(ctx, &store.StartJanitorRunParams{TenantID: tenantID})
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		p    store.ListAuditRecordsParams
		want []string
	}{
		{"every tenant", store.ListAuditRecordsParams{}, []string{"rec-1", "rec-0"}},
		{"one tenant, an action, a time range", store.ListAuditRecordsParams{TenantID: tenant, Action: "DeleteInstance",
			StartedAfter: at(1000), StartedBefore: at(3000)}, []string{"rec-0"}},
		{"one tenant, after a position", store.ListAuditRecordsParams{TenantID: tenant,
			After: &store.AuditPosition{StartedAt: *at(2000), TenantID: tenant, RecordID: "rec-0"}}, []string{}},
		{"every tenant, after a position", store.ListAuditRecordsParams{
			After: &store.AuditPosition{StartedAt: *at(2001), TenantID: "shapes-other", RecordID: "rec-1"}}, []string{"rec-0"}},
	} {
		tc.p.Limit = 10
		sql, args := auditRecordsQuery(&tc.p, tc.p.Limit)
		write("ListAuditRecords: "+tc.name, sql, args)
		recs, err := s.ListAuditRecords(ctx, &tc.p)
		require.NoError(t, err, tc.name)
		got := []string{}
		for _, r := range recs {
			got = append(got, r.RecordID)
		}
		require.Equal(t, tc.want, got, tc.name)
	}
	runs, err := s.ListJanitorRuns(ctx, &store.ListJanitorRunsParams{})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	for _, tc := range []struct {
		name    string
		p       store.ListJanitorRunsParams
		tenants []string
	}{
		{"every tenant", store.ListJanitorRunsParams{}, []string{"shapes-other", tenant}},
		{"one tenant", store.ListJanitorRunsParams{TenantID: tenant}, []string{tenant}},
		{"after a position", store.ListJanitorRunsParams{After: &store.JanitorRunPosition{StartedAt: runs[0].StartedAt,
			TenantID: runs[0].TenantID, RunID: runs[0].RunID}}, []string{tenant}},
	} {
		tc.p.Limit = 10
		sql, args, err := janitorRunsQuery(&tc.p, tc.p.Limit)
		require.NoError(t, err, tc.name)
		if tc.p.After != nil {
			args["after_run_id"] = "a run id" // a new one each run
		}
		write("ListJanitorRuns: "+tc.name, sql, args)
		got, err := s.ListJanitorRuns(ctx, &tc.p)
		require.NoError(t, err, tc.name)
		tenants := []string{}
		for _, r := range got {
			tenants = append(tenants, r.TenantID)
		}
		require.Equal(t, tc.tenants, tenants, tc.name)
	}

	if *updateShapes {
		require.NoError(t, os.WriteFile(shapesFile, []byte(out.String()), 0o644))
		return
	}
	want, err := os.ReadFile(shapesFile)
	require.NoError(t, err)
	require.Equal(t, string(want), out.String(), "the builder's shapes changed: run with -update and read the diff of %s", shapesFile)
}
