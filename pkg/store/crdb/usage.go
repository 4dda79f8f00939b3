package crdb

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var _ store.Usage = (*Store)(nil)

var (
	sqlListUsageTenants         = stmt("ListUsageTenants")
	sqlUsageInstancesByStatus   = stmt("UsageInstancesByStatus")
	sqlUsageExecutionsAndEvents = stmt("UsageExecutionsAndEvents")
	sqlUsageQueuedMessages      = stmt("UsageQueuedMessages")
)

// GetUsage measures one tenant: instances by status from the maintained
// counters, executions and events from the instances' own counts, and the
// rows waiting in its queues.
func (s *Store) GetUsage(ctx context.Context, p *store.GetUsageParams) (*store.TenantUsage, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	out, err := s.measure(ctx, []string{p.TenantID})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// ListUsage measures a page of registered tenants.
func (s *Store) ListUsage(ctx context.Context, p *store.ListUsageParams) ([]store.TenantUsage, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	if len(p.TenantIDs) > store.MaxFilterIDs {
		return nil, invalid("at most %d tenant ids, got %d", store.MaxFilterIDs, len(p.TenantIDs))
	}
	var ids []string
	err = s.retry(ctx, func(ctx context.Context) error {
		ids = ids[:0]
		rows, err := s.pool.Query(ctx, sqlListUsageTenants, namedArgs{
			"after_tenant_id": p.AfterTenantID, "tenant_ids": nonNil(p.TenantIDs), "limit": limit})
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return s.measure(ctx, ids)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// measure reads the usage of tenants, in the order given, in one read-only
// round trip of three grouped statements.
func (s *Store) measure(ctx context.Context, tenants []string) ([]store.TenantUsage, error) {
	now := s.opts.Clock.Now().UTC()
	var out []store.TenantUsage
	err := s.retry(ctx, func(ctx context.Context) error {
		out = make([]store.TenantUsage, len(tenants))
		index := make(map[string]*store.TenantUsage, len(tenants))
		for i, t := range tenants {
			out[i] = store.TenantUsage{TenantID: t, Instances: map[store.Status]int64{}, MeasuredAt: now}
			index[t] = &out[i]
		}
		b := &pgx.Batch{}
		ids := namedArgs{"tenant_ids": tenants}
		b.Queue(sqlUsageInstancesByStatus, ids)
		b.Queue(sqlUsageExecutionsAndEvents, ids)
		b.Queue(sqlUsageQueuedMessages, ids)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		var tenant, status string
		var n, m int64
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&tenant, &status, &n}, func() error {
			index[tenant].Instances[store.Status(status)] = n
			return nil
		}); err != nil {
			return err
		}
		if rows, err = br.Query(); err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&tenant, &n, &m}, func() error {
			index[tenant].Executions, index[tenant].Events = n, m
			return nil
		}); err != nil {
			return err
		}
		if rows, err = br.Query(); err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&tenant, &n}, func() error {
			index[tenant].QueuedMessages = n
			return nil
		}); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListJanitorRuns lists runs newest first: (started_at, tenant_id, run_id)
// descending, resumed after the last run of the previous page.
func (s *Store) ListJanitorRuns(ctx context.Context, p *store.ListJanitorRunsParams) ([]store.JanitorRun, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	sql, args, err := janitorRunsQuery(p, limit)
	if err != nil {
		return nil, err
	}
	var out []store.JanitorRun
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, args)
		if err != nil {
			return err
		}
		var r store.JanitorRun
		var started int64
		var finished *int64
		var result []byte
		_, err = pgx.ForEachRow(rows, []any{&r.TenantID, &r.RunID, &started, &finished, &result}, func() error {
			run := store.JanitorRun{}
			if err := json.Unmarshal(result, &run); err != nil {
				return fmt.Errorf("janitor run %s: stored result: %w", r.RunID, err)
			}
			run.TenantID, run.RunID = r.TenantID, r.RunID
			run.StartedAt, run.FinishedAt = fromMillis(started), fromNullMillis(finished)
			out = append(out, run)
			return nil
		})
		return err
	})
	return out, err
}

// janitorRunsQuery builds the statement of a page of limit janitor runs.
func janitorRunsQuery(p *store.ListJanitorRunsParams, limit int) (sql string, args namedArgs, err error) {
	q := &query{}
	if p.TenantID != "" {
		q.where("tenant_id = %s", q.arg("tenant_id", p.TenantID))
	}
	if a := p.After; a != nil {
		if !validToken(a.RunID) {
			return "", nil, invalid("janitor run position: run id is not a UUID")
		}
		q.where("(started_at, tenant_id, run_id) < (%s, %s, %s::UUID)",
			q.arg("after_started_at", a.StartedAt.UnixMilli()), q.arg("after_tenant_id", a.TenantID), q.arg("after_run_id", a.RunID))
	}
	return fmt.Sprintf(`SELECT tenant_id, run_id::TEXT, started_at, finished_at, result FROM janitor_runs
WHERE %s ORDER BY started_at DESC, tenant_id DESC, run_id DESC LIMIT %d`, q.whereSQL(), limit), q.args, nil
}
