package engine

import (
	"errors"
	"fmt"
)

// Limits bound what one execution may build during a turn. A definition that passes
// validation can still grow a value exponentially with cheap steps (each doubling the
// last), so sizes are measured while values are built, never after: a turn stops at
// the first piece past a limit, having spent at most about that much memory. Zero
// fields take the defaults.
type Limits struct {
	// MaxValueBytes bounds one value the execution produces or receives: a variable,
	// a step's output, the input of an activity, child or next execution, the output,
	// an activity's or child's result, an event's payload. Measured as JSON text.
	MaxValueBytes int64
	// MaxStateBytes bounds what a turn holds at once: the execution's input, its
	// variables, the outputs its steps record, buffered events, and the payloads of
	// the events the turn appends.
	MaxStateBytes int64
}

// The default limits.
const (
	DefaultMaxValueBytes = 1 << 20
	DefaultMaxStateBytes = 8 << 20
)

// eventOverhead is what each appended history event costs the turn's state beyond its
// payload, so that a turn cannot hold a bounded number of bytes in an unbounded
// number of events.
const eventOverhead = 64

func (l Limits) withDefaults() Limits {
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = DefaultMaxValueBytes
	}
	if l.MaxStateBytes <= 0 {
		l.MaxStateBytes = DefaultMaxStateBytes
	}
	return l
}

// LimitError reports a value or a turn's state past its limit.
type LimitError struct {
	// What names the thing measured: "a value", "the turn's state".
	What  string
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is larger than the limit of %d bytes", e.What, e.Limit)
}

// FailureKindLimit is the failure kind of an execution that passed one of its limits.
const FailureKindLimit = "limit"

// failureKind is the kind of the failure an error of evaluation becomes.
func failureKind(err error) string {
	if le := (*LimitError)(nil); errors.As(err, &le) {
		return FailureKindLimit
	}
	return "expression"
}

// meter counts the bytes of what is being built against a budget.
type meter struct {
	left int64
	err  *LimitError
}

func newMeter(what string, limit int64) *meter {
	return &meter{left: limit, err: &LimitError{What: what, Limit: limit}}
}

// spend takes n bytes from the budget, reporting the limit's error once it is overdrawn.
func (m *meter) spend(n int) error {
	m.left -= int64(n)
	if m.left < 0 {
		return m.err
	}
	return nil
}

// used returns the bytes spent so far.
func (m *meter) used() int64 { return m.err.Limit - m.left }

// measure spends the JSON size of v. It walks v as a tree, as its encoding would, so a
// value that shares parts with itself costs each appearance; the walk stops at the
// budget, so its time is bounded by the budget too.
func measure(v any, m *meter) error {
	switch x := v.(type) {
	case nil:
		return m.spend(4)
	case bool:
		return m.spend(5)
	case int64:
		return m.spend(intWidth(x))
	case float64:
		return m.spend(24)
	case string:
		return m.spend(len(x) + 2)
	case []any:
		if err := m.spend(2 + len(x)); err != nil {
			return err
		}
		for _, item := range x {
			if err := measure(item, m); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		if err := m.spend(2 + len(x)); err != nil {
			return err
		}
		for k, item := range x {
			if err := m.spend(len(k) + 3); err != nil {
				return err
			}
			if err := measure(item, m); err != nil {
				return err
			}
		}
		return nil
	case *stepResult:
		return measure(x.object(), m)
	}
	// Anything else is encoded by encoding/json's rules; it is small (the engine
	// builds no other kinds of values), so a fixed size will do.
	return m.spend(24)
}

// intWidth is the length of the decimal form of n.
func intWidth(n int64) int {
	w := 1
	if n < 0 {
		w++
	}
	for n >= 10 || n <= -10 {
		n /= 10
		w++
	}
	return w
}
