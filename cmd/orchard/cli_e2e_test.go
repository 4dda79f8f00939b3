package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testlog"
	"github.com/orchardhq/orchard/internal/testsystem"
)

// TestCLITour is the README's tour as a script, from nothing: it builds
// the orchard binary, runs `orchard dev --demo` on a free port with its own
// embedded database, and drives the system through the binary alone —
// register, start and wait, list, count, tree, delete a tree, prune a
// continue-as-new chain, bulk delete — checking each step's output. Ctrl-C
// (SIGINT) then stops everything, the database included.
func TestCLITour(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "orchard")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	// The database may run as another user (postgres, when the tests run
	// as root): its directory must be reachable by it, which t.TempDir's
	// is not.
	dir, err := os.MkdirTemp("", "orchard-cli-tour-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	addr, ops := freeAddr(t), freeAddr(t)

	dev := exec.Command(bin, "dev", "--demo", "--dir", dir, "--listen", addr, "--ops-addr", ops)
	devOut := &testlog.Buffer{}
	devStdout, err := dev.StdoutPipe()
	require.NoError(t, err)
	dev.Stderr = devOut
	require.NoError(t, dev.Start())
	exited := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(devStdout)
		once := sync.Once{}
		for s.Scan() {
			devOut.Write([]byte(s.Text() + "\n"))
			if s.Text() == "ready; Ctrl-C to stop" {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, devStdout)
		exited <- dev.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = dev.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = dev.Process.Kill()
			}
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("orchard dev exited before it was ready: %v\n%s", err, devOut)
	case <-time.After(90 * time.Second):
		t.Fatalf("orchard dev was not ready in time\n%s", devOut)
	}
	base := "http://" + addr
	eventuallyCLI(t, "orchard dev to be ready", func() bool {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	pgPid := postmasterPid(t, dir)

	token := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, "tokens", name))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	client, tenantAdmin, admin := token("client"), token("tenant-admin"), token("admin")
	checkDevConsole(t, devOut.String(), base, client)
	// orchard runs the binary with ORCHARD_ADDR and ORCHARD_TOKEN, as a user
	// would after exporting them.
	orchard := func(tok string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = append(os.Environ(), "ORCHARD_ADDR="+base, "ORCHARD_TOKEN="+tok)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return stdout.String(), stderr.String(), code
	}
	ok := func(tok string, args ...string) string {
		t.Helper()
		stdout, stderr, code := orchard(tok, args...)
		require.Zero(t, code, "orchard %s\n%s", strings.Join(args, " "), stderr)
		return stdout
	}

	// Register: one activity the demo workers serve, and a chain that
	// continues as new three times without timers.
	defs := t.TempDir()
	ship := filepath.Join(defs, "ship.yaml")
	require.NoError(t, os.WriteFile(ship, []byte(`
name: tour-ship
version: "1"
steps:
  - id: ship
    activity: { name: ship, task_queue: warehouse, input: { order: "${ input.order }" } }
  - return: ${ steps.ship.output.tracking }
`), 0o644))
	loop := filepath.Join(defs, "loop.yaml")
	require.NoError(t, os.WriteFile(loop, []byte(testsystem.LoopDef), 0o644))
	require.Equal(t, "registered tour-ship version 1\n", ok(tenantAdmin, "definition", "register", ship))
	require.Equal(t, "registered loop version 1\n", ok(tenantAdmin, "definition", "register", loop))
	require.Contains(t, ok(tenantAdmin, "definition", "list"), "tour-ship")

	// Start and wait.
	got := ok(client, "start", "tour-ship", "--id", "tour-1", "--input", `{"order": "7"}`, "--tag", "tour=yes", "--wait")
	require.Contains(t, got, "Completed")
	require.Contains(t, got, `"TRK-7"`)

	// List and count.
	got = ok(client, "instances", "list", "--tag", "tour=yes")
	require.Contains(t, got, "tour-1")
	require.Equal(t, 2, strings.Count(got, "\n"), "the header and tour-1:\n%s", got)
	var counts struct {
		Total int64 `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(client, "instances", "count", "-o", "json")), &counts))
	require.Equal(t, int64(5), counts.Total, "the demo's four instances and tour-1")

	// The demo's album fan-out: a tree of two; delete it.
	eventuallyCLI(t, "the demo album to complete", func() bool {
		return strings.Contains(ok(client, "instance", "get", "demo-album", "-o", "json"), `"status": "Completed"`)
	})
	got = ok(client, "instance", "tree", "demo-album")
	require.Contains(t, got, "demo-album")
	require.Contains(t, got, "└─ publish-summer")
	require.Contains(t, ok(client, "instance", "delete", "demo-album"), "deleted demo-album: 2 instances")
	_, stderr, code := orchard(client, "instance", "get", "publish-summer")
	require.Equal(t, 3, code, "the child went with its root: %s", stderr)

	// Prune a continue-as-new chain (no retention: all four executions kept).
	got = ok(client, "start", "loop", "--id", "chain", "--input", `{"n": 0}`, "--wait")
	require.Contains(t, got, "Execution:  4 (4 kept")
	require.Equal(t, 5, strings.Count(ok(client, "instance", "executions", "chain"), "\n"), "the header and four executions")
	require.Equal(t, "pruned chain: 3 executions, 6 events\n", ok(client, "instance", "prune", "chain", "--keep-last", "1", "--completed-before", "0s"))
	require.Contains(t, ok(client, "instance", "get", "chain"), "Execution:  4 (1 kept")

	// Bulk delete, with a dry run first.
	stdout, stderr, code := orchard(client, "instances", "delete", "--name-prefix", "tour-", "--dry-run")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "tour-1")
	require.Contains(t, stderr, "dry run: 1 root instances would be deleted")
	stdout, stderr, code = orchard(client, "instances", "delete", "--name-prefix", "tour-", "--yes")
	require.Zero(t, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "deleted 1 instances, 1 executions, "), stdout)
	require.Contains(t, stderr, "so far")

	// The platform's side, and the exit codes a script sees.
	require.Contains(t, ok(admin, "tenant", "list"), "demo")
	_, _, code = orchard(client, "tenant", "list")
	require.Equal(t, 5, code)
	_, _, code = orchard(client, "instances", "list", "--created-after", "soon")
	require.Equal(t, 2, code)

	// Ctrl-C: dev stops cleanly, the database with it.
	require.NoError(t, dev.Process.Signal(os.Interrupt))
	select {
	case err := <-exited:
		stopped = true
		require.NoError(t, err, "orchard dev exits 0 on Ctrl-C\n%s", devOut)
	case <-time.After(30 * time.Second):
		t.Fatalf("orchard dev did not stop\n%s", devOut)
	}
	require.Contains(t, devOut.String(), "stopping")
	if pgPid != 0 {
		require.ErrorIs(t, syscall.Kill(pgPid, 0), syscall.ESRCH, "postgres (pid %d) is gone", pgPid)
		_, err = os.Stat(filepath.Join(dir, "db", "data", "postmaster.pid"))
		require.ErrorIs(t, err, os.ErrNotExist, "postgres shut down cleanly")
	}
}

// postmasterPid is the pid of the embedded PostgreSQL of orchard dev in
// dir; 0 when it runs CockroachDB instead.
func postmasterPid(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "db", "data", "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return 0 // CockroachDB, in memory: it goes with the process
	}
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	return pid
}
