// Package datagen fills the store's tables (pkg/store/crdb) with synthetic
// data, fast: tenants, instances, their executions and history, the lease
// row of every running instance, and the tags rows and prunable entry of
// every instance that has them. It is for the
// management benchmarks and the load test, which need a tenant of a million
// instances and ten million history events in minutes, far beyond what
// driving the runtime protocol (start, fetch, ack) could produce in that
// time.
//
// It writes the store's tables behind the store's back, so it lives beside
// the store and must keep the same rules (crdb.Store.CheckInvariants, which
// its test runs on what it generates): an instance carries the status and
// completion time of its current (last) execution, its counters match its
// executions and history, earlier executions ended with continue-as-new,
// the status counters count it, history is numbered 1..n in each
// execution, children point at their parent and root, the children of a
// finished parent are finished, and nothing is being deleted.
//
// Rows go in with COPY (pgx CopyFrom), a chunk of instances at a time,
// several chunks at once; the status counters (instance_counts) get the
// generated instances at the end. Everything is drawn from a seeded
// generator: the same Spec always gives the same rows.
package datagen

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statuses as the store writes them.
const (
	Running        = "Running"
	Completed      = "Completed"
	Failed         = "Failed"
	Cancelled      = "Cancelled"
	ContinuedAsNew = "ContinuedAsNew"
)

// Spec says what to generate. Every tenant gets the same shape of data
// (drawn independently per tenant).
type Spec struct {
	// Tenants to fill; their tenants rows are created when missing.
	Tenants []string
	// InstancesPerTenant counts every instance, tree members included.
	InstancesPerTenant int
	// ExecutionsPerInstance (default 1): executions 1..n-1 ended with
	// continue-as-new, n is the current one.
	ExecutionsPerInstance int
	// EventsPerExecution is the history length of each execution.
	EventsPerExecution int
	// Fractions of instances whose current execution completed, failed or
	// was cancelled; the rest are running. A child of a finished parent is
	// never running (it counts as completed instead).
	Completed, Failed, Cancelled float64
	// Names of the orchestrations, drawn uniformly (default "orchestration").
	Names []string
	// Tags: each instance gets every key, with a value drawn uniformly
	// from that key's values.
	Tags map[string][]string
	// Trees per tenant, each a root with ChildrenPerTree direct children;
	// they take the first Trees*(1+ChildrenPerTree) instances, the rest
	// are roots without children.
	Trees, ChildrenPerTree int
	// Creation times of roots are spread uniformly over [Start,
	// Start+Spread); children are created just after their parent. Each
	// execution lasts between 1 s and 1 min. Start defaults to 30 days
	// before now, Spread to 30 days.
	Start  time.Time
	Spread time.Duration
	// IDPrefix starts every instance id, followed by a random UUID; use it
	// to add instances to a tenant that already has some.
	IDPrefix string
	// Seed of the generator; the same Spec gives the same rows.
	Seed uint64
	// PayloadBytes is the size of every input, output and history payload
	// (default 32).
	PayloadBytes int
	// ChunkSize is the number of instances per COPY (default 10,000), and
	// Parallelism the number of COPYs at once (default 2).
	ChunkSize, Parallelism int
}

// Result counts the rows written.
type Result struct {
	Tenants, Instances, Executions, Events, Locks, Tags, Prunable int64
	Elapsed                                                       time.Duration
}

// Rows is the number of rows written.
func (r Result) Rows() int64 {
	return r.Tenants + r.Instances + r.Executions + r.Events + r.Locks + r.Tags + r.Prunable
}

// RowsPerSecond is the write rate.
func (r Result) RowsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Rows()) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	return fmt.Sprintf("%d instances, %d executions, %d events, %d locks in %s (%.0f rows/s)",
		r.Instances, r.Executions, r.Events, r.Locks, r.Elapsed.Round(time.Millisecond), r.RowsPerSecond())
}

func (s *Spec) validate() error {
	switch {
	case len(s.Tenants) == 0:
		return errors.New("datagen: no tenants")
	case s.InstancesPerTenant < 0 || s.EventsPerExecution < 0 || s.Trees < 0 || s.ChildrenPerTree < 0:
		return errors.New("datagen: negative count")
	case s.Completed < 0 || s.Failed < 0 || s.Cancelled < 0 || s.Completed+s.Failed+s.Cancelled > 1+1e-9:
		return errors.New("datagen: status fractions must be positive and sum to at most 1")
	case s.Trees*(1+s.ChildrenPerTree) > s.InstancesPerTenant:
		return fmt.Errorf("datagen: %d trees of %d children need more than %d instances",
			s.Trees, s.ChildrenPerTree, s.InstancesPerTenant)
	}
	return nil
}

func (s *Spec) defaults() {
	if s.ExecutionsPerInstance <= 0 {
		s.ExecutionsPerInstance = 1
	}
	if len(s.Names) == 0 {
		s.Names = []string{"orchestration"}
	}
	if s.Spread <= 0 {
		s.Spread = 30 * 24 * time.Hour
	}
	if s.Start.IsZero() {
		s.Start = time.Now().Add(-s.Spread)
	}
	if s.PayloadBytes <= 0 {
		s.PayloadBytes = 32
	}
	if s.ChunkSize <= 0 {
		s.ChunkSize = 10_000
	}
	if s.Parallelism <= 0 {
		s.Parallelism = 2
	}
}

// Generate writes the rows of spec through pool.
func Generate(ctx context.Context, pool *pgxpool.Pool, spec Spec) (Result, error) {
	if err := spec.validate(); err != nil {
		return Result{}, err
	}
	spec.defaults()
	start := time.Now()
	var res Result
	now := time.Now().UnixMilli()
	for _, t := range spec.Tenants {
		tag, err := pool.Exec(ctx, `INSERT INTO tenants (tenant_id, created_at, updated_at) VALUES ($1, $2, $2)
			ON CONFLICT (tenant_id) DO NOTHING`, t, now)
		if err != nil {
			return res, fmt.Errorf("datagen: tenant %q: %w", t, err)
		}
		res.Tenants += tag.RowsAffected()
	}

	type job struct {
		g      *gen
		table  string
		lo, hi int
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range spec.Parallelism {
		wg.Go(func() {
			for j := range jobs {
				n, err := j.g.copyChunk(ctx, pool, j.table, j.lo, j.hi)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("datagen: copy %s [%d, %d) of tenant %q: %w", j.table, j.lo, j.hi, j.g.tenant, err)
					cancel()
				}
				switch j.table {
				case "instances":
					res.Instances += n
				case "executions":
					res.Executions += n
				case "history":
					res.Events += n
				case "instance_leases":
					res.Locks += n
				case "instance_tags":
					res.Tags += n
				case "instance_prunable":
					res.Prunable += n
				}
				mu.Unlock()
			}
		})
	}
	// Instances first in each chunk (nothing checks it, but a reader
	// watching the load never sees history without its instance for long).
	var gens []*gen
feed:
	for _, t := range spec.Tenants {
		g := newGen(&spec, t)
		gens = append(gens, g)
		for lo := 0; lo < spec.InstancesPerTenant; lo += spec.ChunkSize {
			hi := min(lo+spec.ChunkSize, spec.InstancesPerTenant)
			for _, table := range []string{"instances", "instance_leases", "instance_tags", "instance_prunable", "executions", "history"} {
				select {
				case jobs <- job{g: g, table: table, lo: lo, hi: hi}:
				case <-ctx.Done():
					break feed
				}
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr == nil {
		firstErr = addCounts(ctx, pool, gens)
	}
	res.Elapsed = time.Since(start)
	return res, firstErr
}

// addCounts adds the generated instances to the status counters the store
// maintains (instance_counts), as its own writes would have.
func addCounts(ctx context.Context, pool *pgxpool.Pool, gens []*gen) error {
	var tenants, statuses []string
	var counts []int64
	for _, g := range gens {
		for i, st := range countedStatuses {
			if n := g.counts[i].Load(); n > 0 {
				tenants, statuses, counts = append(tenants, g.tenant), append(statuses, st), append(counts, n)
			}
		}
	}
	_, err := pool.Exec(ctx, `
INSERT INTO instance_counts (tenant_id, status, shard, n)
SELECT tenant_id, status, 0, n FROM unnest($1::TEXT[], $2::TEXT[], $3::INT8[]) AS c (tenant_id, status, n)
ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n`, tenants, statuses, counts)
	if err != nil {
		return fmt.Errorf("datagen: count instances: %w", err)
	}
	return nil
}

// Analyze refreshes the planner's statistics of the generated tables, as
// the database would on its own some time after a bulk load. (On
// PostgreSQL, a VACUUM also sets the visibility map for index-only scans.)
func Analyze(ctx context.Context, pool *pgxpool.Pool) error {
	for _, t := range []string{"tenants", "instances", "executions", "history", "instance_leases", "instance_tags", "instance_prunable", "instance_counts"} {
		if _, err := pool.Exec(ctx, "ANALYZE "+t); err != nil {
			return fmt.Errorf("datagen: analyze %s: %w", t, err)
		}
	}
	return nil
}

// gen draws the instances of one tenant.
type gen struct {
	spec    *Spec
	tenant  string
	seed    uint64
	tagKeys []string
	payload []byte
	// counts of the instances written, by status (countedStatuses).
	counts [len(countedStatuses)]atomic.Int64
}

// countedStatuses are the statuses an instance can have.
var countedStatuses = [...]string{Running, Completed, Failed, Cancelled}

func newGen(spec *Spec, tenant string) *gen {
	h := fnv.New64a()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(spec.IDPrefix))
	keys := make([]string, 0, len(spec.Tags))
	for k := range spec.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	payload := make([]byte, spec.PayloadBytes)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	return &gen{spec: spec, tenant: tenant, seed: spec.Seed ^ h.Sum64(), tagKeys: keys, payload: payload}
}

// Instance is one generated instance; Generate writes it, tests and
// benchmarks use it to know what is there (InstanceAt).
type Instance struct {
	Index         int
	ID            string
	ParentID      string // empty for a root
	RootID        string
	Name          string
	Status        string
	CreatedAt     int64 // milliseconds
	UpdatedAt     int64
	CompletedAt   int64 // 0 while running
	Tags          map[string]string
	Executions    []Execution
	leaseToken    [16]byte
	childOfTreeNo int // position among its siblings, 1-based; 0 for roots
}

// Execution is one execution of a generated instance.
type Execution struct {
	ID          int64
	Status      string
	StartedAt   int64
	CompletedAt int64 // 0 while running
}

// InstanceAt returns the instance number i (0-based) that Generate writes
// for tenant under spec.
func InstanceAt(spec Spec, tenant string, i int) Instance {
	spec.defaults()
	return newGen(&spec, tenant).instance(i)
}

func (g *gen) rng(i int) *rand.Rand {
	return rand.New(rand.NewPCG(g.seed, uint64(i)))
}

func (g *gen) id(r *rand.Rand) string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	b[6] = b[6]&0x0f | 0x40 // a version 4 UUID, like uuid.NewString
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return g.spec.IDPrefix + string(s[:])
}

func (g *gen) status(r *rand.Rand) string {
	u := r.Float64()
	s := g.spec
	switch {
	case u < s.Completed:
		return Completed
	case u < s.Completed+s.Failed:
		return Failed
	case u < s.Completed+s.Failed+s.Cancelled:
		return Cancelled
	}
	return Running
}

func (g *gen) instance(i int) Instance {
	s := g.spec
	r := g.rng(i)
	in := Instance{Index: i, ID: g.id(r), Status: g.status(r)}
	in.Name = s.Names[r.IntN(len(s.Names))]
	if len(g.tagKeys) > 0 {
		in.Tags = make(map[string]string, len(g.tagKeys))
		for _, k := range g.tagKeys {
			vals := s.Tags[k]
			if len(vals) > 0 {
				in.Tags[k] = vals[r.IntN(len(vals))]
			}
		}
	}
	binary.LittleEndian.PutUint64(in.leaseToken[:8], r.Uint64())
	binary.LittleEndian.PutUint64(in.leaseToken[8:], r.Uint64())
	in.CreatedAt = s.Start.UnixMilli() + r.Int64N(max(1, s.Spread.Milliseconds()))
	in.RootID = in.ID
	if treeSize := 1 + s.ChildrenPerTree; i < s.Trees*treeSize && i%treeSize != 0 {
		parent := g.instance(i - i%treeSize)
		in.ParentID, in.RootID = parent.ID, parent.ID
		in.childOfTreeNo = i % treeSize
		in.CreatedAt = parent.CreatedAt + int64(in.childOfTreeNo)
		if parent.Status != Running && in.Status == Running {
			in.Status = Completed
		}
	}
	at := in.CreatedAt
	in.Executions = make([]Execution, s.ExecutionsPerInstance)
	for k := range in.Executions {
		d := 1000 + r.Int64N(59_000)
		e := Execution{ID: int64(k + 1), Status: ContinuedAsNew, StartedAt: at, CompletedAt: at + d}
		if k == len(in.Executions)-1 {
			e.Status = in.Status
			if in.Status == Running {
				e.CompletedAt = 0
			}
		}
		in.Executions[k] = e
		at += d
	}
	cur := in.Executions[len(in.Executions)-1]
	in.CompletedAt = cur.CompletedAt
	in.UpdatedAt = cur.StartedAt
	if cur.CompletedAt != 0 {
		in.UpdatedAt = cur.CompletedAt
	}
	return in
}

func (in *Instance) tagsJSON() []byte {
	if len(in.Tags) == 0 {
		return []byte("{}")
	}
	keys := make([]string, 0, len(in.Tags))
	for k := range in.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%q", k, in.Tags[k])
	}
	b.WriteByte('}')
	return []byte(b.String())
}

func nullMillis(ms int64) any {
	if ms == 0 {
		return nil
	}
	return ms
}

// eventKind names history event k (1-based) of n in an execution.
func eventKind(k, n int, e *Execution) string {
	switch {
	case k == 1:
		return "ExecutionStarted"
	case k == n && e.Status == ContinuedAsNew:
		return "ContinuedAsNew"
	case k == n && e.Status == Completed:
		return "ExecutionCompleted"
	case k == n && e.Status == Failed:
		return "ExecutionFailed"
	case k == n && e.Status == Cancelled:
		return "ExecutionCancelled"
	case k%2 == 0:
		return "TaskScheduled"
	}
	return "TaskCompleted"
}

var columns = map[string][]string{
	"instances": {"tenant_id", "instance_id", "name", "version", "current_execution_id", "status", "completed_at",
		"parent_instance_id", "root_instance_id", "created_at", "updated_at", "input", "tags",
		"execution_count", "event_count", "deleting"},
	"instance_leases":   {"tenant_id", "instance_id", "lease_token", "leased_until", "due_at"},
	"instance_tags":     {"tenant_id", "instance_id", "tag_key", "tag_value", "created_at"},
	"instance_prunable": {"tenant_id", "instance_id", "status"},
	"executions": {"tenant_id", "instance_id", "execution_id", "status", "input", "output", "error",
		"started_at", "completed_at", "event_count", "deleting"},
	"history": {"tenant_id", "instance_id", "execution_id", "event_id", "kind", "payload", "created_at"},
}

// copyChunk writes the rows of instances [lo, hi) to one table.
func (g *gen) copyChunk(ctx context.Context, pool *pgxpool.Pool, table string, lo, hi int) (int64, error) {
	nev := g.spec.EventsPerExecution
	var rows [][]any
	i := lo
	// A buffer of rows for the current instance, refilled as COPY drains it.
	next := func() ([]any, error) {
		for len(rows) == 0 {
			if i >= hi {
				return nil, nil
			}
			in := g.instance(i)
			i++
			rows = g.rows(table, &in, nev, rows[:0])
		}
		row := rows[0]
		rows = rows[1:]
		return row, nil
	}
	var done bool
	return pool.CopyFrom(ctx, pgx.Identifier{table}, columns[table], pgx.CopyFromFunc(func() ([]any, error) {
		if done {
			return nil, nil
		}
		row, err := next()
		if row == nil {
			done = true
		}
		return row, err
	}))
}

// rows appends the rows of one instance in table to buf.
func (g *gen) rows(table string, in *Instance, nev int, buf [][]any) [][]any {
	t := g.tenant
	switch table {
	case "instances":
		var parent any
		if in.ParentID != "" {
			parent = in.ParentID
		}
		g.counts[slices.Index(countedStatuses[:], in.Status)].Add(1)
		return append(buf, []any{t, in.ID, in.Name, "1", int64(len(in.Executions)), in.Status, nullMillis(in.CompletedAt),
			parent, in.RootID, in.CreatedAt, in.UpdatedAt, g.payload, in.tagsJSON(),
			int64(len(in.Executions)), int64(len(in.Executions) * nev), false})
	case "instance_leases":
		// A running instance's, with no message queued: not due. An
		// ended instance keeps none.
		if in.Status != Running {
			return buf
		}
		return append(buf, []any{t, in.ID, in.leaseToken, int64(0), int64(math.MaxInt64)})
	case "instance_tags":
		for _, k := range g.tagKeys {
			if v, ok := in.Tags[k]; ok {
				buf = append(buf, []any{t, in.ID, k, v, in.CreatedAt})
			}
		}
		return buf
	case "instance_prunable":
		if len(in.Executions) > 1 {
			buf = append(buf, []any{t, in.ID, in.Status})
		}
		return buf
	case "executions":
		for _, e := range in.Executions {
			var output, errText any
			switch e.Status {
			case Completed, ContinuedAsNew:
				output = g.payload
			case Failed:
				errText = "generated failure"
			case Cancelled:
				errText = "cancelled"
			}
			buf = append(buf, []any{t, in.ID, e.ID, e.Status, g.payload, output, errText,
				e.StartedAt, nullMillis(e.CompletedAt), int64(nev), false})
		}
		return buf
	case "history":
		for k := range in.Executions {
			e := &in.Executions[k]
			end := e.CompletedAt
			if end == 0 {
				end = e.StartedAt + 1000
			}
			for ev := 1; ev <= nev; ev++ {
				at := e.StartedAt + (end-e.StartedAt)*int64(ev-1)/int64(max(1, nev-1))
				buf = append(buf, []any{t, in.ID, e.ID, int64(ev), eventKind(ev, nev, e), g.payload, at})
			}
		}
		return buf
	}
	panic("datagen: unknown table " + table)
}
