package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// errorDomain is the domain of the google.rpc.ErrorInfo of every error.
const errorDomain = "orchard.dev"

// connectError is the one place where an error becomes what a client sees.
// Connect errors (validation, handlers' field errors) keep their code and
// text; store and tenancy sentinels get their code and our own text; the
// rest is Internal (or Unavailable when the database cannot serve the call
// now) with a generic message, the detail logged with the call's
// attributes. Every error leaves with a google.rpc.ErrorInfo whose reason
// clients branch on: a particular one (INSTANCE_RUNNING, LEASE_LOST...)
// where the code has several causes, else the code's name (NOT_FOUND).
func connectError(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	ce := mapError(ctx, log, err)
	if reasonOf(ce) == "" {
		addReason(ce, strings.ToUpper(ce.Code().String()))
	}
	return ce
}

// errorInfoType is the type of a google.rpc.ErrorInfo detail.
var errorInfoType = string((*errdetails.ErrorInfo)(nil).ProtoReflect().Descriptor().FullName())

// reasonOf is the reason of the error's google.rpc.ErrorInfo, "" without one.
func reasonOf(ce *connect.Error) string {
	for _, d := range ce.Details() {
		// Only the ErrorInfo is decoded: the others (a refusal's quota and
		// retry delay) are not needed.
		if d.Type() != errorInfoType {
			continue
		}
		if m, err := d.Value(); err == nil {
			if info, ok := m.(*errdetails.ErrorInfo); ok {
				return info.GetReason()
			}
		}
	}
	return ""
}

// addReason attaches a google.rpc.ErrorInfo with the reason.
func addReason(ce *connect.Error, reason string) {
	if detail, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}); err == nil {
		ce.AddDetail(detail)
	}
}

// mapError gives an error its code and the text a client may see.
func mapError(ctx context.Context, log *slog.Logger, err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	var exhausted *tenancy.ExhaustedError
	var invalidDef *engine.ValidationError
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the call's deadline passed"))
	case errors.Is(err, tenancy.ErrUnauthenticated):
		// tenancy's texts never hold token content.
		return connect.NewError(connect.CodeUnauthenticated, err)
	case errors.Is(err, tenancy.ErrPermissionDenied):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.As(err, &exhausted):
		return exhaustedError(exhausted)
	case errors.As(err, &invalidDef):
		return definitionError(invalidDef)
	case errors.Is(err, store.ErrConflict):
		log.WarnContext(ctx, "api: transaction retries exhausted", slog.Any("error", err))
		return connect.NewError(connect.CodeAborted, errors.New("the operation kept conflicting with concurrent writes; try again"))
	// The store's sentinel errors carry our own text (ids, reasons), never
	// the driver's: safe to show.
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, store.ErrAlreadyExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, store.ErrInvalidArgument):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, store.ErrInstanceRunning):
		return preconditionError(err, "INSTANCE_RUNNING")
	case errors.Is(err, store.ErrSubOrchestration):
		return preconditionError(err, "SUB_ORCHESTRATION")
	case errors.Is(err, store.ErrInstanceTerminal):
		return preconditionError(err, "INSTANCE_TERMINAL")
	case errors.Is(err, store.ErrWouldOrphan):
		return preconditionError(err, "WOULD_ORPHAN")
	case errors.Is(err, store.ErrLeaseLost):
		// WorkerService: the task was cancelled, its instance deleted, or
		// the lease lapsed; the worker drops its work.
		return preconditionError(errors.New("the task's lease is lost: it was cancelled, its instance deleted, or the lease lapsed"), "LEASE_LOST")
	case errors.Is(err, store.ErrUnavailable):
		log.WarnContext(ctx, "api: database unavailable", slog.Any("error", err))
		return unavailableError()
	}
	log.ErrorContext(ctx, "api: internal error", slog.Any("error", err))
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// unavailableRetryDelay is the wait an Unavailable answer suggests: about
// what a database restart or a failover takes.
const unavailableRetryDelay = time.Second

// unavailableError is Unavailable with a google.rpc.RetryInfo detail: the
// database cannot serve the call now, for a passing reason.
func unavailableError() *connect.Error {
	ce := connect.NewError(connect.CodeUnavailable, errors.New("the service is temporarily unavailable; try again"))
	if detail, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(unavailableRetryDelay)}); err == nil {
		ce.AddDetail(detail)
	}
	return ce
}

// preconditionError is FailedPrecondition with a google.rpc.ErrorInfo
// detail whose reason says which precondition failed, for clients to tell
// them apart without reading the text.
func preconditionError(err error, reason string) *connect.Error {
	ce := connect.NewError(connect.CodeFailedPrecondition, err)
	addReason(ce, reason)
	return ce
}

// exhaustedError is ResourceExhausted with the limit named and, when
// waiting helps, a google.rpc.RetryInfo detail and the delay in the text.
func exhaustedError(e *tenancy.ExhaustedError) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, e)
	detail, err := connect.NewErrorDetail(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject: "tenant", Description: fmt.Sprintf("%s limit %d reached", e.Resource, e.Limit),
	}}})
	if err == nil {
		ce.AddDetail(detail)
	}
	if e.RetryAfter > 0 {
		if detail, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)}); err == nil {
			ce.AddDetail(detail)
		}
	}
	return ce
}

// definitionError is InvalidArgument with each problem of a definition as a
// google.rpc.BadRequest field violation: the path within the document.
func definitionError(e *engine.ValidationError) *connect.Error {
	ce := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("document: %w", e))
	br := &errdetails.BadRequest{}
	for _, fe := range e.Errors {
		field := "document"
		if fe.Path != "" {
			field = "document." + fe.Path
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: fe.Reason})
	}
	if detail, err := connect.NewErrorDetail(br); err == nil {
		ce.AddDetail(detail)
	}
	return ce
}

// fieldError is InvalidArgument naming a request field, with a
// google.rpc.BadRequest detail.
func fieldError(field, format string, args ...any) *connect.Error {
	desc := fmt.Sprintf(format, args...)
	ce := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, desc))
	if detail, err := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
		Field: field, Description: desc,
	}}}); err == nil {
		ce.AddDetail(detail)
	}
	return ce
}
