package crdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
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
		err := s.pool.QueryRow(ctx, `
WITH ins AS (
	INSERT INTO definitions (tenant_id, name, version, body, created_at)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (tenant_id, name, version) DO NOTHING
	RETURNING created_at
)
SELECT true, true, created_at FROM ins
UNION ALL
SELECT false, body = $4::JSONB, created_at FROM definitions
WHERE tenant_id = $1 AND name = $2 AND version = $3 AND NOT EXISTS (SELECT 1 FROM ins)`,
			p.TenantID, p.Name, p.Version, []byte(p.Document), now).Scan(&res.Created, &same, &createdAt)
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
	q := `SELECT name, version, body, created_at FROM definitions WHERE tenant_id = $1 AND name = $2 AND version = $3`
	args := []any{p.TenantID, p.Name, p.Version}
	if p.Version == "" {
		q = `SELECT name, version, body, created_at FROM definitions WHERE tenant_id = $1 AND name = $2
			ORDER BY created_at DESC, version DESC LIMIT 1`
		args = args[:2]
	}
	var d store.Definition
	err := s.retry(ctx, func(ctx context.Context) error {
		var createdAt int64
		err := s.pool.QueryRow(ctx, q, args...).Scan(&d.Name, &d.Version, &d.Document, &createdAt)
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
	body := "NULL::JSONB"
	if p.WithDocuments {
		body = "body"
	}
	// Keyset on (name ASC, created_at DESC, version DESC), resumed from the
	// last row's name and version.
	q := `
SELECT d.name, d.version, ` + body + `, d.created_at FROM definitions d
WHERE d.tenant_id = $1 AND ($2 = '' OR d.name = $2)
	AND ($3 = '' OR d.name > $3 OR (d.name = $3 AND (d.created_at, d.version) <
		(SELECT a.created_at, a.version FROM definitions a WHERE a.tenant_id = $1 AND a.name = $3 AND a.version = $4)))
ORDER BY d.name, d.created_at DESC, d.version DESC
LIMIT $5`
	var out []store.Definition
	err = s.retry(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, q, p.TenantID, p.Name, p.AfterName, p.AfterVersion, limit)
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
