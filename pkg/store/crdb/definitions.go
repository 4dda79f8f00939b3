package crdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var (
	sqlRegisterDefinition   = stmt("RegisterDefinition")
	sqlGetDefinitionVersion = stmt("GetDefinitionVersion")
	sqlGetDefinitionLatest  = stmt("GetDefinitionLatest")
	sqlListDefinitions      = stmt("ListDefinitions")
)

// RegisterDefinition inserts a version, or finds it registered with the same
// document (a no-op) or another one (ErrAlreadyExists). One statement: the
// insert and the comparison with what is there.
func (s *Store) RegisterDefinition(ctx context.Context, p *store.RegisterDefinitionParams) (*store.RegisterDefinitionResult, error) {
	if p.TenantID == "" || p.Name == "" || p.Version == "" {
		return nil, invalid("tenant id, definition name and version are required")
	}
	if !json.Valid(p.Document) {
		return nil, invalid("definition %s version %s: the document is not JSON", p.Name, p.Version)
	}
	now := s.now()
	var res store.RegisterDefinitionResult
	var same bool
	err := s.retry(ctx, func(ctx context.Context) error {
		var createdAt int64
		err := s.pool.QueryRow(ctx, sqlRegisterDefinition, namedArgs{
			"tenant_id": p.TenantID, "name": p.Name, "version": p.Version, "body": []byte(p.Document), "now": now,
		}).Scan(&res.Created, &same, &createdAt)
		res.CreatedAt = fromMillis(createdAt)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !same {
		return nil, fmt.Errorf("definition %s version %s is registered with another document: %w", p.Name, p.Version, store.ErrAlreadyExists)
	}
	return &res, nil
}

// GetDefinition reads a version, or the one registered last.
func (s *Store) GetDefinition(ctx context.Context, p *store.GetDefinitionParams) (*store.Definition, error) {
	q, args := sqlGetDefinitionVersion, namedArgs{"tenant_id": p.TenantID, "name": p.Name, "version": p.Version}
	if p.Version == "" {
		q = sqlGetDefinitionLatest
		delete(args, "version")
	}
	var d store.Definition
	err := s.retry(ctx, func(ctx context.Context) error {
		var createdAt int64
		err := s.pool.QueryRow(ctx, q, args).Scan(&d.Name, &d.Version, &d.Document, &createdAt)
		d.CreatedAt = fromMillis(createdAt)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		if p.Version == "" {
			return nil, fmt.Errorf("definition %s: %w", p.Name, store.ErrNotFound)
		}
		return nil, fmt.Errorf("definition %s version %s: %w", p.Name, p.Version, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// ListDefinitions lists versions by name, newest first within a name.
func (s *Store) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]store.Definition, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var out []store.Definition
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sqlListDefinitions, namedArgs{
			"tenant_id": p.TenantID, "name": p.Name, "after_name": p.AfterName, "after_version": p.AfterVersion,
			"with_documents": p.WithDocuments, "limit": limit})
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d store.Definition
			var doc []byte
			var createdAt int64
			if err := rows.Scan(&d.Name, &d.Version, &doc, &createdAt); err != nil {
				return err
			}
			d.Document, d.CreatedAt = doc, fromMillis(createdAt)
			out = append(out, d)
		}
		return rows.Err()
	})
	return out, err
}
