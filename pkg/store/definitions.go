package store

import (
	"context"
	"encoding/json"
	"time"
)

// Definitions keeps the orchestration definitions a tenant registered. A
// version, once registered, never changes: an instance is pinned to the
// version it started with.
type Definitions interface {
	// RegisterDefinition stores a definition's version. Registering the same
	// document again is a no-op (Created is false); a different document for
	// a version that exists is ErrAlreadyExists.
	RegisterDefinition(ctx context.Context, p *RegisterDefinitionParams) (*RegisterDefinitionResult, error)
	// GetDefinition reads one version, or the latest when Version is empty.
	// ErrNotFound when there is none.
	GetDefinition(ctx context.Context, p *GetDefinitionParams) (*Definition, error)
	// ListDefinitions lists registered versions, by name then newest first.
	ListDefinitions(ctx context.Context, p *ListDefinitionsParams) ([]Definition, error)
}

// Definition is one registered version of an orchestration definition.
type Definition struct {
	Name    string
	Version string
	// Document is the definition as JSON (the engine's stored form).
	Document  json.RawMessage
	CreatedAt time.Time
}

// RegisterDefinitionParams names the version and carries its document. The
// caller validates the document (the store does not parse definitions).
type RegisterDefinitionParams struct {
	TenantID string
	Name     string
	Version  string
	Document json.RawMessage
}

// RegisterDefinitionResult tells whether the version is new.
type RegisterDefinitionResult struct {
	Created   bool
	CreatedAt time.Time
}

// GetDefinitionParams names a version; an empty Version means the latest,
// the one registered last.
type GetDefinitionParams struct {
	TenantID string
	Name     string
	Version  string
}

// ListDefinitionsParams selects the versions to list.
type ListDefinitionsParams struct {
	TenantID string
	// Name restricts the list to one definition's versions.
	Name string
	// After continues a listing after this name and version (keyset).
	AfterName, AfterVersion string
	// Limit bounds the page: default 100, at most 1000.
	Limit int
	// WithDocuments also reads each version's document.
	WithDocuments bool
}
