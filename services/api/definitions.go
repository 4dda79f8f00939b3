package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/maypok86/otter/v2"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

type definitionService struct{ s *Server }

// maxCachedVersions bounds the registered-version cache's memory, and
// versionTTL how long a version is remembered.
const (
	maxCachedVersions = 100_000
	versionTTL        = 10 * time.Minute
)

// versionCache remembers definition versions known to be registered, so
// that a start naming its version costs no read of the definition: a
// registered version never changes (RegisterDefinition refuses another
// document under it) and goes only with its tenant. Only versions found
// are kept: a version registered a moment ago must start at once.
type versionCache struct {
	cache *otter.Cache[versionKey, struct{}]
}

type versionKey struct{ tenant, name, version string }

func newVersionCache() *versionCache {
	return &versionCache{cache: otter.Must(&otter.Options[versionKey, struct{}]{
		MaximumSize:      maxCachedVersions,
		ExpiryCalculator: otter.ExpiryWriting[versionKey, struct{}](versionTTL),
	})}
}

// resolve returns the name and version a start names: the version given,
// known registered or read, or the version registered last.
func (c *versionCache) resolve(ctx context.Context, st store.Definitions, tenant, name, version string) (string, string, error) {
	if version != "" {
		if _, ok := c.cache.GetIfPresent(versionKey{tenant, name, version}); ok {
			return name, version, nil
		}
	}
	def, err := st.GetDefinition(ctx, &store.GetDefinitionParams{TenantID: tenant, Name: name, Version: version})
	if err != nil {
		return "", "", err
	}
	c.cache.Set(versionKey{tenant, def.Name, def.Version}, struct{}{})
	return def.Name, def.Version, nil
}

func (c *versionCache) stop() { c.cache.StopAllGoroutines() }

var _ orchardv1connect.DefinitionServiceHandler = (*definitionService)(nil)

// RegisterDefinition stores the engine's JSON form of the document: what the
// dispatchers parse, and what GetDefinition returns.
func (d *definitionService) RegisterDefinition(ctx context.Context, req *connect.Request[orchardv1.RegisterDefinitionRequest]) (*connect.Response[orchardv1.RegisterDefinitionResponse], error) {
	def, err := engine.ParseDefinition(req.Msg.Document)
	if err != nil {
		return nil, err // *engine.ValidationError: InvalidArgument with field violations
	}
	res, err := d.s.store.RegisterDefinition(ctx, &store.RegisterDefinitionParams{
		TenantID: tenantOf(ctx).TenantID, Name: def.Name, Version: def.Version, Document: def.Document(),
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.RegisterDefinitionResponse{Name: def.Name, Version: def.Version, Created: res.Created}), nil
}

func (d *definitionService) GetDefinition(ctx context.Context, req *connect.Request[orchardv1.GetDefinitionRequest]) (*connect.Response[orchardv1.GetDefinitionResponse], error) {
	def, err := d.s.store.GetDefinition(ctx, &store.GetDefinitionParams{TenantID: tenantOf(ctx).TenantID, Name: req.Msg.Name, Version: req.Msg.Version})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.GetDefinitionResponse{Definition: &orchardv1.Definition{
		Name: def.Name, Version: def.Version, Document: def.Document, CreatedAt: timestamp(def.CreatedAt),
	}}), nil
}

func (d *definitionService) ListDefinitions(ctx context.Context, req *connect.Request[orchardv1.ListDefinitionsRequest]) (*connect.Response[orchardv1.ListDefinitionsResponse], error) {
	tenant := tenantOf(ctx).TenantID
	m := req.Msg
	const procedure = orchardv1connect.DefinitionServiceListDefinitionsProcedure
	query := queryDigest(&orchardv1.ListDefinitionsRequest{Name: m.Name})
	size := pageSize(m.PageSize)
	p := &store.ListDefinitionsParams{TenantID: tenant, Name: m.Name, Limit: size + 1}
	if size+1 > store.MaxListLimit {
		p.Limit = store.MaxListLimit
	}
	if m.PageToken != "" {
		tok, err := d.s.tokens.openPage(procedure, tenant, m.PageToken, query)
		if err != nil {
			return nil, err
		}
		p.AfterName, p.AfterVersion = tok.Key, tok.ID
	}
	defs, err := d.s.store.ListDefinitions(ctx, p)
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.ListDefinitionsResponse{}
	more := len(defs) > size || (len(defs) == p.Limit && p.Limit < size+1)
	if len(defs) > size {
		defs = defs[:size]
	}
	for _, def := range defs {
		resp.Definitions = append(resp.Definitions, &orchardv1.Definition{Name: def.Name, Version: def.Version, CreatedAt: timestamp(def.CreatedAt)})
	}
	if more && len(defs) > 0 {
		last := defs[len(defs)-1]
		if resp.NextPageToken, err = d.s.tokens.sealPage(procedure, tenant, pageToken{Query: query, Key: last.Name, ID: last.Version}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(resp), nil
}
