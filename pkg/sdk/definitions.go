package sdk

import (
	"context"
	"iter"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// RegisterDefinition registers a definition document (YAML or JSON, at most
// 256 KiB) under the name and version it declares. Registering the same
// document again does nothing (Created is false); another document under a
// registered name and version is ErrAlreadyExists. An invalid document is
// ErrInvalidArgument, with one FieldViolation per problem ("document." and
// the path within the document). It needs the tenant-admin role.
func (c *Client) RegisterDefinition(ctx context.Context, document []byte) (*Registration, error) {
	resp, err := call(ctx, c, idempotent, c.definitions.RegisterDefinition, &orchardv1.RegisterDefinitionRequest{Document: document})
	if err != nil {
		return nil, err
	}
	return &Registration{Name: resp.GetName(), Version: resp.GetVersion(), Created: resp.GetCreated()}, nil
}

// GetDefinition reads a definition, document included: version, or the
// latest when version is empty.
func (c *Client) GetDefinition(ctx context.Context, name, version string) (*Definition, error) {
	resp, err := call(ctx, c, idempotent, c.definitions.GetDefinition, &orchardv1.GetDefinitionRequest{Name: name, Version: version})
	if err != nil {
		return nil, err
	}
	return definitionFromProto(resp.GetDefinition()), nil
}

// ListDefinitions iterates over the registered definitions (without their
// documents) in the API's order: every name's when name is empty, else the
// versions of name. It pages like List.
func (c *Client) ListDefinitions(ctx context.Context, name string, opts ...ListOption) iter.Seq2[*Definition, error] {
	return func(yield func(*Definition, error) bool) {
		l, err := listOpts(opts)
		if err != nil {
			yield(nil, err)
			return
		}
		req := &orchardv1.ListDefinitionsRequest{Name: name, PageSize: int32(l.pageSize)}
		for {
			resp, err := call(ctx, c, idempotent, c.definitions.ListDefinitions, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, d := range resp.GetDefinitions() {
				if !yield(definitionFromProto(d), nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req = &orchardv1.ListDefinitionsRequest{Name: name, PageSize: int32(l.pageSize), PageToken: resp.GetNextPageToken()}
		}
	}
}
