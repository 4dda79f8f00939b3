package main

// Tests of the client verbs against the real system (internal/testsystem):
// the API server on loopback with a dispatcher and a fresh database. Golden files hold their table and JSON output, with
// times normalised; `go test ./cmd/orchard -run TestCLIGolden -update`
// rewrites them.

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testlog"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

var update = flag.Bool("update", false, "rewrite the golden files of the CLI tests")

const cliTenant = "acme"

// cliSystem is the system (internal/testsystem) with a dispatcher, and
// tokens of the tenant acme.
type cliSystem struct {
	url                                  string
	client, tenantAdmin, platform, other string
	// keyFile holds the API's signing key (PEM), for offline minting.
	keyFile string
}

func newCLISystem(t *testing.T) *cliSystem {
	t.Helper()
	privPEM, _, err := tenancy.GenerateKeyPairPEM()
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "signing-key.pem")
	require.NoError(t, os.WriteFile(keyFile, privPEM, 0o600))
	priv, err := tenancy.ParsePrivateKeyPEM(privPEM)
	require.NoError(t, err)
	s := testsystem.New(t, testsystem.Options{Key: priv, Dispatchers: 1, Tenants: []string{cliTenant}})
	return &cliSystem{
		url:         s.URL,
		client:      s.Token(t, cliTenant, tenancy.RoleClient),
		tenantAdmin: s.Token(t, cliTenant, tenancy.RoleTenantAdmin, tenancy.RoleClient),
		platform:    s.Token(t, "", tenancy.RolePlatformAdmin),
		other:       s.Token(t, cliTenant, tenancy.RoleWorker),
		keyFile:     keyFile,
	}
}

// A fresh deployment's first platform-admin token comes from the signing key,
// without the API; the API accepts it.
func TestCLIMintsOfflineFromTheSigningKey(t *testing.T) {
	t.Parallel()
	s := newCLISystem(t)
	r := s.run(t, "", "token", "mint", "--key-file", s.keyFile, "--role", "platform-admin")
	require.Equal(t, 2, r.code, "the issuer and audience are needed")
	require.Contains(t, r.err.Error(), "--jwt-issuer and --jwt-audience")

	admin := strings.TrimSpace(s.ok(t, "", "token", "mint", "--key-file", s.keyFile,
		"--jwt-issuer", testsystem.Issuer, "--jwt-audience", testsystem.Audience, "--role", "platform-admin", "--ttl", "1h"))
	require.Contains(t, s.ok(t, admin, "tenant", "list"), cliTenant)
	client := strings.TrimSpace(s.ok(t, "", "token", "mint", "--key-file", s.keyFile,
		"--jwt-issuer", testsystem.Issuer, "--jwt-audience", testsystem.Audience, "--tenant", cliTenant, "--role", "client"))
	require.Contains(t, s.ok(t, client, "instances", "count"), "Total")
}

// result is what a run of the command printed, and its exit code.
type result struct {
	stdout, stderr string
	err            error
	code           int
}

// exitCode is the code main exits with for err.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var exit exitError
	if errors.As(err, &exit) {
		return int(exit)
	}
	return 1
}

// run runs the orchard command in this process against the system, with a
// token.
func (s *cliSystem) run(t *testing.T, token string, args ...string) result {
	t.Helper()
	return s.runIn(t, token, "", args...)
}

func (s *cliSystem) runIn(t *testing.T, token, stdin string, args ...string) result {
	t.Helper()
	root := rootCommand()
	// Each command makes the process's default logger write to its
	// stderr, and the tests run commands in parallel in this process: a
	// server command of another test (the dispatcher's, say) may log into
	// this buffer while the command runs, or after it ended.
	var out, errOut testlog.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--addr", s.url, "--token", token}, args...))
	err := root.ExecuteContext(t.Context())
	return result{stdout: out.String(), stderr: errOut.String(), err: err, code: exitCode(err)}
}

// ok runs a command that must succeed, and returns its stdout.
func (s *cliSystem) ok(t *testing.T, token string, args ...string) string {
	t.Helper()
	r := s.run(t, token, args...)
	require.NoError(t, r.err, "orchard %s\nstderr: %s", strings.Join(args, " "), r.stderr)
	return r.stdout
}

func (s *cliSystem) register(t *testing.T, docs ...string) {
	t.Helper()
	for _, d := range docs {
		r := s.runIn(t, s.tenantAdmin, d, "definition", "register", "-")
		require.NoError(t, r.err)
		require.Contains(t, r.stdout, "registered ")
	}
}

// eventuallyCLI polls cond until it holds, or fails the test after 20s.
func eventuallyCLI(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 20*time.Second, what, cond)
}

// timesRE matches the times the CLI prints (RFC 3339, UTC).
var timesRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// normalise replaces times with a placeholder as wide as the tables' times,
// so that the columns stay aligned.
func normalise(s string) string { return timesRE.ReplaceAllString(s, "2006-01-02T15:04:05Z") }

func golden(t *testing.T, name, got string) {
	t.Helper()
	got = normalise(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run go test ./cmd/orchard -run TestCLIGolden -update")
	require.Equal(t, string(want), got, "output differs from %s (-update rewrites it)", path)
}

func TestCLIGolden(t *testing.T) {
	t.Parallel()
	s := newCLISystem(t)
	s.register(t, testsystem.GreetDef, testsystem.WaiterDef, testsystem.ParentDef)

	require.Equal(t, "greet-1\n", s.ok(t, s.client, "start", "greet", "--id", "greet-1", "--input", `{"name":"world"}`, "--tag", "team=cli"))
	golden(t, "start_wait", s.ok(t, s.client, "start", "greet", "--id", "greet-2", "--input", `{"name":"orchard"}`, "--retention", "30d", "--wait"))
	s.ok(t, s.client, "start", "parent", "--id", "t")
	eventuallyCLI(t, "the child to start", func() bool {
		return strings.Contains(s.ok(t, s.client, "instance", "tree", "t"), "t-child")
	})
	eventuallyCLI(t, "greet-1 to complete", func() bool {
		return strings.Contains(s.ok(t, s.client, "instance", "get", "greet-1"), "Completed")
	})

	for _, c := range []struct {
		name string
		args []string
	}{
		{"instances_list", []string{"instances", "list", "--id-prefix", "greet-"}},
		{"instances_list_tag", []string{"instances", "list", "--tag", "team=cli", "--status", "completed"}},
		{"instances_count", []string{"instances", "count"}},
		{"instance_get", []string{"instance", "get", "greet-1"}},
		{"instance_history", []string{"instance", "history", "greet-1"}},
		{"instance_tree", []string{"instance", "tree", "t"}},
		{"definition_list", []string{"definition", "list"}},
	} {
		golden(t, c.name, s.ok(t, s.tenantAdmin, c.args...))
		golden(t, c.name+"_json", s.ok(t, s.tenantAdmin, append(c.args, "--output", "json")...))
	}

	// A listing cut at --limit says so on stderr.
	r := s.run(t, s.client, "instances", "list", "--limit", "1", "--roots")
	require.NoError(t, r.err)
	require.Equal(t, 2, strings.Count(r.stdout, "\n"), "the header and one instance")
	require.Contains(t, r.stderr, "more match")

	golden(t, "retention_empty", s.ok(t, s.tenantAdmin, "tenant", "retention", "get"))
	s.ok(t, s.tenantAdmin, "tenant", "retention", "set", "--completed", "30d", "--failed", "2160h", "--keep-last", "5", "--auto-prune")
	s.ok(t, s.tenantAdmin, "tenant", "retention", "set", "--name", "greet", "--clear", "--cancelled", "1h")
	golden(t, "retention_get", s.ok(t, s.tenantAdmin, "tenant", "retention", "get"))
	golden(t, "retention_get_json", s.ok(t, s.tenantAdmin, "tenant", "retention", "get", "-o", "json"))

	// Delete the tree (running: --force), then bulk-delete what ended.
	r = s.run(t, s.client, "instance", "delete", "t")
	require.Equal(t, 4, r.code, "a running tree needs --force")
	require.Contains(t, r.err.Error(), "failed precondition")
	require.Contains(t, s.ok(t, s.client, "instance", "delete", "t", "--force"), "deleted t: 2 instances, 2 executions")

	// Machine formats beside json: a JSON object a line, and YAML.
	lines := strings.Split(strings.TrimSpace(s.ok(t, s.client, "instances", "list", "--id-prefix", "greet-", "-o", "jsonl")), "\n")
	require.Len(t, lines, 2)
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, `{"instanceId":"greet-`), line)
	}
	require.Contains(t, s.ok(t, s.client, "instances", "list", "--id-prefix", "greet-", "-o", "yaml"), "- instanceId: greet-")
	require.Contains(t, s.ok(t, s.client, "instances", "count", "-o", "yaml"), "total: 2")

	r = s.run(t, s.client, "instances", "delete", "--id-prefix", "greet-", "--dry-run")
	require.NoError(t, r.err)
	require.Contains(t, r.stderr, "dry run: 2 root instances would be deleted")
	require.Contains(t, r.stdout, "greet-1")
	require.Contains(t, s.ok(t, s.client, "instances", "count", "-o", "json"), `"total": 2`, "a dry run deletes nothing")
	r = s.run(t, s.client, "instances", "delete", "--id-prefix", "greet-")
	require.Equal(t, 2, r.code, "not on a terminal, a bulk delete needs --yes")
	require.Contains(t, r.err.Error(), "would delete 2 ended root instances with their trees; not on a terminal: add --yes")
	require.Contains(t, s.ok(t, s.client, "instances", "count", "-o", "json"), `"total": 2`, "an unconfirmed delete deletes nothing")
	r = s.run(t, s.client, "instances", "delete", "--id-prefix", "greet-", "--completed-before", "now", "--batch", "1", "-o", "json", "--yes")
	require.NoError(t, r.err)
	golden(t, "instances_delete_json", r.stdout)
	require.Contains(t, r.stderr, "deleted 1 instances", "progress after each batch")
	require.Contains(t, r.stderr, "deleted 2 instances")
	require.Contains(t, s.ok(t, s.client, "instances", "count", "-o", "json"), `"total": 0`)
}

func TestCLIPruneAndEvents(t *testing.T) {
	t.Parallel()
	s := newCLISystem(t)
	s.register(t, testsystem.LoopDef, testsystem.WaiterDef)

	out := s.ok(t, s.client, "start", "loop", "--id", "chain", "--input", `{"n": 0}`, "--wait", "-o", "json")
	require.Contains(t, out, `"currentExecutionId": 4`)
	golden(t, "instance_executions", s.ok(t, s.client, "instance", "executions", "chain"))
	r := s.run(t, s.client, "instance", "prune", "chain")
	require.Equal(t, 2, r.code, "prune needs a criterion")
	require.Equal(t, "pruned chain: 2 executions, 4 events\n", s.ok(t, s.client, "instance", "prune", "chain", "--keep-last", "2"))
	require.Contains(t, s.ok(t, s.client, "instance", "prune", "chain", "--keep-last", "1", "--completed-before", "2999-01-01T00:00:00Z", "-o", "json"),
		`"executions": 1`)
	require.Contains(t, s.ok(t, s.client, "instance", "history", "chain", "--execution", "4"), "execution_started")
	r = s.run(t, s.client, "instance", "history", "chain", "--execution", "1")
	require.Equal(t, 3, r.code, "a pruned execution is gone")

	// By filter: "chain" has one execution left (not examined), "chain-4"
	// has four (two pruned), "chain-2" two (both kept).
	s.ok(t, s.client, "start", "loop", "--id", "chain-4", "--input", `{"n": 0}`, "--wait")
	s.ok(t, s.client, "start", "loop", "--id", "chain-2", "--input", `{"n": 2}`, "--wait")
	require.Equal(t, 2, s.run(t, s.client, "instances", "prune", "--id-prefix", "chain").code, "prune needs a criterion")
	require.Equal(t, 2, s.run(t, s.client, "instances", "prune", "--keep-last", "2").code, "prune needs a filter or --all")
	require.Equal(t, "2 instances examined, 1 pruned: 2 executions, 4 events\n",
		s.ok(t, s.client, "instances", "prune", "--id-prefix", "chain", "--keep-last", "2"))
	require.Contains(t, s.ok(t, s.client, "instances", "prune", "--all", "--keep-last", "1", "-o", "json"), `"instancesPruned": 2`)

	s.ok(t, s.client, "start", "waiter", "--id", "w")
	require.Equal(t, "raised go on w\n", s.ok(t, s.client, "event", "raise", "w", "go", "--payload", `{"ok": true}`))
	eventuallyCLI(t, "w to complete", func() bool {
		return strings.Contains(s.ok(t, s.client, "instance", "get", "w", "-o", "json"), `"status": "Completed"`)
	})
	require.Contains(t, s.ok(t, s.client, "instance", "get", "w"), `{"ok":true}`)

	s.ok(t, s.client, "start", "waiter", "--id", "c")
	require.Equal(t, "cancel requested for c\n", s.ok(t, s.client, "cancel", "c", "--reason", "not needed"))
	eventuallyCLI(t, "c to be cancelled", func() bool {
		return strings.Contains(s.ok(t, s.client, "instance", "get", "c"), "not needed")
	})

	r = s.run(t, s.client, "start", "loop", "--id", "bad", "--input", `{"n": "x"}`, "--wait")
	require.Equal(t, 1, r.code, "--wait exits 1 when the instance fails")
	require.Contains(t, r.stdout, "Failed")
	require.ErrorContains(t, r.err, "instance bad ended Failed")
}

func TestCLITenantsAndTokens(t *testing.T) {
	t.Parallel()
	s := newCLISystem(t)
	golden(t, "tenant_create", s.ok(t, s.platform, "tenant", "create", "globex"))
	r := s.run(t, s.platform, "tenant", "create", "globex")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err.Error(), "already exists")
	golden(t, "tenant_list", s.ok(t, s.platform, "tenant", "list"))
	golden(t, "tenant_suspend_json", s.ok(t, s.platform, "tenant", "suspend", "globex", "-o", "json"))
	require.Contains(t, s.ok(t, s.platform, "tenant", "get", "globex"), "Suspended")
	require.Contains(t, s.ok(t, s.platform, "tenant", "resume", "globex"), "Active")
	require.Equal(t, 3, s.run(t, s.platform, "tenant", "suspend", "nobody").code)

	r = s.run(t, s.platform, "token", "mint", "--tenant", "globex", "--role", "client,tenant-admin", "--ttl", "30d")
	require.NoError(t, r.err)
	token := strings.TrimSpace(r.stdout)
	require.Equal(t, 2, strings.Count(token, "."), "the token alone, a JWT")
	require.Contains(t, r.stderr, "token for tenant globex")
	require.Contains(t, s.ok(t, token, "instances", "count"), "Total")
	require.Equal(t, 2, s.run(t, s.platform, "token", "mint", "--tenant", "globex", "--role", "root").code)
	require.Equal(t, 2, s.run(t, s.platform, "token", "mint", "--tenant", "globex", "--role", "client", "--ttl", "1s").code,
		"the API rejects a TTL under a minute")
	require.Equal(t, 5, s.run(t, s.client, "token", "mint", "--tenant", "globex", "--role", "client").code)
}

// TestCLIExitCodes: the documented exit codes, and messages that say what
// went wrong.
func TestCLIExitCodes(t *testing.T) {
	t.Parallel()
	s := newCLISystem(t)
	s.register(t, testsystem.WaiterDef, testsystem.ParentDef)
	s.ok(t, s.client, "start", "parent", "--id", "p")
	eventuallyCLI(t, "the child to start", func() bool {
		return s.run(t, s.client, "instance", "get", "p-child").code == 0
	})
	for _, c := range []struct {
		name    string
		token   string
		args    []string
		code    int
		message string
	}{
		{"ok", s.client, []string{"instances", "count"}, 0, ""},
		{"unknown flag", s.client, []string{"instances", "list", "--bogus"}, 2, "unknown flag: --bogus"},
		{"missing argument", s.client, []string{"instance", "get"}, 2, "accepts 1 arg(s), received 0"},
		{"unknown verb", s.client, []string{"instance", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{"bad time", s.client, []string{"instances", "list", "--created-after", "yesterday"}, 2, "invalid time"},
		{"bad status", s.client, []string{"instances", "list", "--status", "sleeping"}, 2, "unknown status"},
		{"bad output", s.client, []string{"instances", "list", "-o", "xml"}, 2, "--output must be table, json, jsonl or yaml"},
		{"bad input", s.client, []string{"start", "waiter", "--input", "{"}, 2, "--input is not valid JSON"},
		{"no filter", s.client, []string{"instances", "delete"}, 2, "at least one filter"},
		{"missing file", s.tenantAdmin, []string{"definition", "register", "/no/such/file.yaml"}, 2, "no such file"},
		{"invalid id (API)", s.client, []string{"start", "waiter", "--id", "not an id"}, 2, "instance_id"},
		{"invalid definition (API)", s.tenantAdmin, []string{"definition", "register", "testdata/invalid_definition.yaml"}, 2, "document.steps"},
		{"not found", s.client, []string{"instance", "get", "nope"}, 3, `not found: instance "nope"`},
		{"definition not found", s.client, []string{"start", "nope"}, 3, "not found"},
		{"running without force", s.client, []string{"instance", "delete", "p"}, 4, "failed precondition"},
		{"sub-orchestration alone", s.client, []string{"instance", "delete", "p-child", "--force"}, 4, "failed precondition"},
		{"bad token", "not-a-jwt", []string{"instances", "count"}, 5, "unauthenticated"},
		{"wrong role", s.other, []string{"instances", "count"}, 5, "permission denied"},
		{"platform verb with a tenant token", s.client, []string{"tenant", "list"}, 5, "permission denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := s.run(t, c.token, c.args...)
			require.Equal(t, c.code, r.code, "orchard %s: %v", strings.Join(c.args, " "), r.err)
			if c.message != "" {
				require.ErrorContains(t, r.err, c.message)
			}
		})
	}

	// Nothing listens: unavailable, once the retries are spent.
	ln := freeAddr(t)
	root := rootCommand()
	root.SetOut(io.Discard)
	root.SetArgs([]string{"--addr", ln, "--token", s.client, "instances", "count"})
	err := root.ExecuteContext(t.Context())
	require.Equal(t, 6, exitCode(err), "%v", err)
	require.ErrorContains(t, err, "unavailable")
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 31, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2024-05-01T10:00:00Z", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)},
		{"2024-05-01T10:00:00.5+02:00", time.Date(2024, 5, 1, 8, 0, 0, 5e8, time.UTC)},
		{"2024-05-01", time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)},
		{"720h", now.Add(-720 * time.Hour)},
		{"30d", now.Add(-30 * 24 * time.Hour)},
		{"1d12h", now.Add(-36 * time.Hour)},
		{"90m", now.Add(-90 * time.Minute)},
		{"0s", now},
	} {
		got, err := parseTime(c.in, now)
		require.NoError(t, err, c.in)
		require.True(t, c.want.Equal(got), "%s: got %v, want %v", c.in, got, c.want)
	}
	for _, bad := range []string{"", "yesterday", "-5h", "30", "d", "2024-13-01", "5x"} {
		_, err := parseTime(bad, now)
		require.Error(t, err, bad)
	}
	for d, want := range map[time.Duration]string{
		720 * time.Hour: "30d", 90 * time.Minute: "1h30m", time.Hour: "1h", 90 * time.Second: "1m30s", 0: "0s", 25 * time.Hour: "25h",
	} {
		require.Equal(t, want, humanDuration(d))
	}
}
