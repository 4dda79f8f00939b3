package api_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// FuzzConnectJSON posts arbitrary JSON bodies (Connect protocol) to a few
// RPCs: the answer is always a well-formed Connect response, never a 500 or
// a broken connection. `go test` runs the seeds; `go test -fuzz
// FuzzConnectJSON` explores.
func FuzzConnectJSON(f *testing.F) {
	procedures := []string{
		"/orchard.v1.ClientService/StartOrchestration",
		"/orchard.v1.ClientService/ListInstances",
		"/orchard.v1.ClientService/GetHistory",
		"/orchard.v1.ClientService/DeleteInstances",
		"/orchard.v1.DefinitionService/RegisterDefinition",
		"/orchard.v1.WorkerService/CompleteActivityTask",
	}
	seeds := []string{
		`{}`, `{"name":"quick","input":"eyJ4IjoxfQ=="}`, `{"name":"quick","instanceId":"a b"}`,
		`{"filter":{"statuses":["INSTANCE_STATUS_RUNNING"],"createdAfter":"2026-01-01T00:00:00Z"},"pageSize":5}`,
		`{"pageToken":"x.y"}`, `{"instanceId":"i","pageSize":-1}`, `{"completedBefore":"2999-01-01T00:00:00Z","limit":1}`,
		`{"document":"bmFtZTogeA=="}`, `{"taskToken":"a.b","result":"e30="}`, `not json`, `{"name":1}`, `[]`, `null`,
		`{"filter":{"tags":{"":"x"}}}`, `{"name":"quick","retention":"-1s"}`, `{"unknownField":true}`,
	}
	for i := range procedures {
		for _, s := range seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	e := newEnv(f)
	acme := e.tenant("acme", &store.Limits{RequestsPerSecond: 100_000, Burst: 1_000_000}, testsystem.QuickDef)
	token := e.token(acme, tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin)
	hc := e.Server.Client()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.Server.URL+procedures[int(which)%len(procedures)], bytes.NewReader(body))
		require.NoError(t, err)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+token)
		res, err := hc.Do(r)
		require.NoError(t, err)
		out, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.NotEqual(t, http.StatusInternalServerError, res.StatusCode, "body %q answered %s", body, out)
		require.Less(t, res.StatusCode, 500, "body %q answered %d %s", body, res.StatusCode, out)
	})
}
