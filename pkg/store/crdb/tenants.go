package crdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var (
	sqlCreateTenant = stmt("CreateTenant")
	sqlGetTenant    = stmt("GetTenant")
	sqlListTenants  = stmt("ListTenants")
	sqlUpdateTenant = stmt("UpdateTenant")
)

// CreateTenant registers an active tenant. ErrAlreadyExists when it is
// registered.
func (s *Store) CreateTenant(ctx context.Context, p *store.CreateTenantParams) error {
	if p.TenantID == "" {
		return invalid("tenant id is empty")
	}
	now := s.now()
	var inserted bool
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, sqlCreateTenant, namedArgs{"tenant_id": p.TenantID, "now": now})
		inserted = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return err
	}
	if !inserted {
		return fmt.Errorf("tenant %q: %w", p.TenantID, store.ErrAlreadyExists)
	}
	return nil
}

// scanTenant reads the columns the tenant statements return. Limits that
// do not parse are logged and read as the defaults: this is the one place
// stored limits are parsed.
func (s *Store) scanTenant(ctx context.Context, row pgx.Row) (*store.Tenant, error) {
	var t store.Tenant
	var limits, retention []byte
	var created, updated int64
	if err := row.Scan(&t.TenantID, &t.State, &limits, &retention, &created, &updated); err != nil {
		return nil, err
	}
	var err error
	if t.Limits, err = store.ParseLimits(limits); err != nil {
		s.log.WarnContext(ctx, "store: tenant's stored limits are invalid: using the defaults",
			slog.String("tenant", t.TenantID), slog.Any("error", err))
	}
	if err := json.Unmarshal(retention, &t.Retention); err != nil {
		return nil, fmt.Errorf("tenant %q: stored retention policy: %w", t.TenantID, err)
	}
	t.CreatedAt, t.UpdatedAt = fromMillis(created), fromMillis(updated)
	return &t, nil
}

// GetTenant reads a tenant.
func (s *Store) GetTenant(ctx context.Context, p *store.GetTenantParams) (*store.Tenant, error) {
	var t *store.Tenant
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		t, err = s.scanTenant(ctx, s.pool.QueryRow(ctx, sqlGetTenant, namedArgs{"tenant_id": p.TenantID}))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("tenant %q: %w", p.TenantID, store.ErrNotFound)
	}
	return t, err
}

// ListTenants pages through the tenants by id.
func (s *Store) ListTenants(ctx context.Context, p *store.ListTenantsParams) ([]store.Tenant, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var out []store.Tenant
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sqlListTenants, namedArgs{"after_tenant_id": p.AfterTenantID, "limit": limit})
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, err := s.scanTenant(ctx, rows)
			if err != nil {
				return err
			}
			out = append(out, *t)
		}
		return rows.Err()
	})
	return out, err
}

// UpdateTenant changes what the params set and returns the tenant.
func (s *Store) UpdateTenant(ctx context.Context, p *store.UpdateTenantParams) (*store.Tenant, error) {
	var state *string
	if p.State != nil {
		switch *p.State {
		case store.TenantActive, store.TenantSuspended, store.TenantDeleting:
		default:
			return nil, invalid("tenant state %q: want %q, %q or %q", *p.State, store.TenantActive, store.TenantSuspended, store.TenantDeleting)
		}
		state = p.State
	}
	var limits, retention []byte
	if p.Limits != nil {
		if err := p.Limits.Validate(); err != nil {
			return nil, invalid("tenant %v", err)
		}
		var err error
		if limits, err = json.Marshal(p.Limits); err != nil {
			return nil, err
		}
	}
	if p.Retention != nil {
		if err := p.Retention.Validate(); err != nil {
			return nil, err
		}
		var err error
		if retention, err = json.Marshal(p.Retention); err != nil {
			return nil, err
		}
	}
	now := s.now()
	var t *store.Tenant
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		t, err = s.scanTenant(ctx, s.pool.QueryRow(ctx, sqlUpdateTenant, namedArgs{
			"tenant_id": p.TenantID, "state": state, "limits": limits, "retention": retention, "now": now}))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("tenant %q: %w", p.TenantID, store.ErrNotFound)
	}
	return t, err
}

// pageLimit applies the default and maximum page size of listings.
func pageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return store.DefaultListLimit, nil
	case limit < 0 || limit > store.MaxListLimit:
		return 0, invalid("limit must be between 1 and %d, got %d", store.MaxListLimit, limit)
	}
	return limit, nil
}
