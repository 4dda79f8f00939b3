package api_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// extremes are the values a numeric field is tried with, for its kind.
func extremes(fd protoreflect.FieldDescriptor) []protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return []protoreflect.Value{protoreflect.ValueOfInt32(0), protoreflect.ValueOfInt32(-1),
			protoreflect.ValueOfInt32(math.MaxInt32), protoreflect.ValueOfInt32(math.MinInt32)}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return []protoreflect.Value{protoreflect.ValueOfInt64(0), protoreflect.ValueOfInt64(-1),
			protoreflect.ValueOfInt64(1 << 31), protoreflect.ValueOfInt64(math.MaxInt64), protoreflect.ValueOfInt64(math.MinInt64)}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return []protoreflect.Value{protoreflect.ValueOfUint32(0), protoreflect.ValueOfUint32(1 << 31), protoreflect.ValueOfUint32(math.MaxUint32)}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return []protoreflect.Value{protoreflect.ValueOfUint64(0), protoreflect.ValueOfUint64(1 << 63), protoreflect.ValueOfUint64(math.MaxUint64)}
	case protoreflect.DoubleKind:
		return []protoreflect.Value{protoreflect.ValueOfFloat64(-1), protoreflect.ValueOfFloat64(math.MaxFloat64), protoreflect.ValueOfFloat64(math.Inf(1))}
	}
	return nil
}

// numericPaths lists the numeric fields of md and of the messages it holds
// (two levels down, where filters and options live), as field paths.
func numericPaths(md protoreflect.MessageDescriptor, depth int) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() {
			continue
		}
		if extremes(fd) != nil {
			out = append(out, []protoreflect.FieldDescriptor{fd})
		}
		if fd.Kind() == protoreflect.MessageKind && depth > 0 && !strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.") {
			for _, sub := range numericPaths(fd.Message(), depth-1) {
				out = append(out, append([]protoreflect.FieldDescriptor{fd}, sub...))
			}
		}
	}
	return out
}

// TestNumericExtremesAreNeverInternal calls every RPC with each numeric
// field (nested ones included) at its extremes: 0, -1, 2^31, the largest
// and smallest values. Each answer is a success or a client error, never
// internal or unknown: a field wider than the column or parameter it
// reaches must be bounded by validation (GetHistory with execution_id 2^31
// answered 500).
func TestNumericExtremesAreNeverInternal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", &store.Limits{RequestsPerSecond: 100_000, Burst: 1_000_000}, testsystem.QuickDef)
	e.dispatch()
	tenantToken := e.token(acme, tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin)
	platformToken := e.token("", "platform-admin")
	c := e.clients(tenantToken)
	_, err := c.client.StartOrchestration(t.Context(), req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: "x", Input: []byte(`1`)}))
	require.NoError(t, err)
	c.waitDone(t, "x")

	calls := 0
	for _, file := range []protoreflect.FileDescriptor{
		orchardv1.File_orchard_v1_client_service_proto, orchardv1.File_orchard_v1_worker_service_proto,
		orchardv1.File_orchard_v1_definition_service_proto, orchardv1.File_orchard_v1_tenant_service_proto,
		orchardv1.File_orchard_v1_admin_service_proto,
	} {
		for i := range file.Services().Len() {
			svc := file.Services().Get(i)
			token := tenantToken
			if svc.Name() == "AdminService" {
				token = platformToken
			}
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				for _, path := range numericPaths(m.Input(), 2) {
					for _, v := range extremes(path[len(path)-1]) {
						msg := dynamicpb.NewMessage(m.Input())
						// Ids and names that exist (or could): the call reaches
						// the store rather than stopping at validation.
						for _, name := range []protoreflect.Name{"instance_id", "name", "tenant_id"} {
							if fd := m.Input().Fields().ByName(name); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
								value := "x"
								if name == "name" {
									value = "quick"
								} else if name == "tenant_id" {
									value = acme
								}
								msg.Set(fd, protoreflect.ValueOfString(value))
							}
						}
						at := msg.ProtoReflect()
						for _, fd := range path[:len(path)-1] {
							at = at.Mutable(fd).Message()
						}
						at.Set(path[len(path)-1], v)
						body, err := protojson.Marshal(msg)
						require.NoError(t, err)
						procedure := fmt.Sprintf("/%s/%s", svc.FullName(), m.Name())
						r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.Server.URL+procedure, strings.NewReader(string(body)))
						require.NoError(t, err)
						r.Header.Set("Content-Type", "application/json")
						r.Header.Set("Authorization", "Bearer "+token)
						r.Header.Set("Connect-Timeout-Ms", "2000") // long polls end early
						resp, err := e.Server.Client().Do(r)
						require.NoError(t, err)
						out, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						require.NoError(t, err)
						calls++
						require.NotEqual(t, http.StatusInternalServerError, resp.StatusCode, "%s %s: %s", procedure, body, out)
						require.NotContains(t, string(out), `"code":"internal"`, "%s %s", procedure, body)
						require.NotContains(t, string(out), `"code":"unknown"`, "%s %s", procedure, body)
					}
				}
			}
		}
	}
	t.Logf("%d calls", calls)
	require.Greater(t, calls, 50)
}
