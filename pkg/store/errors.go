package store

import "errors"

// Sentinel errors of the store contract. Implementations wrap them with
// context; callers test them with errors.Is. The API maps them to Connect
// codes in one place.
var (
	// ErrNotFound: the instance (or tenant, or execution) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the id is taken.
	ErrAlreadyExists = errors.New("already exists")
	// ErrLeaseLost: the lease expired, was taken over, or its row is gone
	// (the instance was deleted, the activity was cancelled).
	ErrLeaseLost = errors.New("lease lost")
	// ErrInvalidArgument: the params are malformed (an empty id, a status
	// that does not exist, a negative duration).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInstanceRunning: a delete without force met a running instance.
	ErrInstanceRunning = errors.New("instance is running")
	// ErrSubOrchestration: sub-orchestrations are deleted with their root,
	// never on their own.
	ErrSubOrchestration = errors.New("cannot delete a sub-orchestration: delete its root instance")
	// ErrWouldOrphan: an atomic delete would leave a child without its parent.
	ErrWouldOrphan = errors.New("delete would orphan a sub-orchestration")
	// ErrInstanceTerminal: the instance has ended (Completed, Failed or
	// Cancelled) and takes no more messages.
	ErrInstanceTerminal = errors.New("instance has ended")
	// ErrTooManyRunning: a start was refused because its tenant has as many
	// running instances as StartOrchestrationParams.MaxRunning allows.
	ErrTooManyRunning = errors.New("too many running instances")
	// ErrConflict: a transaction kept conflicting with others and the retry
	// budget ran out. The operation may be tried again later.
	ErrConflict = errors.New("transaction conflict: retry budget exhausted")
	// ErrUnavailable: the database could not be reached, or went away or
	// refused work while the operation ran (connection errors, server
	// shutdown, too many clients). A read may be tried again; a write may or
	// may not have committed, so try again only what is safe to repeat.
	ErrUnavailable = errors.New("database unavailable")
)
