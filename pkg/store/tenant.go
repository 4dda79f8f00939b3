package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// Tenant states.
const (
	TenantActive    = "active"
	TenantSuspended = "suspended"
)

// Tenant is a customer of Orchard: its state, limits and retention policy.
type Tenant struct {
	TenantID string
	State    string
	// Limits is the tenant's limits as JSON (their meaning belongs to the
	// tenancy package); empty means the defaults.
	Limits    json.RawMessage
	Retention RetentionPolicy
	CreatedAt time.Time
	UpdatedAt time.Time
}

// GetTenantParams names a tenant.
type GetTenantParams struct {
	TenantID string
}

// ListTenantsParams pages through the tenants by id.
type ListTenantsParams struct {
	AfterTenantID string
	// Limit bounds the page: default 100, at most 1000.
	Limit int
}

// UpdateTenantParams changes what is set; nil fields stay as they are.
type UpdateTenantParams struct {
	TenantID  string
	State     *string
	Limits    json.RawMessage
	Retention *RetentionPolicy
}

// Retention says how long what ran is kept. A zero duration keeps forever.
type Retention struct {
	// Completed, Failed and Cancelled keep terminal instances this long
	// after they completed, by status.
	Completed time.Duration `json:"completed,omitempty"`
	Failed    time.Duration `json:"failed,omitempty"`
	Cancelled time.Duration `json:"cancelled,omitempty"`
	// Chain governs the executions of continue-as-new chains.
	Chain ChainRetention `json:"chain,omitzero"`
}

// ChainRetention governs the old executions of continue-as-new chains.
type ChainRetention struct {
	// KeepLast keeps the newest executions (the current one included); 0
	// keeps all.
	KeepLast int `json:"keep_last,omitempty"`
	// MaxAge deletes old executions completed longer ago than this.
	MaxAge time.Duration `json:"max_age,omitempty"`
	// AutoPrune applies KeepLast at each continue-as-new, rather than
	// waiting for the janitor.
	AutoPrune bool `json:"auto_prune,omitempty"`
}

// RetentionPolicy is a tenant's retention: a default, and overrides per
// orchestration name. An instance may override both.
type RetentionPolicy struct {
	Default Retention            `json:"default,omitzero"`
	ByName  map[string]Retention `json:"by_name,omitempty"`
}

// For returns the retention that applies to an instance of an orchestration
// name: the instance's own override when it has one, else the name's, else
// the tenant's default. The most specific one applies as a whole.
func (p RetentionPolicy) For(name string, override *Retention) Retention {
	if override != nil {
		return *override
	}
	if r, ok := p.ByName[name]; ok {
		return r
	}
	return p.Default
}

// Validate reports a retention that cannot be applied.
func (r Retention) Validate() error {
	switch {
	case r.Completed < 0 || r.Failed < 0 || r.Cancelled < 0 || r.Chain.MaxAge < 0:
		return invalidArgument("retention durations must not be negative")
	case r.Chain.KeepLast < 0:
		return invalidArgument("chain keep_last must not be negative")
	case r.Chain.AutoPrune && r.Chain.KeepLast == 0:
		return invalidArgument("chain auto_prune needs keep_last")
	}
	return nil
}

// Validate reports a policy that cannot be applied.
func (p RetentionPolicy) Validate() error {
	if err := p.Default.Validate(); err != nil {
		return err
	}
	for name, r := range p.ByName {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("retention of %q: %w", name, err)
		}
	}
	return nil
}

func invalidArgument(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidArgument, msg) }
