// Package failover measures how long the instances of a dispatcher that
// dies wait for another: real `orchard dispatcher` processes share one
// database, and the one holding instances is stopped (SIGSTOP) and killed
// (SIGKILL), once per benchmark iteration. Run it with
//
//	go test ./loadtest/failover -run '^$' -bench Failover -benchtime 50x -timeout 30m
//
// (ORCHARD_DISPATCHER_LEASE, passed on to the dispatchers, sets their lease).
// It reports, over the kills that left instances held, the time from the
// holder's stop to the last of its held instances' next turn (p50, p99,
// max), and checks that the kills failed no instance.
package failover

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/services/dispatcher"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const (
	tenant = "failover"
	chains = 16
	// tick: each chain runs a turn, waits 200ms, continues as new, forever.
	tick = `
name: tick
version: "1"
steps:
  - timer: 200ms
  - continue_as_new:
      input: ${ input + 1 }
`
)

// held is a lease a snapshot found live.
type held struct {
	token string
	until int64
}

func BenchmarkFailover(b *testing.B) {
	bin := buildOrchard(b)
	pool := testdb.Pool(b, 8)
	url := pool.Config().ConnString()
	ctx := b.Context()
	st := crdb.New(pool, crdb.Options{})
	require.NoError(b, st.CreateTenant(ctx, &store.CreateTenantParams{TenantID: tenant}))
	def, err := engine.ParseDefinition([]byte(tick))
	require.NoError(b, err)
	_, err = st.RegisterDefinition(ctx, &store.RegisterDefinitionParams{TenantID: tenant, Name: def.Name, Version: def.Version, Document: def.Document()})
	require.NoError(b, err)
	for i := range chains {
		kind, payload, err := engine.EncodeMessage(engine.StartMessage{Input: json.RawMessage(`0`)})
		require.NoError(b, err)
		_, err = st.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, InstanceID: fmt.Sprintf("chain-%02d", i),
			Name: def.Name, Version: def.Version, Input: []byte(`0`), Start: store.Message{Kind: kind, Payload: payload}})
		require.NoError(b, err)
	}

	logs, err := os.Create(filepath.Join(b.TempDir(), "dispatchers.log"))
	require.NoError(b, err)
	// start starts a dispatcher and waits until its loops run (on a loaded
	// machine, a process can take seconds to get there).
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"dispatcher", "--database-url", url, "--ops-addr", ""}, args...)...)
		out, err := cmd.StderrPipe()
		require.NoError(b, err)
		cmd.Stdout = logs
		require.NoError(b, cmd.Start())
		started := make(chan struct{})
		go func() {
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				if strings.Contains(lines.Text(), "dispatcher started") {
					close(started)
				}
				_, _ = fmt.Fprintln(logs, lines.Text())
			}
		}()
		select {
		case <-started:
		case <-time.After(time.Minute):
			require.FailNow(b, "a dispatcher did not start within a minute")
		}
		return cmd
	}
	// The survivor runs one loop, so that the victim (four) holds most of the work.
	survivor := start("--loops", "1")
	b.Cleanup(func() { _ = survivor.Process.Kill(); _ = survivor.Wait() })
	victim := start()
	b.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })

	var perKill, perInstance []time.Duration
	rounds := 0
	b.ResetTimer()
	for len(perKill) < b.N {
		rounds++
		require.Less(b, rounds, 40*b.N+20, "the victim held nothing at most stops")
		// Let the workload run, then stop the victim wherever it is.
		time.Sleep(100*time.Millisecond + rand.N(500*time.Millisecond))
		require.NoError(b, victim.Process.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		leases := snapshot(b, pool, stopped)
		require.NoError(b, victim.Process.Kill())
		_ = victim.Wait()

		// A lease of the snapshot was the dead one's if another claim took
		// it over (a new token) once it had run out. Released under its own
		// token, or taken again before its end (released, and claimed
		// again since), it was the survivor's, or an ack of the victim's
		// already sent.
		var waited []time.Duration
		deadline := stopped.Add(2*time.Minute + 2*leaseOf(b))
		for len(leases) > 0 {
			require.True(b, time.Now().Before(deadline), "instances still held: %v", leases)
			now := snapshotAll(b, pool, slices.Collect(maps.Keys(leases)))
			for id, was := range leases {
				is := now[id]
				switch {
				case is.token == was.token && is.until == 0,
					is.token != was.token && time.Now().UnixMilli() < was.until:
					delete(leases, id)
				case is.token != was.token && is.until == 0:
					waited = append(waited, time.Since(stopped))
					delete(leases, id)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		victim = start()
		if len(waited) == 0 {
			continue
		}
		perInstance = append(perInstance, waited...)
		perKill = append(perKill, slices.Max(waited))
		b.Logf("kill %d (stop %d): %d held, the last taken over %s after the stop", len(perKill), rounds, len(waited), slices.Max(waited))
	}
	b.StopTimer()

	var failed int
	require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE tenant_id = $1 AND status <> 'Running'`, tenant).Scan(&failed))
	require.Zero(b, failed, "a kill counted against an instance")
	slices.Sort(perKill)
	slices.Sort(perInstance)
	b.ReportMetric(ms(quantile(perKill, 0.50)), "p50-ms")
	b.ReportMetric(ms(quantile(perKill, 0.99)), "p99-ms")
	b.ReportMetric(ms(perKill[len(perKill)-1]), "max-ms")
	b.ReportMetric(float64(len(perInstance))/float64(len(perKill)), "held/kill")
	b.Logf("lease %s; %d kills of a holder (%d stops); %d held instances; per kill p50 %s p99 %s max %s; per instance p50 %s p99 %s",
		leaseOf(b), len(perKill), rounds, len(perInstance), quantile(perKill, 0.5), quantile(perKill, 0.99), perKill[len(perKill)-1],
		quantile(perInstance, 0.5), quantile(perInstance, 0.99))
}

// snapshot reads the live leases of the tenant at t.
func snapshot(b *testing.B, pool *pgxpool.Pool, t time.Time) map[string]held {
	rows, err := pool.Query(b.Context(), `SELECT instance_id, lease_token::TEXT, leased_until FROM instance_leases
		WHERE tenant_id = $1 AND leased_until > $2`, tenant, t.UnixMilli())
	require.NoError(b, err)
	out := map[string]held{}
	for rows.Next() {
		var id string
		var h held
		require.NoError(b, rows.Scan(&id, &h.token, &h.until))
		out[id] = h
	}
	require.NoError(b, rows.Err())
	return out
}

// snapshotAll reads the leases of ids.
func snapshotAll(b *testing.B, pool *pgxpool.Pool, ids []string) map[string]held {
	rows, err := pool.Query(b.Context(), `SELECT instance_id, lease_token::TEXT, leased_until FROM instance_leases
		WHERE tenant_id = $1 AND instance_id = ANY($2)`, tenant, ids)
	require.NoError(b, err)
	out := map[string]held{}
	for rows.Next() {
		var id string
		var h held
		require.NoError(b, rows.Scan(&id, &h.token, &h.until))
		out[id] = h
	}
	require.NoError(b, rows.Err())
	return out
}

// leaseOf is the dispatchers' lease as the environment sets it (for the
// report and the wait's bound).
func leaseOf(b *testing.B) time.Duration {
	if v := os.Getenv("ORCHARD_DISPATCHER_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(b, err)
		return d
	}
	return dispatcher.DefaultLeaseDuration
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// buildOrchard builds the orchard binary of this module.
func buildOrchard(b *testing.B) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(b, err)
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(b.TempDir(), "orchard")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/orchard")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	require.NoError(b, cmd.Run())
	return bin
}
