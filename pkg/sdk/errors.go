package sdk

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Sentinel errors. Every error a Client or Worker call returns for an API
// failure is an [*Error]; test it against these with [errors.Is]:
//
//	if errors.Is(err, sdk.ErrNotFound) { ... }
//
// Use [errors.As] with an *Error for the details (field violations, the
// retry hint, the Connect code).
var (
	// ErrNotFound: the instance (or definition, or execution) does not exist
	// in the caller's tenant.
	ErrNotFound = errors.New("orchard: not found")
	// ErrAlreadyExists: the instance id is taken, or another document is
	// registered under the definition's name and version.
	ErrAlreadyExists = errors.New("orchard: already exists")
	// ErrInvalidArgument: the request breaks the API's rules; the *Error's
	// FieldViolations say which fields and why.
	ErrInvalidArgument = errors.New("orchard: invalid argument")
	// ErrFailedPrecondition: the request cannot be done in the object's
	// current state. ErrRunning, ErrSubOrchestration, ErrInstanceTerminal
	// and ErrLeaseLost are its particular cases, and an error matching one of them matches this
	// one too.
	ErrFailedPrecondition = errors.New("orchard: failed precondition")
	// ErrRunning: a delete without force met a running instance in the tree.
	ErrRunning = errors.New("orchard: instance is running")
	// ErrSubOrchestration: a sub-orchestration is deleted with its root,
	// never on its own.
	ErrSubOrchestration = errors.New("orchard: sub-orchestration")
	// ErrInstanceTerminal: the instance has ended (completed, failed or
	// cancelled); it takes no more events or cancel requests.
	ErrInstanceTerminal = errors.New("orchard: instance has ended")
	// ErrLeaseLost: a worker call met a task whose lease is gone: the
	// activity was cancelled, its instance deleted, or the lease lapsed.
	ErrLeaseLost = errors.New("orchard: task lease lost")
	// ErrUnauthenticated: no token, or a token that does not verify.
	ErrUnauthenticated = errors.New("orchard: unauthenticated")
	// ErrPermissionDenied: the token's roles do not allow the call, or the
	// tenant is suspended.
	ErrPermissionDenied = errors.New("orchard: permission denied")
	// ErrResourceExhausted: a tenant limit was reached (request rate,
	// running instances, payload size); the *Error's RetryAfter says when
	// trying again helps, when it does.
	ErrResourceExhausted = errors.New("orchard: resource exhausted")
	// ErrUnavailable: the API (or its database) could not be reached.
	ErrUnavailable = errors.New("orchard: unavailable")
)

var codeSentinels = map[connect.Code]error{
	connect.CodeNotFound:           ErrNotFound,
	connect.CodeAlreadyExists:      ErrAlreadyExists,
	connect.CodeInvalidArgument:    ErrInvalidArgument,
	connect.CodeFailedPrecondition: ErrFailedPrecondition,
	connect.CodeUnauthenticated:    ErrUnauthenticated,
	connect.CodePermissionDenied:   ErrPermissionDenied,
	connect.CodeResourceExhausted:  ErrResourceExhausted,
	connect.CodeUnavailable:        ErrUnavailable,
}

// Error is an API call's failure.
type Error struct {
	// Code is the Connect code the call failed with.
	Code connect.Code
	// Message is the server's message (or the client's, for a failure the
	// SDK found before sending anything).
	Message string
	// Reason is the reason of the google.rpc.ErrorInfo the API attaches to
	// every error: the particular cause where a code has several
	// (INSTANCE_RUNNING, INSTANCE_TERMINAL, LEASE_LOST, SUB_ORCHESTRATION,
	// WOULD_ORPHAN, TENANT_NOT_ACTIVE), else the code's name (NOT_FOUND).
	// Empty for a failure that did not come from the API.
	Reason string
	// FieldViolations name the request fields that broke the API's rules,
	// for InvalidArgument (request validation, definition documents).
	FieldViolations []FieldViolation
	// RetryAfter is how long the server asks to wait before trying again,
	// for ResourceExhausted and Unavailable; zero when it gave no hint
	// (waiting does not help, or it did not say).
	RetryAfter time.Duration

	// precondition refines a FailedPrecondition: ErrRunning,
	// ErrSubOrchestration, ErrInstanceTerminal, ErrLeaseLost or nil.
	precondition error
	cause        error
}

// FieldViolation is one broken rule of a request: the field's path (for
// example "filter.statuses[0]" or "document.steps[2].activity") and why.
type FieldViolation struct {
	Field       string
	Description string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("orchard: ")
	b.WriteString(e.Code.String())
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	// List the violations, unless the message already names the only one.
	if n := len(e.FieldViolations); n > 1 || n == 1 && !strings.Contains(e.Message, e.FieldViolations[0].Field) {
		b.WriteString(" (")
		for i, v := range e.FieldViolations {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(v.Field + ": " + v.Description)
		}
		b.WriteString(")")
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	return b.String()
}

// Is matches the sentinel of the error's code, and for FailedPrecondition
// the particular case (ErrRunning, ErrSubOrchestration, ErrInstanceTerminal,
// ErrLeaseLost).
func (e *Error) Is(target error) bool {
	if target == nil {
		return false
	}
	if s, ok := codeSentinels[e.Code]; ok && s == target {
		return true
	}
	return e.precondition != nil && e.precondition == target
}

// Unwrap returns the underlying error: the *connect.Error of the call (so
// context.Canceled and context.DeadlineExceeded still match errors.Is when
// the caller's context ended), or the local cause.
func (e *Error) Unwrap() error { return e.cause }

// The reasons the API puts in the google.rpc.ErrorInfo detail of a
// FailedPrecondition.
var preconditionReasons = map[string]error{
	"INSTANCE_RUNNING":  ErrRunning,
	"SUB_ORCHESTRATION": ErrSubOrchestration,
	"WOULD_ORPHAN":      ErrSubOrchestration,
	"LEASE_LOST":        ErrLeaseLost,
	"INSTANCE_TERMINAL": ErrInstanceTerminal,
}

// apiError is the one place where a call's failure becomes an *Error: the
// Connect code, the message, and the details the API attaches
// (google.rpc.BadRequest and buf.validate.Violations as field violations,
// google.rpc.RetryInfo as RetryAfter, google.rpc.ErrorInfo for the
// particular FailedPrecondition).
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		return &Error{Code: connect.CodeOf(err), Message: err.Error(), cause: err}
	}
	e = &Error{Code: ce.Code(), Message: ce.Message(), cause: ce}
	reason := ""
	for _, d := range ce.Details() {
		msg, derr := d.Value()
		if derr != nil {
			continue
		}
		switch m := msg.(type) {
		case *errdetails.BadRequest:
			for _, v := range m.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *validatepb.Violations:
			for _, v := range m.GetViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{Field: fieldPath(v), Description: v.GetMessage()})
			}
		case *errdetails.RetryInfo:
			if d := m.GetRetryDelay(); d != nil && d.AsDuration() > 0 {
				e.RetryAfter = d.AsDuration()
			}
		case *errdetails.ErrorInfo:
			reason = m.GetReason()
			e.Reason = reason
		}
	}
	if e.Code == connect.CodeFailedPrecondition {
		e.precondition = precondition(reason)
	}
	return e
}

// precondition tells which FailedPrecondition an error is, by the reason of
// the google.rpc.ErrorInfo detail the API attaches to each.
func precondition(reason string) error {
	return preconditionReasons[reason]
}

// fieldPath renders a protovalidate violation's field path the way the
// protos name fields: "filter.statuses[0]", "tags[\"k\"]".
func fieldPath(v *validatepb.Violation) string {
	var b strings.Builder
	for _, el := range v.GetField().GetElements() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(el.GetFieldName())
		switch s := el.GetSubscript().(type) {
		case *validatepb.FieldPathElement_Index:
			b.WriteString("[" + strconv.FormatUint(s.Index, 10) + "]")
		case *validatepb.FieldPathElement_StringKey:
			b.WriteString("[" + strconv.Quote(s.StringKey) + "]")
		case *validatepb.FieldPathElement_IntKey:
			b.WriteString("[" + strconv.FormatInt(s.IntKey, 10) + "]")
		case *validatepb.FieldPathElement_UintKey:
			b.WriteString("[" + strconv.FormatUint(s.UintKey, 10) + "]")
		case *validatepb.FieldPathElement_BoolKey:
			b.WriteString("[" + strconv.FormatBool(s.BoolKey) + "]")
		}
	}
	if b.Len() == 0 {
		// A message-level rule (a CEL expression over several fields).
		return v.GetRuleId()
	}
	return b.String()
}

// invalidArgument is a failure the SDK finds before sending a request,
// shaped like the server's.
func invalidArgument(field, format string, args ...any) *Error {
	desc := fmt.Sprintf(format, args...)
	return &Error{
		Code:            connect.CodeInvalidArgument,
		Message:         field + ": " + desc,
		FieldViolations: []FieldViolation{{Field: field, Description: desc}},
	}
}
