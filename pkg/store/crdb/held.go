package crdb

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/pkg/store"
)

// heldWrite makes a write that leases its instance eagerly and runs its
// turn (store.EagerLease), for a turn that needs what the write leased (a
// completion's turn reads the instance's history and messages, unless it
// runs ahead: heldBefore). It runs on one connection in two round trips:
// BEGIN, the write and LeasedInputs; then the turn's ack and COMMIT. The
// turn runs in between, so the write and the turn's ack commit together,
// at READ COMMITTED like each of them alone. write queues the write, and
// read reads its result and says whether it took effect (when it did not,
// nothing is committed). A write that leased no instance a turn can take
// (leased already, or with nothing to consume) commits alone. The attempt
// is not retried here: again says that it committed nothing, and that the
// caller is to make the write again, with no lease (Done told the holder
// so, when its turn ran).
func (s *Store) heldWrite(ctx context.Context, e *store.EagerLease, now, until int64,
	write func(b *pgx.Batch), read func(br pgx.BatchResults) (bool, error)) (done, again bool, err error) {
	conn, release, err := s.heldConn(ctx)
	if err != nil {
		return s.heldFailed(ctx, err)
	}
	defer release()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	write(b)
	s.queueLeasedInputs(b, e.Token, now)
	br := conn.SendBatch(ctx, b)
	var leased leasedInputs
	err = func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		var err error
		if done, err = read(br); err != nil || !done {
			return err
		}
		return leased.read(br)
	}()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return s.heldFailed(ctx, err)
	}
	if !done {
		return false, false, nil
	}
	in := leased.claimed
	if len(in) != 1 || in[0].Name == "" || len(leased.messages[in[0].InstanceID]) == 0 {
		_, err := conn.Exec(ctx, "COMMIT")
		release()
		if err != nil {
			return false, false, err
		}
		// Nothing for a turn: what the lease holds (a zombie's messages,
		// or none) is settled as a claim settles it.
		_, _, err = s.leasedItems(ctx, &leased, e.Token, until)
		return true, false, err
	}
	items, _, err := s.leasedItems(ctx, &leased, e.Token, until)
	if err != nil || len(items) != 1 {
		return s.heldFailed(ctx, err)
	}
	ack := e.Hold.Turn(ctx, items[0])
	acked, result, err := s.commitHeld(ctx, conn, ack, &pgx.Batch{}, nil)
	release()
	if err != nil {
		e.Hold.Done(ctx, false, nil)
		return s.heldFailed(ctx, err)
	}
	e.Held = true
	e.Hold.Done(ctx, acked, result)
	return true, false, nil
}

// heldBefore makes an eager write whose turn ran before it (ack), on the
// instance as the write will lease it: an eager start's first turn that
// the start cannot write itself (folds), whose item is the start's own
// instance and message, or a completion's (store.EagerLease.Ahead). The write, the turn's ack and COMMIT then go
// in one round trip, where heldWrite needs two and a read. read reads the
// write's results: done, it took effect; held, it leased item's instance
// as item has it. The ack holds only under that lease: a write that
// leased nothing, or not that instance as it was (the statements write
// let go of such a lease), leaves the ack nothing to write, and a failed
// one committed nothing. Done then hears ErrNotFound: the turn is void,
// and a failed write is made again without it.
func (s *Store) heldBefore(ctx context.Context, e *store.EagerLease, ack *store.AckOrchestrationItemParams,
	write func(b *pgx.Batch), read func(br pgx.BatchResults) (done, held bool, err error)) (done, again bool, err error) {
	conn, release, err := s.heldConn(ctx)
	if err != nil {
		e.Hold.Done(ctx, false, store.ErrNotFound)
		return s.heldFailed(ctx, err)
	}
	defer release()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	write(b)
	var held bool
	acked, result, err := s.commitHeld(ctx, conn, ack, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		var err error
		done, held, err = read(br)
		return err
	})
	release()
	switch {
	case err != nil:
		e.Hold.Done(ctx, false, store.ErrNotFound)
		return s.heldFailed(ctx, err)
	case !held:
		e.Hold.Done(ctx, false, store.ErrNotFound)
		return done, false, nil
	}
	e.Held = true
	e.Hold.Done(ctx, acked, result)
	return true, false, nil
}

// heldConn acquires the connection of a held write. Its release rolls
// back what did not commit, and gives the connection back: called before
// Done, so that the holder's own ack neither waits for the rows of a
// failed attempt nor needs a second connection; called again, it does
// nothing.
func (s *Store) heldConn(ctx context.Context) (*pgxpool.Conn, func(), error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	released := false
	return conn, func() {
		if released {
			return
		}
		released = true
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		conn.Release()
	}, nil
}

// heldFailed counts a failed attempt of a held write, as retry counts its
// own, and has the write made again with no turn.
func (s *Store) heldFailed(ctx context.Context, err error) (done, again bool, _ error) {
	s.countFailed(ctx, err)
	return false, true, nil
}

// commitHeld commits a held turn's ack, in one round trip with what b
// holds before it (the write, or nothing when the write went before), and
// read reads that (nil: nothing to read). acked: the ack went with it,
// and its outcome is result. The write commits alone when there is no ack
// or the store would refuse it: its holder then acks on its own, and sees
// the refusal there.
func (s *Store) commitHeld(ctx context.Context, conn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, ack *store.AckOrchestrationItemParams, b *pgx.Batch, read func(br pgx.BatchResults) error) (acked bool, result error, err error) {
	var before, after int
	acked = ack != nil && validateAck(ack) == nil && validToken(ack.Lease.Token) && validToken(ack.MessageIDs...)
	if acked {
		before, after = queueAck(b, ack.Lease.TenantID, []*store.AckOrchestrationItemParams{ack}, s.now())
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	var wrote *store.AckedInstance
	err = func() error {
		if read != nil {
			if err := read(br); err != nil {
				return err
			}
		}
		if acked {
			ok, err := readAck(br, before, after)
			if err != nil {
				return err
			}
			if wrote = ok[ack.Lease.InstanceID]; wrote == nil {
				result = leaseLost(ack.Lease)
			}
		}
		_, err := br.Exec()
		return err
	}()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if acked && err == nil {
		ack.Acked = wrote
	}
	return acked, result, err
}

// written tells e's holder whether the write wrote the turn it ran before
// it (e.Held; HeldTurn.Done hears it acked), or not: the turn is void.
func written(ctx context.Context, e *store.EagerLease, wrote bool) {
	e.Held = wrote
	if wrote {
		e.Hold.Done(ctx, true, nil)
		return
	}
	e.Hold.Done(ctx, false, store.ErrNotFound)
}
