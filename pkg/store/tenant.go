package store

import (
	"cmp"
	"fmt"
	"time"
)

// Tenant states.
const (
	TenantActive    = "active"
	TenantSuspended = "suspended"
	// TenantDeleting is a tenant being erased: refused everywhere, its
	// rows going in batches.
	TenantDeleting = "deleting"
)

// Tenant is a customer of Orchard: its state, limits and retention policy.
type Tenant struct {
	TenantID string
	State    string
	// Limits is what the tenant may use; zero fields mean the defaults.
	// Stored limits that do not parse (they bypassed validation) read as
	// all defaults, so a bad row never stops a tenant's work.
	Limits    Limits
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
	Limits    *Limits
	Retention *RetentionPolicy
}

// Retention says how long what ran is kept. Every field is optional: an
// unset field (nil, or 0 for KeepLast) takes its value from the rule the
// retention overrides, and a field unset everywhere keeps forever. A set
// duration of zero removes at the janitor's next run.
type Retention struct {
	// Completed, Failed and Cancelled keep terminal instances this long
	// after they completed, by status.
	Completed *time.Duration `json:"completed,omitempty"`
	Failed    *time.Duration `json:"failed,omitempty"`
	Cancelled *time.Duration `json:"cancelled,omitempty"`
	// Chain governs the executions of continue-as-new chains.
	Chain ChainRetention `json:"chain,omitzero"`
}

// ChainRetention governs the old executions of continue-as-new chains.
type ChainRetention struct {
	// KeepLast keeps the newest executions (the current one included); 0
	// is unset.
	KeepLast int `json:"keep_last,omitempty"`
	// MaxAge prunes past executions completed longer ago than this. With
	// KeepLast, an execution goes only when both say so.
	MaxAge *time.Duration `json:"max_age,omitempty"`
	// AutoPrune applies KeepLast at each continue-as-new, rather than
	// waiting for the janitor.
	AutoPrune *bool `json:"auto_prune,omitempty"`
}

// IsZero reports a retention that sets nothing.
func (r Retention) IsZero() bool {
	return r.Completed == nil && r.Failed == nil && r.Cancelled == nil && r.Chain.IsZero()
}

// IsZero reports a chain retention that sets nothing.
func (c ChainRetention) IsZero() bool {
	return c.KeepLast == 0 && c.MaxAge == nil && c.AutoPrune == nil
}

// KeepFor says how long a terminal instance of a status is kept; false
// when it is kept until deleted.
func (r Retention) KeepFor(s Status) (time.Duration, bool) {
	var d *time.Duration
	switch s {
	case StatusCompleted:
		d = r.Completed
	case StatusFailed:
		d = r.Failed
	case StatusCancelled:
		d = r.Cancelled
	}
	if d == nil {
		return 0, false
	}
	return *d, true
}

// AutoPrunes reports whether the chain is pruned at each continue-as-new,
// and to how many executions.
func (c ChainRetention) AutoPrunes() (keepLast int, ok bool) {
	if c.AutoPrune == nil || !*c.AutoPrune || c.KeepLast <= 0 {
		return 0, false
	}
	return c.KeepLast, true
}

// Prune says which past executions of a chain the janitor prunes now;
// false when the rule prunes nothing.
func (c ChainRetention) Prune(now time.Time) (PruneOptions, bool) {
	o := PruneOptions{KeepLast: c.KeepLast}
	if c.MaxAge != nil {
		o.CompletedBefore = new(now.Add(-*c.MaxAge))
	}
	return o, c.KeepLast > 0 || c.MaxAge != nil
}

// over fills the fields r leaves unset from base: field by field.
func (r Retention) over(base Retention) Retention {
	out := r
	out.Completed = cmp.Or(r.Completed, base.Completed)
	out.Failed = cmp.Or(r.Failed, base.Failed)
	out.Cancelled = cmp.Or(r.Cancelled, base.Cancelled)
	out.Chain.KeepLast = cmp.Or(r.Chain.KeepLast, base.Chain.KeepLast)
	out.Chain.MaxAge = cmp.Or(r.Chain.MaxAge, base.Chain.MaxAge)
	out.Chain.AutoPrune = cmp.Or(r.Chain.AutoPrune, base.Chain.AutoPrune)
	return out
}

// RetentionPolicy is a tenant's retention: a default, and rules per
// orchestration name that override it field by field. An instance's own
// retention overrides both.
type RetentionPolicy struct {
	Default Retention            `json:"default,omitzero"`
	ByName  map[string]Retention `json:"by_name,omitempty"`
}

// For returns the retention that applies to an instance of an orchestration
// name: each field from the instance's own override when it sets it, else
// from the name's rule, else from the tenant's default.
func (p RetentionPolicy) For(name string, override *Retention) Retention {
	r := p.ByName[name].over(p.Default)
	if override != nil {
		r = override.over(r)
	}
	return r
}

// IsZero reports a policy that keeps everything forever.
func (p RetentionPolicy) IsZero() bool {
	if !p.Default.IsZero() {
		return false
	}
	for _, r := range p.ByName {
		if !r.IsZero() {
			return false
		}
	}
	return true
}

// MaxRetention bounds every retention duration (3650 days).
const MaxRetention = 3650 * 24 * time.Hour

// Validate reports a retention that cannot be applied.
func (r Retention) Validate() error {
	for _, d := range []*time.Duration{r.Completed, r.Failed, r.Cancelled, r.Chain.MaxAge} {
		if d != nil && (*d < 0 || *d > MaxRetention) {
			return invalidArgument(fmt.Sprintf("retention durations must be between 0 and %v", MaxRetention))
		}
	}
	if r.Chain.KeepLast < 0 {
		return invalidArgument("chain keep_last must not be negative")
	}
	return nil
}

// Validate reports a policy that cannot be applied, each rule as it
// applies (merged with the default).
func (p RetentionPolicy) Validate() error {
	if err := p.Default.Validate(); err != nil {
		return err
	}
	if err := p.For("", nil).validateAutoPrune(); err != nil {
		return err
	}
	for name, r := range p.ByName {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("retention of %q: %w", name, err)
		}
		if err := p.For(name, nil).validateAutoPrune(); err != nil {
			return fmt.Errorf("retention of %q: %w", name, err)
		}
	}
	return nil
}

func (r Retention) validateAutoPrune() error {
	if r.Chain.AutoPrune != nil && *r.Chain.AutoPrune && r.Chain.KeepLast == 0 {
		return invalidArgument("chain auto_prune needs keep_last")
	}
	return nil
}

func invalidArgument(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidArgument, msg) }
