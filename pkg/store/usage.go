package store

import (
	"context"
	"time"
)

// Usage reads what tenants store and what the retention janitor did: the
// numbers behind the API's usage and janitor-run views. It is a contract of
// its own beside Store so that implementations can grow into it; the
// CockroachDB store implements it.
type Usage interface {
	// GetUsage measures one tenant's usage. A tenant that stores nothing
	// (or does not exist) has zero usage: existence is the caller's check.
	GetUsage(ctx context.Context, p *GetUsageParams) (*TenantUsage, error)
	// ListUsage measures the usage of a page of tenants, by tenant id.
	ListUsage(ctx context.Context, p *ListUsageParams) ([]TenantUsage, error)
	// ListJanitorRuns lists retention runs, newest first.
	ListJanitorRuns(ctx context.Context, p *ListJanitorRunsParams) ([]JanitorRun, error)
}

// GetUsageParams names a tenant.
type GetUsageParams struct {
	TenantID string
}

// ListUsageParams pages through the registered tenants by id.
type ListUsageParams struct {
	// TenantIDs restricts the page to these tenants (at most MaxFilterIDs);
	// empty means every tenant.
	TenantIDs []string
	// AfterTenantID continues a listing after this tenant id.
	AfterTenantID string
	// Limit bounds the page: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
}

// TenantUsage is what one tenant stores, measured at one moment.
type TenantUsage struct {
	TenantID string
	// Instances counts instances by status (statuses with none are absent).
	Instances map[Status]int64
	// Executions and Events count the stored executions and history events.
	Executions int64
	Events     int64
	// QueuedMessages counts the orchestrator and worker queue rows.
	QueuedMessages int64
	// MeasuredAt is the store clock's time of the measurement.
	MeasuredAt time.Time
}

// ListJanitorRunsParams pages through retention runs, newest first.
type ListJanitorRunsParams struct {
	// TenantID restricts the list to one tenant; empty lists all tenants'.
	TenantID string
	// After continues a listing after this run (the last of the previous
	// page); nil starts with the newest.
	After *JanitorRunPosition
	// Limit bounds the page: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
}

// JanitorRunPosition is a run's place in the newest-first order.
type JanitorRunPosition struct {
	StartedAt time.Time
	TenantID  string
	RunID     string
}

// JanitorRun is what one retention run did for one tenant. Runs are written
// by the janitor; their result is stored as JSON with the field names of the
// json tags below.
type JanitorRun struct {
	RunID      string    `json:"-"`
	TenantID   string    `json:"-"`
	StartedAt  time.Time `json:"-"`
	FinishedAt time.Time `json:"-"` // zero while the run goes on

	InstancesDeleted  int64  `json:"instances_deleted,omitempty"`
	ExecutionsDeleted int64  `json:"executions_deleted,omitempty"`
	EventsDeleted     int64  `json:"events_deleted,omitempty"`
	Complete          bool   `json:"complete,omitempty"`
	Error             string `json:"error,omitempty"`
	Triggered         bool   `json:"triggered,omitempty"`
}

// Position is the run's place in the newest-first order.
func (r *JanitorRun) Position() JanitorRunPosition {
	return JanitorRunPosition{StartedAt: r.StartedAt, TenantID: r.TenantID, RunID: r.RunID}
}
