package crdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// deleteRows removes instances with everything they own in one statement
// (DeleteInstanceRows) and returns the counts, which it tallies under the
// audit record (none: ""), for the root a DeleteInstance deletes (nil
// otherwise). The caller has checked that no orphan is left.
func deleteRows(ctx context.Context, tx pgx.Tx, tenantID string, d doomed, audit string, root *string) (store.DeleteResult, error) {
	var r store.DeleteResult
	var orchestratorRows, workerRows int64
	err := tx.QueryRow(ctx, sqlDeleteInstanceRows, namedArgs{
		"tenant_id": tenantID, "ids": d.ids, "tagged": nonNil(d.tagged), "prunable": nonNil(d.prunable),
		"orchestrator_queued": nonNil(d.orchestratorQueued), "worker_queued": nonNil(d.workerQueued),
		"shard": countShard(), "audit_record_id": audit, "audit_root": root,
	}).Scan(&r.InstancesDeleted, &r.ExecutionsDeleted, &r.EventsDeleted, &orchestratorRows, &workerRows)
	r.QueueMessagesDeleted = orchestratorRows + workerRows
	return r, err
}

// purged reports a committed delete or prune transaction to the test hook.
func (s *Store) purged(rows int64) {
	if s.onPurge != nil && rows > 0 {
		s.onPurge(rows)
	}
}

func deletedRows(r store.DeleteResult) int64 {
	return r.InstancesDeleted + r.ExecutionsDeleted + r.EventsDeleted + r.QueueMessagesDeleted
}

// DeleteInstancesAtomic deletes a set of instances in one transaction.
func (s *Store) DeleteInstancesAtomic(ctx context.Context, p *store.DeleteInstancesAtomicParams) (*store.DeleteResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if len(p.InstanceIDs) > store.MaxFilterIDs {
		return nil, invalid("at most %d instances in one atomic delete, got %d", store.MaxFilterIDs, len(p.InstanceIDs))
	}
	var res store.DeleteResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = store.DeleteResult{}
		rows, err := tx.Query(ctx, sqlAtomicDeleteCheck, namedArgs{"tenant_id": p.TenantID, "ids": p.InstanceIDs})
		if err != nil {
			return err
		}
		var ids, running []string
		var total int64
		var orphan [2]string
		for rows.Next() {
			var id string
			var isRunning bool
			var cost int64
			var child *string
			if err := rows.Scan(&id, &isRunning, &cost, &child); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			total += cost
			if isRunning {
				running = append(running, id)
			}
			if child != nil && orphan[0] == "" {
				orphan = [2]string{id, *child}
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		switch {
		case orphan[0] != "":
			return fmt.Errorf("instance %q has child %q outside the set: %w", orphan[0], orphan[1], store.ErrWouldOrphan)
		case len(running) > 0 && !p.Force:
			return fmt.Errorf("%s: %w", namedInstances(running), store.ErrInstanceRunning)
		case total > s.opts.MaxRowsPerTransaction:
			return invalid("an atomic delete of these instances would remove %d rows, more than the %d one transaction may; delete their roots with DeleteInstance",
				total, s.opts.MaxRowsPerTransaction)
		case len(ids) == 0:
			return nil
		}
		res, err = deleteRows(ctx, tx, p.TenantID, everything(ids), "", nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.purged(deletedRows(res))
	return &res, nil
}

// DeleteInstance deletes a root instance and its whole tree, leaves first,
// in transactions of at most MaxRowsPerTransaction rows. Each transaction
// removes whole instances whose descendants are already gone, so no reader
// ever sees an orphan or part of an instance; an instance too big for one
// transaction is first hidden (deleting), then removed piece by piece.
// Calling it again after an interruption finishes the job.
func (s *Store) DeleteInstance(ctx context.Context, p *store.DeleteInstanceParams) (*store.DeleteResult, error) {
	if p.TenantID == "" || p.InstanceID == "" {
		return nil, invalid("tenant id and instance id are required")
	}
	var total store.DeleteResult
	for first := true; ; first = false {
		var step store.DeleteResult
		var done bool
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			step, done = store.DeleteResult{}, false
			nodes, err := walkTree(ctx, tx, p.TenantID, p.InstanceID)
			if err != nil {
				return err
			}
			if len(nodes) == 0 {
				done = true
				return nil
			}
			root := nodes[len(nodes)-1]
			if root.parent != "" {
				return fmt.Errorf("instance %q is a child of %q: %w", p.InstanceID, root.parent, store.ErrSubOrchestration)
			}
			if first && !p.Force {
				var running []string
				for _, n := range nodes {
					if n.running && !n.deleting {
						running = append(running, n.id)
					}
				}
				if len(running) > 0 {
					return fmt.Errorf("%s: %w", namedInstances(running), store.ErrInstanceRunning)
				}
			}
			step, done, err = s.deleteStep(ctx, tx, p.TenantID, nodes, p.Audit, &p.InstanceID)
			return err
		})
		if err != nil {
			return nil, err
		}
		s.purged(deletedRows(step))
		total.Add(step)
		if done {
			return &total, nil
		}
	}
}

// deleteStep does one transaction's worth of deleting a tree whose nodes
// come children first: whole instances from the front while they fit, or,
// when the first does not fit on its own, a piece of it. It tallies what
// it removed of the root under the audit record.
func (s *Store) deleteStep(ctx context.Context, tx pgx.Tx, tenantID string, nodes []treeNode, audit string, root *string) (store.DeleteResult, bool, error) {
	budget := s.opts.MaxRowsPerTransaction
	var ids []string
	for _, n := range nodes {
		if n.rows > budget {
			break
		}
		ids = append(ids, n.id)
		budget -= n.rows
	}
	if len(ids) == 0 {
		r, err := s.deleteInstancePiece(ctx, tx, tenantID, nodes[0].id)
		if err != nil {
			return r, false, err
		}
		return r, false, addTally(ctx, tx, tenantID, audit, root, store.AuditResult{Executions: r.ExecutionsDeleted, Events: r.EventsDeleted})
	}
	r, err := deleteRows(ctx, tx, tenantID, everything(ids), audit, root)
	return r, len(ids) == len(nodes), err
}

var (
	sqlAtomicDeleteCheck     = stmt("AtomicDeleteCheck")
	sqlDeletePieceQueues     = stmt("DeletePieceQueues")
	sqlDeletePieceHistory    = stmt("DeletePieceHistory")
	sqlDeletePieceExecutions = stmt("DeletePieceExecutions")
)

// deleteInstancePiece removes up to MaxRowsPerTransaction rows of one
// instance too big to delete at once (sql/delete.sql, DeletePieceQueues
// and the two that follow it).
func (s *Store) deleteInstancePiece(ctx context.Context, tx pgx.Tx, tenantID, instanceID string) (store.DeleteResult, error) {
	var r store.DeleteResult
	var orchestratorRows, workerRows, leases int64
	budget := s.opts.MaxRowsPerTransaction
	piece := namedArgs{"tenant_id": tenantID, "instance_id": instanceID, "limit": budget / 2, "shard": countShard()}
	err := tx.QueryRow(ctx, sqlDeletePieceQueues, piece).Scan(&orchestratorRows, &workerRows, &leases)
	if err != nil {
		return r, err
	}
	r.QueueMessagesDeleted = orchestratorRows + workerRows
	budget -= orchestratorRows + workerRows + leases + 1
	if budget <= 0 {
		return r, nil
	}
	piece = namedArgs{"tenant_id": tenantID, "instance_id": instanceID, "limit": budget}
	err = tx.QueryRow(ctx, sqlDeletePieceHistory, piece).Scan(&r.EventsDeleted)
	if err != nil || r.EventsDeleted > 0 {
		return r, err
	}
	err = tx.QueryRow(ctx, sqlDeletePieceExecutions, piece).Scan(&r.ExecutionsDeleted)
	return r, err
}
