package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/internal/traceparent"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
)

// runningTurn is a turn between its fetch and its ack.
type runningTurn struct {
	item  *store.OrchestrationItem
	in    engine.TurnInput
	ack   *store.AckOrchestrationItemParams
	span  trace.Span
	start time.Time
}

// runBatch runs the turns of a fetched batch. It renews their leases while
// it runs. The suspects (instances whose lease lapsed before: their
// dispatcher died, or overran the lease) run after the others, each alone
// and struck first (runSuspect); the others run together (runTurns).
func (d *Dispatcher) runBatch(ctx context.Context, items []*store.OrchestrationItem) error {
	leases := d.keepLeases(ctx, items)
	defer leases.stop()
	var normal, suspects []*store.OrchestrationItem
	for _, it := range items {
		if it.Claims > 1 {
			suspects = append(suspects, it)
		} else {
			normal = append(normal, it)
		}
	}
	err := d.runTurns(ctx, leases, normal)
	for _, it := range suspects {
		if e := d.runSuspect(ctx, leases, it); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// runSuspect runs the turn of an instance whose lease lapsed before. Its
// process may have died of something else (it was killed, or another turn
// killed it), so the lapse alone does not count against the instance: the
// turn runs alone (one suspect at a time in this process, acked on its
// own), after a strike is recorded on its lease, which its ack clears. A
// strike that stays is a turn that died while it ran alone; after
// MaxTurnAttempts of them in a row the instance is failed instead (turn).
func (d *Dispatcher) runSuspect(ctx context.Context, leases *leaseKeeper, it *store.OrchestrationItem) error {
	d.suspectMu.Lock()
	defer d.suspectMu.Unlock()
	log := d.log.With("tenant", it.Lease.TenantID, "instance", it.Lease.InstanceID)
	if it.Strikes < int64(d.cfg.MaxTurnAttempts) {
		strikes, err := d.cfg.Store.StrikeOrchestrationLease(ctx, it.Lease)
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			leases.drop(it)
			log.Info("suspect turn dropped: lease lost")
			return nil
		case err != nil:
			leases.drop(it)
			d.abandon(ctx, it, failureBackoff().NextBackOff())
			return fmt.Errorf("strike: %w", err)
		}
		log.Info("running alone an instance whose lease lapsed", "claims", it.Claims, "strikes", strikes)
	}
	return d.runTurns(ctx, leases, []*store.OrchestrationItem{it})
}

// runTurns runs turns and acks them in one transaction. A turn that cannot
// run for a transient reason is abandoned with a delay; the others are
// acked. An error means the ack failed and the turns were abandoned.
func (d *Dispatcher) runTurns(ctx context.Context, leases *leaseKeeper, items []*store.OrchestrationItem) error {
	if len(items) == 0 {
		return nil
	}
	defer leases.drop(items...)
	turns := make([]*runningTurn, 0, len(items))
	for _, it := range items {
		t, err := d.startTurn(ctx, it)
		if err != nil {
			d.abandon(ctx, it, failureBackoff().NextBackOff())
			continue
		}
		turns = append(turns, t)
	}
	if len(turns) == 0 {
		return nil
	}
	handed := d.handOver(turns)
	if d.beforeAck != nil {
		d.beforeAck(ctx, items)
	}
	results, err := d.ackTurns(ctx, turns)
	return d.finishTurns(ctx, handed, turns, results, err)
}

// startTurn runs an instance's turn up to its ack. An error is the turn's
// (its span ended, abandoned): the caller abandons the instance.
func (d *Dispatcher) startTurn(ctx context.Context, it *store.OrchestrationItem) (*runningTurn, error) {
	d.observeBacklog(ctx, d.cfg.Clock.Now(), it)
	t := &runningTurn{item: it, start: time.Now()}
	parent, links := traceOf(ctx, it.Messages)
	var sctx context.Context
	sctx, t.span = d.tracer.Start(parent, "orchestration turn", trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("orchard.tenant", it.Lease.TenantID),
		attribute.String("orchard.instance", it.Lease.InstanceID),
		attribute.Int64("orchard.execution", it.Instance.CurrentExecutionID),
		attribute.Int("orchard.messages", len(it.Messages)),
	))
	ack, in, err := d.turn(ctx, it)
	t.in = in
	if err != nil {
		d.endTurn(ctx, t, "abandoned", err)
		return nil, err
	}
	if tp := traceparent.Of(sctx); tp != "" {
		for i := range ack.Activities {
			ack.Activities[i].TraceContext = tp
		}
	}
	t.ack = ack
	t.span.SetAttributes(attribute.Int("orchard.events_appended", len(ack.History)))
	return t, nil
}

// ackTurns acks turns in one transaction.
func (d *Dispatcher) ackTurns(ctx context.Context, turns []*runningTurn) ([]error, error) {
	params := &store.AckOrchestrationItemsParams{Turns: make([]*store.AckOrchestrationItemParams, len(turns))}
	for i, t := range turns {
		params.Turns[i] = t.ack
	}
	results, err := d.cfg.Store.AckOrchestrationItems(ctx, params)
	if errors.Is(err, store.ErrInvalidArgument) {
		// A decision the store cannot take (a child id an expression left
		// empty, say) must not sink the batch, nor loop: ack the turns one
		// by one, and end the execution of a turn refused on its own.
		results, err = d.ackOneByOne(ctx, turns), nil
	}
	return results, err
}

// finishTurns does what follows turns' ack (results, err as
// AckOrchestrationItems returns them): it hands the tasks to the polls
// whose places were taken, sends the hints, and ends the turns.
func (d *Dispatcher) finishTurns(ctx context.Context, handed []*handover, turns []*runningTurn, results []error, err error) error {
	// The items ahead first: a task delivered may be completed at once.
	for i, t := range turns {
		if err == nil && results[i] == nil {
			d.ahead.put(t.item, t.ack)
		} else {
			d.ahead.drop(t.item.Lease.TenantID, t.item.Lease.InstanceID)
		}
	}
	d.deliver(ctx, handed, turns, results, err)
	if err != nil {
		for _, t := range turns {
			d.endTurn(ctx, t, "abandoned", err)
			d.abandon(ctx, t.item, failureBackoff().NextBackOff())
		}
		return fmt.Errorf("ack %d turns: %w", len(turns), err)
	}
	var hints []notify.Topic
	for i, t := range turns {
		it := t.item
		if results[i] == nil {
			hints = appendHints(hints, t.ack)
		}
		switch {
		case errors.Is(results[i], store.ErrLeaseLost):
			d.stats.leaseLosses.Add(1)
			d.metrics.leaseLosses.Add(ctx, 1)
			d.log.Info("turn dropped: lease lost (expired, taken over, or the instance was deleted)",
				"tenant", it.Lease.TenantID, "instance", it.Lease.InstanceID, "execution", t.ack.ExecutionID)
			d.endTurn(ctx, t, "lease_lost", nil)
		case results[i] != nil:
			d.endTurn(ctx, t, "abandoned", results[i])
			d.abandon(ctx, it, failureBackoff().NextBackOff())
		default:
			d.stats.turns.Add(1)
			d.endTurn(ctx, t, string(t.ack.Status), nil)
			// At each continue-as-new, and when a chain ends (which also
			// catches up a prune that failed on the way).
			pruned := false
			if t.ack.Status == store.StatusContinuedAsNew || (t.ack.Status.Terminal() && t.ack.ExecutionID > 1) {
				pruned = d.autoPrune(ctx, it)
			}
			// An end that a prune did not touch since is handed to the
			// WaitForCompletion calls of this process as the ack left it:
			// they need not read it.
			if in, ok := t.ack.AckedInstance(it.Instance); ok && in.Status.Terminal() && !pruned {
				d.cfg.Handoff.Ended(&in)
			}
		}
	}
	d.cfg.Notifier.Notify(ctx, hints...)
	return nil
}

// heldTurn is a turn an API call of this process runs inside the
// transaction of its write, which made the instance due and leased it
// (store.HeldTurn): the write and the turn's ack commit together. What
// follows the ack runs in Done, after the commit, as after any ack.
type heldTurn struct {
	d    *Dispatcher
	item *store.OrchestrationItem
	// suspect: the instance's lease lapsed before (runSuspect); its turn
	// runs after the commit, struck first, as a loop runs it.
	suspect bool
	// ahead: Ahead gave the item the turn runs on.
	ahead  bool
	turn   *runningTurn // nil when the turn failed, or did not run
	handed []*handover
}

// Hold returns a turn to run inside an API call's write (see heldTurn).
func (d *Dispatcher) Hold() store.HeldTurn { return &heldTurn{d: d} }

func (h *heldTurn) Turn(ctx context.Context, it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	h.item = it
	if it.Claims > 1 {
		h.suspect = true
		return nil
	}
	t, err := h.d.startTurn(ctx, it)
	if err != nil {
		return nil
	}
	h.turn = t
	h.handed = h.d.handOver([]*runningTurn{t})
	return t.ack
}

func (h *heldTurn) Ahead(tenant, instance string, execution int64) *store.OrchestrationItem {
	it := h.d.ahead.take(tenant, instance, execution)
	h.ahead = it != nil
	return it
}

func (h *heldTurn) Done(ctx context.Context, acked bool, result error) {
	d := h.d
	// The API call's context may end with its response; what follows the
	// ack must still happen.
	ctx = context.WithoutCancel(ctx)
	switch {
	case !acked && errors.Is(result, store.ErrNotFound):
		// The write that ran after the turn leased nothing (or not the
		// instance as the turn had it), or failed: the turn is void.
		if h.turn != nil {
			d.deliver(ctx, h.handed, []*runningTurn{h.turn}, []error{result}, nil)
			d.endTurn(ctx, h.turn, "void", nil)
		}
		return
	case h.suspect:
		if err := d.runBatch(ctx, []*store.OrchestrationItem{h.item}); err != nil {
			d.log.Warn("held turn: suspect turn failed", "error", err)
		}
		return
	case h.turn == nil:
		d.abandon(ctx, h.item, failureBackoff().NextBackOff())
		return
	}
	d.stats.held.Add(1)
	if h.ahead {
		d.stats.ahead.Add(1)
	}
	turns := []*runningTurn{h.turn}
	results, err := []error{result}, error(nil)
	if !acked {
		results, err = d.ackTurns(ctx, turns)
	}
	if err := d.finishTurns(ctx, h.handed, turns, results, err); err != nil {
		d.log.Warn("held turn: ack failed", "error", err)
	}
}

// handover is a poll's place taken by an ack, with the tasks the ack
// inserts leased to it.
type handover struct {
	wait  *notify.Place[*store.WorkItem]
	tasks []handedTask
}

// handedTask is a task inserted leased to a waiting poll: the turn's
// index and the task as the poll gets it.
type handedTask struct {
	turn int
	item *store.WorkItem
}

// handOver takes the places of polls waiting in this process for the task
// queues of the tasks the turns schedule due now (Config.Handoff), and
// gives each such task the lease of its poll: the ack inserts it leased,
// and deliver hands it over after the ack.
func (d *Dispatcher) handOver(turns []*runningTurn) []*handover {
	if d.cfg.Handoff == nil {
		return nil
	}
	type key struct{ tenant, queue string }
	var all []*handover
	open := map[key]*handover{}
	now := d.cfg.Clock.Now()
	for i, t := range turns {
		tenant := t.ack.Lease.TenantID
		for j := range t.ack.Activities {
			a := &t.ack.Activities[j]
			if a.Delay > 0 {
				continue
			}
			k := key{tenant, a.TaskQueue}
			h, ok := open[k]
			if h == nil && ok {
				continue // no poll waits for this queue
			}
			if h == nil || len(h.tasks) == h.wait.Max() {
				w := d.cfg.Handoff.Take(tenant, a.TaskQueue)
				if w == nil {
					open[k] = nil
					continue
				}
				h = &handover{wait: w}
				open[k] = h
				all = append(all, h)
			}
			// Milliseconds, as the store keeps it.
			a.Lease = &store.WorkLease{TenantID: tenant, ID: uuid.NewString(), Token: h.wait.Token(),
				ExpiresAt: time.UnixMilli(now.Add(h.wait.Lease()).UnixMilli())}
			h.tasks = append(h.tasks, handedTask{turn: i, item: &store.WorkItem{
				Lease: *a.Lease, InstanceID: t.ack.Lease.InstanceID, ExecutionID: t.ack.ExecutionID, ActivityID: a.ActivityID,
				Name: a.Name, TaskQueue: a.TaskQueue, Input: a.Input, Attempt: max(a.Attempt, 1), CreatedAt: now,
				TraceContext: a.TraceContext,
			}})
		}
	}
	return all
}

// deliver hands each taken place the tasks of the turns whose ack held
// (err is the ack's), and hands back at once those whose poll has gone.
// The tasks due now that no place took are news to the polls that come
// (Handoff.Unplaced).
func (d *Dispatcher) deliver(ctx context.Context, handed []*handover, turns []*runningTurn, results []error, err error) {
	if d.cfg.Handoff == nil {
		return
	}
	for i, t := range turns {
		if err != nil || results[i] != nil {
			continue
		}
		for _, a := range t.ack.Activities {
			if a.Delay <= 0 && a.Lease == nil {
				d.cfg.Handoff.Unplaced(t.ack.Lease.TenantID, a.TaskQueue)
			}
		}
	}
	for _, h := range handed {
		var items []*store.WorkItem
		for _, ht := range h.tasks {
			if err == nil && results[ht.turn] == nil && schedules(turns[ht.turn].ack, ht.item.Lease.ID) {
				items = append(items, ht.item)
			}
		}
		d.handBack(ctx, h.wait.Deliver(items))
	}
}

// schedules says whether an acked turn inserted the task of this lease id:
// a turn refused on its own was replaced by one that fails its execution
// (ackOneByOne).
func schedules(ack *store.AckOrchestrationItemParams, leaseID string) bool {
	for _, a := range ack.Activities {
		if a.Lease != nil && a.Lease.ID == leaseID {
			return true
		}
	}
	return false
}

// handBack releases tasks handed to a poll that left, with a hint each, as
// the API does for a worker that went away: they would wait for their
// leases to lapse otherwise.
func (d *Dispatcher) handBack(ctx context.Context, items []*store.WorkItem) {
	if len(items) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var hints []notify.Topic
	for _, it := range items {
		if err := d.cfg.Store.AbandonWorkItem(rctx, &store.AbandonWorkItemParams{Lease: it.Lease}); err != nil {
			d.log.Warn("could not hand back a task whose poll left; it waits for its lease to lapse",
				"tenant", it.Lease.TenantID, "instance", it.InstanceID, "error", err)
			continue
		}
		d.cfg.Handoff.Unplaced(it.Lease.TenantID, it.TaskQueue)
		hints = append(hints, notify.Topic{Kind: notify.Tasks, TenantID: it.Lease.TenantID, Key: it.TaskQueue})
	}
	d.cfg.Notifier.Notify(rctx, hints...)
}

// traceOf returns the context a turn's span starts from: the trace of the
// first of its messages queued in one (a start, an activity's result, an
// event), with links to the traces of the others.
func traceOf(ctx context.Context, msgs []store.QueuedMessage) (context.Context, []trace.Link) {
	parent := ctx
	var links []trace.Link
	found := false
	for _, m := range msgs {
		sc := traceparent.SpanContext(m.TraceContext)
		switch {
		case !sc.IsValid():
		case !found:
			parent, found = trace.ContextWithRemoteSpanContext(ctx, sc), true
		default:
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return parent, links
}

// appendHints appends the hints of an acked turn: a task for each activity
// due now, messages queued for instances when it sent any due now (or
// started children, or continued as new), and its instance's end.
func appendHints(hints []notify.Topic, ack *store.AckOrchestrationItemParams) []notify.Topic {
	tenant := ack.Lease.TenantID
	for _, a := range ack.Activities {
		// A task handed over has its poll already.
		if a.Delay <= 0 && a.Lease == nil {
			hints = append(hints, notify.Topic{Kind: notify.Tasks, TenantID: tenant, Key: a.TaskQueue})
		}
	}
	queued := len(ack.Children) > 0 || ack.Status == store.StatusContinuedAsNew
	for _, m := range ack.Messages {
		queued = queued || m.Delay <= 0
	}
	if queued {
		hints = append(hints, notify.Topic{Kind: notify.Orchestrations, TenantID: tenant})
	}
	if ack.Status.Terminal() {
		hints = append(hints, notify.Topic{Kind: notify.Ended, TenantID: tenant, Key: ack.Lease.InstanceID})
	}
	return hints
}

// ackOneByOne acks each turn in its own transaction; a turn whose ack is
// refused as invalid is replaced by one that fails its execution with the
// reason.
func (d *Dispatcher) ackOneByOne(ctx context.Context, turns []*runningTurn) []error {
	results := make([]error, len(turns))
	for i, t := range turns {
		err := d.cfg.Store.AckOrchestrationItem(ctx, t.ack)
		if errors.Is(err, store.ErrInvalidArgument) {
			reason := fmt.Sprintf("the turn's decision cannot be stored: %v", err)
			d.log.Error("execution cannot go on; it ends failed", "tenant", t.item.Lease.TenantID, "instance", t.item.Lease.InstanceID, "reason", reason)
			ack := &store.AckOrchestrationItemParams{Lease: t.ack.Lease, ExecutionID: t.ack.ExecutionID, MessageIDs: t.ack.MessageIDs}
			inst := &t.item.Instance
			if dec, ferr := engine.Fail(t.in, inst.Name, inst.Version, engine.Failure{Kind: "internal", Message: reason}); ferr == nil && d.applyDecision(ctx, ack, t.item, dec) == nil {
				t.ack = ack
			} else {
				t.ack, _ = d.failUnreadable(ack, len(t.item.History), reason, d.log)
			}
			err = d.cfg.Store.AckOrchestrationItem(ctx, t.ack)
		}
		results[i] = err
	}
	return results
}

// endTurn records a turn's outcome in its span and the metrics.
func (d *Dispatcher) endTurn(ctx context.Context, t *runningTurn, outcome string, err error) {
	t.span.SetAttributes(attribute.String("orchard.outcome", outcome))
	if err != nil {
		t.span.RecordError(err)
		t.span.SetStatus(codes.Error, err.Error())
		d.log.Warn("turn abandoned", "tenant", t.item.Lease.TenantID, "instance", t.item.Lease.InstanceID, "error", err)
	}
	t.span.End()
	attrs := metric.WithAttributes(attribute.String("outcome", outcome))
	d.metrics.turns.Add(ctx, 1, attrs)
	d.metrics.turnSeconds.Record(ctx, time.Since(t.start).Seconds(), attrs)
}

// observeBacklog records how long the turn's messages waited to be fetched.
func (d *Dispatcher) observeBacklog(ctx context.Context, now time.Time, it *store.OrchestrationItem) {
	var oldest time.Time
	for _, m := range it.Messages {
		if oldest.IsZero() || m.VisibleAt.Before(oldest) {
			oldest = m.VisibleAt
		}
	}
	if !oldest.IsZero() {
		d.metrics.backlogSeconds.Record(ctx, max(now.Sub(oldest), 0).Seconds())
	}
}

// abandon releases an instance so that it is fetched again after delay.
func (d *Dispatcher) abandon(ctx context.Context, it *store.OrchestrationItem, delay time.Duration) {
	// On a drain's deadline ctx has ended; the release still goes out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := d.cfg.Store.AbandonOrchestrationItem(ctx, &store.AbandonOrchestrationItemParams{Lease: it.Lease, Delay: delay})
	if err != nil && !errors.Is(err, store.ErrLeaseLost) {
		d.log.Warn("abandon failed; the lease will expire", "tenant", it.Lease.TenantID, "instance", it.Lease.InstanceID, "error", err)
	}
}

// leaseKeeper renews the leases of a batch every third of their duration,
// in a goroutine, until stop; drop ends the renewal of leases released
// before. Most batches end long before the first renewal.
type leaseKeeper struct {
	d       *Dispatcher
	ctx     context.Context
	mu      sync.Mutex
	items   []*store.OrchestrationItem
	timer   *time.Timer
	stopped bool
}

func (d *Dispatcher) keepLeases(ctx context.Context, items []*store.OrchestrationItem) *leaseKeeper {
	k := &leaseKeeper{d: d, ctx: ctx, items: slices.Clone(items)}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timer = time.AfterFunc(d.cfg.LeaseDuration/3, k.renew)
	return k
}

func (k *leaseKeeper) renew() {
	d := k.d
	k.mu.Lock()
	items := slices.Clone(k.items)
	k.mu.Unlock()
	for _, it := range items {
		k.mu.Lock()
		held := !k.stopped && slices.Contains(k.items, it)
		k.mu.Unlock()
		if !held {
			continue
		}
		expires, err := d.cfg.Store.RenewOrchestrationLease(k.ctx, &store.RenewOrchestrationLeaseParams{Lease: it.Lease, Duration: d.cfg.LeaseDuration})
		if err != nil {
			d.log.Warn("lease renewal failed", "tenant", it.Lease.TenantID, "instance", it.Lease.InstanceID, "error", err)
			continue
		}
		d.log.Debug("lease renewed", "tenant", it.Lease.TenantID, "instance", it.Lease.InstanceID, "until", expires)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped {
		k.timer.Reset(d.cfg.LeaseDuration / 3)
	}
}

// drop stops renewing the leases of items (they were released).
func (k *leaseKeeper) drop(items ...*store.OrchestrationItem) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.items = slices.DeleteFunc(k.items, func(it *store.OrchestrationItem) bool { return slices.Contains(items, it) })
}

func (k *leaseKeeper) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.timer.Stop()
}

// turn runs the engine over a fetched instance and returns the ack that
// commits its decision. An error is transient (the definition could not be
// read): the instance is abandoned and tried again. Everything else that
// goes wrong ends the execution Failed, so no instance loops forever.
func (d *Dispatcher) turn(ctx context.Context, it *store.OrchestrationItem) (*store.AckOrchestrationItemParams, engine.TurnInput, error) {
	inst := &it.Instance
	exec := inst.CurrentExecutionID
	log := d.log.With("tenant", it.Lease.TenantID, "instance", it.Lease.InstanceID, "execution", exec)
	ack := &store.AckOrchestrationItemParams{Lease: it.Lease, ExecutionID: exec}

	in := engine.TurnInput{InstanceID: inst.InstanceID, ExecutionID: exec, Now: d.cfg.Clock.Now()}
	fail := func(reason string) (*store.AckOrchestrationItemParams, engine.TurnInput, error) {
		a, err := d.failUnreadable(ack, len(it.History), reason, log)
		return a, in, err
	}
	for _, m := range it.Messages {
		ack.MessageIDs = append(ack.MessageIDs, m.ID)
		if m.ExecutionID != 0 && m.ExecutionID != exec {
			log.Debug("message for another execution consumed without effect", "kind", m.Kind, "message_execution", m.ExecutionID)
			continue
		}
		msg, err := engine.DecodeMessage(m.Kind, m.Payload)
		if err != nil {
			log.Warn("undecodable message consumed without effect", "kind", m.Kind, "error", err)
			continue
		}
		in.Messages = append(in.Messages, msg)
	}
	in.History = make([]engine.Event, len(it.History))
	for i, h := range it.History {
		e, err := engine.DecodeEvent(h.EventID, h.Kind, h.Payload)
		if err != nil {
			// The history cannot be replayed: end the execution where it is.
			return fail(fmt.Sprintf("history event %d cannot be read: %v", h.EventID, err))
		}
		in.History[i] = e
	}

	limits, err := d.policies.tenantLimits(ctx, it.Lease.TenantID)
	if err != nil {
		return nil, in, err
	}
	in.Limits = engine.Limits{MaxValueBytes: limits.MaxValueBytes, MaxStateBytes: limits.MaxTurnStateBytes}
	budget := time.Duration(limits.TurnBudgetMillis) * time.Millisecond

	def, err := d.defs.get(ctx, it.Lease.TenantID, inst.Name, inst.Version)
	var decision engine.Decision
	switch {
	case it.Strikes >= int64(d.cfg.MaxTurnAttempts):
		// The last turns, each run alone, never ended: running it again
		// would most likely kill this process too.
		f := engine.Failure{Kind: FailureKindPoison, Message: fmt.Sprintf(
			"the instance's last %d turns, each run alone, died before they ended (the dispatcher crashed or overran its lease); it is failed rather than run again", it.Strikes)}
		log.Error("poison instance: failed without running its turn", "claims", it.Claims, "strikes", it.Strikes)
		if decision, err = engine.Fail(in, inst.Name, inst.Version, f); err != nil {
			return fail(f.Message)
		}
	case errors.Is(err, store.ErrNotFound):
		f := engine.Failure{Kind: "definition_missing", Message: fmt.Sprintf("no definition %s version %q is registered", inst.Name, inst.Version)}
		if decision, err = engine.Fail(in, inst.Name, inst.Version, f); err != nil {
			return fail(f.Message)
		}
	case errors.Is(err, errInvalidDefinition):
		f := engine.Failure{Kind: "definition_invalid", Message: err.Error()}
		if decision, err = engine.Fail(in, inst.Name, inst.Version, f); err != nil {
			return fail(f.Message)
		}
	case err != nil:
		return nil, in, err
	default:
		stop := make(chan struct{})
		timer := time.AfterFunc(budget, func() { close(stop) })
		in.Stop = stop
		decision, err = engine.Turn(def, in)
		timer.Stop()
		in.Stop = nil
		if err != nil {
			f := engine.Failure{Kind: "internal", Message: err.Error()}
			if errors.Is(err, engine.ErrTurnStopped) {
				f = engine.Failure{Kind: engine.FailureKindLimit, Message: fmt.Sprintf("the turn ran longer than the tenant's budget of %s", budget)}
			}
			if decision, err = engine.Fail(in, inst.Name, inst.Version, f); err != nil {
				return fail(f.Message)
			}
		}
	}
	// The tenant's bound on one execution's history: a turn that would
	// pass it ends the execution instead (its events stop just past it).
	if max := limits.MaxHistoryEventsPerExecution; int64(len(in.History)+len(decision.Events)) > max && decision.Outcome.Status == engine.StatusRunning {
		f := engine.Failure{Kind: "history_limit", Message: fmt.Sprintf(
			"the execution's history would pass the tenant's limit of %d events; continue as new to start a fresh history", max)}
		if decision, err = engine.Fail(in, inst.Name, inst.Version, f); err != nil {
			return fail(f.Message)
		}
	}
	if err := d.applyDecision(ctx, ack, it, decision); err != nil {
		return nil, in, err
	}
	if ack.Status == store.StatusFailed {
		log.Info("execution failed", "error", ack.Error)
	}
	return ack, in, nil
}

// failUnreadable ends an execution whose history or start cannot be read: the
// messages are consumed and one execution_failed event is appended.
func (d *Dispatcher) failUnreadable(ack *store.AckOrchestrationItemParams, historyLen int, reason string, log *slog.Logger) (*store.AckOrchestrationItemParams, error) {
	log.Error("execution cannot run; it ends failed", "reason", reason)
	f := engine.Failure{Kind: "internal", Message: reason}
	kind, payload, err := engine.EncodeEvent(engine.ExecutionFailed{ID: int64(historyLen) + 1, Failure: f})
	if err != nil {
		return nil, err
	}
	ack.History = []store.HistoryEvent{{EventID: int64(historyLen) + 1, Kind: kind, Payload: payload}}
	ack.Status, ack.Error = store.StatusFailed, reason
	return ack, nil
}

// applyDecision translates the engine's decision into the ack's rows.
func (d *Dispatcher) applyDecision(ctx context.Context, ack *store.AckOrchestrationItemParams, it *store.OrchestrationItem, dec engine.Decision) error {
	self, exec := it.Instance.InstanceID, ack.ExecutionID
	ack.History = make([]store.HistoryEvent, 0, len(dec.Events))
	for _, e := range dec.Events {
		kind, payload, err := engine.EncodeEvent(e)
		if err != nil {
			return err
		}
		ack.History = append(ack.History, store.HistoryEvent{EventID: e.EventID(), Kind: kind, Payload: payload})
	}
	for _, a := range dec.Activities {
		ack.Activities = append(ack.Activities, store.ActivityTask{
			ActivityID: a.ActivityID, Name: a.Name, TaskQueue: a.TaskQueue, Input: a.Input, Attempt: a.Attempt,
		})
	}
	ack.CancelActivities = dec.CancelActivities
	for _, m := range dec.CancelTimers {
		kind, payload, err := engine.EncodeMessage(m)
		if err != nil {
			return err
		}
		ack.WithdrawMessages = append(ack.WithdrawMessages, store.Message{Kind: kind, Payload: payload})
	}
	send := func(instanceID string, execution int64, m engine.Message, delay time.Duration) error {
		kind, payload, err := engine.EncodeMessage(m)
		if err != nil {
			return err
		}
		ack.Messages = append(ack.Messages, store.OutgoingMessage{
			InstanceID: instanceID, ExecutionID: execution, Message: store.Message{Kind: kind, Payload: payload}, Delay: max(delay, 0),
		})
		return nil
	}
	for _, t := range dec.Timers {
		if err := send(self, exec, t.Message, t.Delay); err != nil {
			return err
		}
	}
	for _, c := range dec.CancelChildren {
		if err := send(c.InstanceID, 0, c.Message, 0); err != nil {
			return err
		}
	}
	if p := dec.ParentMessage; p != nil {
		var parentExec int64
		switch m := p.Message.(type) {
		case engine.ChildCompletedMessage:
			parentExec = m.ExecutionID
		case engine.ChildFailedMessage:
			parentExec = m.ExecutionID
		}
		if err := send(p.InstanceID, parentExec, p.Message, 0); err != nil {
			return err
		}
	}
	for _, c := range dec.Children {
		child, err := d.childStart(ctx, it.Lease.TenantID, self, exec, c)
		if err != nil {
			return err
		}
		ack.Children = append(ack.Children, child)
	}

	o := dec.Outcome
	ack.Status = storeStatus[o.Status]
	switch o.Status {
	case engine.StatusCompleted:
		ack.Output = o.Output
	case engine.StatusFailed:
		if o.Failure != nil {
			ack.Error = o.Failure.Message
		}
	case engine.StatusCancelled:
		ack.Error = o.Reason
	case engine.StatusContinuedAsNew:
		kind, payload, err := engine.EncodeMessage(*o.Next)
		if err != nil {
			return err
		}
		ack.ContinueAsNew = &store.ContinueAsNew{Input: o.Next.Input, Start: store.Message{Kind: kind, Payload: payload}}
	}
	return nil
}

// childStart describes a sub-orchestration to create. A child that pins no
// version runs the latest one registered now; when none is, it is created
// anyway and fails at its first turn, which tells the parent.
func (d *Dispatcher) childStart(ctx context.Context, tenant, parent string, exec int64, c engine.ChildStart) (store.ChildStart, error) {
	version := c.Version
	if version == "" {
		latest, err := d.cfg.Store.GetDefinition(ctx, &store.GetDefinitionParams{TenantID: tenant, Name: c.Name})
		switch {
		case err == nil:
			version = latest.Version
		case !errors.Is(err, store.ErrNotFound):
			return store.ChildStart{}, err
		}
	}
	kind, payload, err := engine.EncodeMessage(c.Message)
	if err != nil {
		return store.ChildStart{}, err
	}
	var scheduled int64
	if c.Message.Parent != nil {
		scheduled = c.Message.Parent.ScheduledID
	}
	takenKind, takenPayload, err := engine.EncodeMessage(engine.ChildFailedMessage{
		ExecutionID: exec, ScheduledID: scheduled, ChildInstanceID: c.InstanceID,
		Failure: engine.Failure{Kind: "child_failed", Message: fmt.Sprintf("instance id %q is taken", c.InstanceID)},
	})
	if err != nil {
		return store.ChildStart{}, err
	}
	return store.ChildStart{
		InstanceID: c.InstanceID, Name: c.Name, Version: version, Input: c.Input,
		Start:   store.Message{Kind: kind, Payload: payload},
		IfTaken: store.Message{Kind: takenKind, Payload: takenPayload},
	}, nil
}

// autoPrune applies the retention that governs a continue-as-new chain, as
// the fetch read it (so that a rule set before a generation's turn applies
// to it; read now when the turn ran before its write), when it asks for
// it: keep the last N. It runs after the ack, in the store's bounded
// prune; a failure is logged and left to the next continue-as-new, the
// chain's end, or the janitor. It reports whether it tried.
func (d *Dispatcher) autoPrune(ctx context.Context, it *store.OrchestrationItem) bool {
	tenant, id := it.Lease.TenantID, it.Lease.InstanceID
	r := it.Retention
	if it.RetentionUnread {
		t, err := d.cfg.Store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenant})
		if err != nil {
			d.log.Warn("auto-prune: could not read the tenant's retention", "tenant", tenant, "instance", id, "error", err)
			return true
		}
		r = t.Retention.For(it.Instance.Name, it.Instance.Retention)
	}
	keep, ok := r.Chain.AutoPrunes()
	if !ok {
		return false
	}
	res, err := d.cfg.Store.PruneExecutions(ctx, &store.PruneExecutionsParams{
		TenantID: tenant, InstanceID: id, Options: store.PruneOptions{KeepLast: keep},
	})
	if err != nil {
		d.log.Warn("auto-prune failed", "tenant", tenant, "instance", id, "error", err)
		return true
	}
	if res.ExecutionsDeleted > 0 {
		d.log.Debug("auto-pruned", "tenant", tenant, "instance", id, "executions", res.ExecutionsDeleted, "events", res.EventsDeleted)
	}
	return true
}

// storeStatus is how the store keeps each status a turn decides.
var storeStatus = map[engine.Status]store.Status{
	engine.StatusRunning:        store.StatusRunning,
	engine.StatusCompleted:      store.StatusCompleted,
	engine.StatusFailed:         store.StatusFailed,
	engine.StatusCancelled:      store.StatusCancelled,
	engine.StatusContinuedAsNew: store.StatusContinuedAsNew,
}
