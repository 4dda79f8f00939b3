// Package retention applies a tenant's retention policy: it finds the
// terminal instance trees whose rule says they have been kept long enough
// and deletes them, then prunes the past executions of continue-as-new
// chains, all through the store's bounded deletes and prunes. Preview
// counts the same thing without deleting. The janitor applies; the API
// previews. It never deletes a running instance, nor a sub-orchestration
// on its own: trees go whole, judged by their root's rule.
package retention

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/orchardhq/orchard/pkg/store"
)

// Store is what retention needs of the store.
type Store interface {
	store.Management
	store.Janitor
}

// DefaultPageSize is how many candidates one read takes, and so the most
// trees one bulk delete is asked for.
const DefaultPageSize = 500

// terminal are the statuses retention deletes, in the order it sweeps them.
var terminal = []store.Status{store.StatusCompleted, store.StatusFailed, store.StatusCancelled}

// Options bound one application of a policy.
type Options struct {
	// Now is the time the rules are judged at.
	Now time.Time
	// PageSize bounds the candidates read at a time (DefaultPageSize).
	PageSize int
	// Deadline stops the work between batches; zero: none. What is left is
	// reported as incomplete.
	Deadline time.Time
	// OnBatch, when set, sees the counts of each batch as it commits; its
	// calls never overlap.
	OnBatch func(Result)
	// Pacer paces the work beside the tenants' own load (see Pacer); nil:
	// no pause between batches.
	Pacer *Pacer
	// Audit, when set, is the audit record every batch counts what it
	// removed into, in its own transaction (store's Audit params).
	Audit string
}

// deleteConcurrency is how many bulk deletes run at once. Flat out (no
// pacer), two, one per core of a small database server: they do not roll
// each other back as long as each transaction stays within the store's
// bound on the trees it reads (past it, PostgreSQL's serializable isolation
// locks whole tables). Paced, one: two cost more database time per event
// removed, and beside the tenants' own load that time is theirs. The next
// page of candidates is read while they run.
func deleteConcurrency(p *Pacer) int {
	if p == nil {
		return 2
	}
	return 1
}

// batchTimeout bounds one batch run under BatchContext: a batch the
// database has not finished by then is a fault, not work.
const batchTimeout = time.Minute

// BatchContext is the context one batch's delete, prune or erase runs
// under: the end of the job's context does not cancel it. A batch cut off
// at its commit may have committed without the caller learning so, and
// then nothing counts what it removed; the job stops between batches
// instead, and batchTimeout still bounds each one.
func BatchContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
}

func (o *Options) pageSize() int {
	if o.PageSize <= 0 {
		return DefaultPageSize
	}
	return min(o.PageSize, store.MaxFilterIDs)
}

func (o *Options) expired() bool { return !o.Deadline.IsZero() && time.Now().After(o.Deadline) }

// Result counts what an application removed.
type Result struct {
	Deleted store.DeleteResult
	Pruned  store.PruneResult
	// Complete is false when the deadline stopped the work.
	Complete bool
}

func (r *Result) add(o Result) {
	r.Deleted.Add(o.Deleted)
	r.Pruned.InstancesProcessed += o.Pruned.InstancesProcessed
	r.Pruned.InstancesPruned += o.Pruned.InstancesPruned
	r.Pruned.ExecutionsDeleted += o.Pruned.ExecutionsDeleted
	r.Pruned.EventsDeleted += o.Pruned.EventsDeleted
}

// deletedRows counts the rows a delete removed, what its time is paced by.
func deletedRows(r store.DeleteResult) int64 {
	return r.InstancesDeleted + r.ExecutionsDeleted + r.EventsDeleted + r.QueueMessagesDeleted
}

// Executions counts the executions removed by deletes and prunes.
func (r Result) Executions() int64 { return r.Deleted.ExecutionsDeleted + r.Pruned.ExecutionsDeleted }

// Events counts the history events removed by deletes and prunes.
func (r Result) Events() int64 { return r.Deleted.EventsDeleted + r.Pruned.EventsDeleted }

// Apply deletes the trees the policy says have expired and prunes the
// chains it trims, until nothing is left or the deadline passes.
func Apply(ctx context.Context, s Store, tenantID string, policy store.RetentionPolicy, o Options) (Result, error) {
	var total Result
	var mu sync.Mutex
	report := func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		total.add(r)
		if o.OnBatch != nil {
			o.OnBatch(r)
		}
	}
	// The delete of a batch runs while the next page is read.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deleteConcurrency(o.Pacer))
	complete, err := forEachExpired(gctx, s, tenantID, policy, &o, func(batch []store.ExpiryCandidate) error {
		g.Go(func() error {
			start := time.Now()
			bctx, cancel := BatchContext(gctx)
			res, err := s.DeleteExpired(bctx, &store.DeleteExpiredParams{TenantID: tenantID, Roots: batch, Audit: o.Audit})
			cancel()
			if res != nil {
				report(Result{Deleted: *res})
			}
			if err == nil {
				o.Pacer.rest(gctx, time.Since(start), deletedRows(*res))
			}
			return err
		})
		return nil
	})
	err = errors.Join(err, g.Wait())
	if err != nil || !complete {
		return total, err
	}
	complete, err = forEachChain(ctx, s, tenantID, policy, &o, func(opts store.PruneOptions, group []store.ChainCandidate) error {
		ids := make([]string, len(group))
		for i, c := range group {
			ids[i] = c.InstanceID
		}
		start := time.Now()
		bctx, cancel := BatchContext(ctx)
		res, err := s.PruneExecutionsBulk(bctx, &store.PruneExecutionsBulkParams{
			TenantID: tenantID, Filter: store.InstanceFilter{InstanceIDs: ids}, Options: opts, Limit: len(ids), Audit: o.Audit,
		})
		cancel()
		if res != nil {
			report(Result{Pruned: res.PruneResult})
		}
		if err == nil {
			o.Pacer.rest(ctx, time.Since(start), res.ExecutionsDeleted+res.EventsDeleted)
		}
		return err
	})
	total.Complete = complete
	return total, err
}

// forEachExpired hands fn the expired roots a page at a time, status by
// status: those that follow the policy, a scan per rule, each up to its
// own cutoff (the names of a rule that keeps longer or shorter than the
// default, then the default without them), then those with a retention of
// their own, which the database judges. So a run reads what it can delete
// and nothing it has to keep. It reports false when the deadline stopped
// it.
func forEachExpired(ctx context.Context, s Store, tenantID string, policy store.RetentionPolicy, o *Options, fn func([]store.ExpiryCandidate) error) (bool, error) {
	for _, sc := range expiryScans(policy, o.Now) {
		var after *store.ExpiryCandidate
		for {
			if o.expired() {
				return false, nil
			}
			p := &store.ListExpiryCandidatesParams{
				TenantID: tenantID, Status: sc.status, Names: sc.names, ExcludeNames: sc.exclude,
				CompletedBefore: sc.cutoff, After: after, Limit: o.pageSize(),
			}
			if sc.overrides {
				p.Overrides, p.Policy = true, &policy
			}
			page, err := s.ListExpiryCandidates(ctx, p)
			if err != nil {
				return false, err
			}
			if len(page) == 0 {
				break
			}
			after = &page[len(page)-1]
			var batch []store.ExpiryCandidate
			for _, c := range page {
				if expired(policy, c, o.Now) {
					batch = append(batch, c)
				}
			}
			if len(batch) > 0 {
				if err := fn(batch); err != nil {
					return false, err
				}
			}
			if len(page) < o.pageSize() {
				break
			}
		}
	}
	return true, nil
}

// expiryScan is one read of candidates: one status, and the roots of one
// rule up to its cutoff, or those with a retention of their own.
type expiryScan struct {
	status         store.Status
	names, exclude []string
	overrides      bool
	cutoff         time.Time
}

// expiryScans are the reads of a run at now, status by status: a scan per
// time kept by rules by name that differ from the default, the default's
// scan without those names, and the instances with their own retention.
func expiryScans(policy store.RetentionPolicy, now time.Time) []expiryScan {
	names := slices.Sorted(maps.Keys(policy.ByName))
	var scans []expiryScan
	for _, st := range terminal {
		def, hasDefault := policy.For("", nil).KeepFor(st)
		byKeep := map[time.Duration][]string{}
		var apart []string
		for _, name := range names {
			keep, ok := policy.For(name, nil).KeepFor(st)
			if ok && hasDefault && keep == def {
				continue // the default's scan reads it
			}
			apart = append(apart, name)
			if ok {
				byKeep[keep] = append(byKeep[keep], name)
			}
		}
		for _, keep := range slices.Sorted(maps.Keys(byKeep)) {
			scans = append(scans, expiryScan{status: st, names: byKeep[keep], cutoff: now.Add(-keep)})
		}
		if hasDefault {
			scans = append(scans, expiryScan{status: st, exclude: apart, cutoff: now.Add(-def)})
		}
		scans = append(scans, expiryScan{status: st, overrides: true, cutoff: now})
	}
	return scans
}

// expired reports whether a candidate's rule lets it go now: it completed
// strictly before now minus what the rule keeps.
func expired(policy store.RetentionPolicy, c store.ExpiryCandidate, now time.Time) bool {
	if !c.Status.Terminal() {
		return false
	}
	keep, ok := policy.For(c.Name, c.Retention).KeepFor(c.Status)
	return ok && c.CompletedAt.Before(now.Add(-keep))
}

// forEachChain hands fn, a page at a time, the instances with past
// executions that their rule prunes, grouped by the prune options the rule
// gives. It reports false when the deadline stopped it.
func forEachChain(ctx context.Context, s Store, tenantID string, policy store.RetentionPolicy, o *Options, fn func(store.PruneOptions, []store.ChainCandidate) error) (bool, error) {
	if !prunesAny(policy) {
		return true, nil
	}
	after := ""
	for {
		if o.expired() {
			return false, nil
		}
		page, err := s.ListChainCandidates(ctx, &store.ListChainCandidatesParams{TenantID: tenantID, AfterID: after, Limit: o.pageSize()})
		if err != nil {
			return false, err
		}
		if len(page) == 0 {
			return true, nil
		}
		after = page[len(page)-1].InstanceID
		// Grouped by the options' values (CompletedBefore is a pointer).
		type key struct {
			keepLast int
			before   int64
			bounded  bool
		}
		groups := map[key][]store.ChainCandidate{}
		opts := map[key]store.PruneOptions{}
		var order []key
		for _, c := range page {
			po, ok := policy.For(c.Name, c.Retention).Chain.Prune(o.Now)
			if !ok {
				continue
			}
			k := key{keepLast: po.KeepLast}
			if po.CompletedBefore != nil {
				k.before, k.bounded = po.CompletedBefore.UnixNano(), true
			}
			if _, seen := groups[k]; !seen {
				order = append(order, k)
				opts[k] = po
			}
			groups[k] = append(groups[k], c)
		}
		for _, k := range order {
			if err := fn(opts[k], groups[k]); err != nil {
				return false, err
			}
		}
		if len(page) < o.pageSize() {
			return true, nil
		}
	}
}

// prunesAny reports whether some rule could prune a chain: the default,
// a rule by name, or an instance's own (which can only carry durations
// for terminal instances, so it never adds a chain rule).
func prunesAny(policy store.RetentionPolicy) bool {
	if _, ok := policy.For("", nil).Chain.Prune(time.Time{}); ok {
		return true
	}
	for name := range policy.ByName {
		if _, ok := policy.For(name, nil).Chain.Prune(time.Time{}); ok {
			return true
		}
	}
	return false
}

func ids(cs []store.ExpiryCandidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.InstanceID
	}
	return out
}

// Preview is what applying a policy would remove now.
type Preview struct {
	// Instances, Executions and Events are the totals, deletes (trees,
	// descendants included) and prunes together.
	Instances  int64
	Executions int64
	Events     int64
	// Groups break the deletes down by the root's status and name.
	Groups []Group
	// PrunedInstances, PrunedExecutions and PrunedEvents are the prunes of
	// continue-as-new chains.
	PrunedInstances  int64
	PrunedExecutions int64
	PrunedEvents     int64
	// OldestCompleted and NewestCompleted bound the completion times of the
	// roots that would go (zero when none).
	OldestCompleted time.Time
	NewestCompleted time.Time
	// Truncated is true when counting stopped at the cap or the deadline:
	// the figures are then lower bounds.
	Truncated bool
}

// Group is what would be deleted of one status and name.
type Group struct {
	Status     store.Status
	Name       string
	Instances  int64
	Executions int64
	Events     int64
}

// PreviewOptions bound a preview.
type PreviewOptions struct {
	Options
	// MaxRoots caps the trees counted (DefaultMaxPreviewRoots).
	MaxRoots int
}

// DefaultMaxPreviewRoots caps a preview's count of trees.
const DefaultMaxPreviewRoots = 100_000

// Preview counts what Apply would remove now, deleting nothing.
func PreviewPolicy(ctx context.Context, s Store, tenantID string, policy store.RetentionPolicy, o PreviewOptions) (*Preview, error) {
	maxRoots := o.MaxRoots
	if maxRoots <= 0 {
		maxRoots = DefaultMaxPreviewRoots
	}
	out := &Preview{}
	groups := map[Group]*Group{}
	deleted := map[string]bool{}
	capped := false
	complete, err := forEachExpired(ctx, s, tenantID, policy, &o.Options, func(batch []store.ExpiryCandidate) error {
		if capped {
			return nil
		}
		sums, err := s.SummarizeTrees(ctx, &store.SummarizeTreesParams{TenantID: tenantID, RootIDs: ids(batch)})
		if err != nil {
			return err
		}
		for _, c := range batch {
			t, ok := sums[c.InstanceID]
			if !ok || !t.Terminal {
				continue
			}
			if len(deleted) >= maxRoots {
				capped = true
				return nil
			}
			deleted[c.InstanceID] = true
			key := Group{Status: c.Status, Name: c.Name}
			g := groups[key]
			if g == nil {
				g = &Group{Status: c.Status, Name: c.Name}
				groups[key] = g
			}
			g.Instances += t.Instances
			g.Executions += t.Executions
			g.Events += t.Events
			out.Instances += t.Instances
			out.Executions += t.Executions
			out.Events += t.Events
			if out.OldestCompleted.IsZero() || c.CompletedAt.Before(out.OldestCompleted) {
				out.OldestCompleted = c.CompletedAt
			}
			if c.CompletedAt.After(out.NewestCompleted) {
				out.NewestCompleted = c.CompletedAt
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if complete && !capped {
		complete, err = forEachChain(ctx, s, tenantID, policy, &o.Options, func(opts store.PruneOptions, group []store.ChainCandidate) error {
			var ids []string
			for _, c := range group {
				// A chain in a tree that goes is counted with its tree.
				if !deleted[c.RootInstanceID] {
					ids = append(ids, c.InstanceID)
				}
			}
			if len(ids) == 0 {
				return nil
			}
			r, err := s.CountPrunable(ctx, &store.CountPrunableParams{TenantID: tenantID, InstanceIDs: ids, Options: opts})
			if err != nil {
				return err
			}
			out.PrunedInstances += r.InstancesPruned
			out.PrunedExecutions += r.ExecutionsDeleted
			out.PrunedEvents += r.EventsDeleted
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out.Executions += out.PrunedExecutions
	out.Events += out.PrunedEvents
	out.Truncated = capped || !complete
	for _, g := range groups {
		out.Groups = append(out.Groups, *g)
	}
	slices.SortFunc(out.Groups, func(a, b Group) int {
		if a.Status != b.Status {
			return slices.Index(terminal, a.Status) - slices.Index(terminal, b.Status)
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}
