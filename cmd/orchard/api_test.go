package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// `orchard api --dispatcher-loops` runs orchestrations with no dispatcher
// process beside it: an orchestration started through the API, its
// activity run by an SDK worker, completes, and the API's /metrics counts
// the turns; bad values are refused; the context's end drains both.
func TestAPICommandWithDispatcherLoops(t *testing.T) {
	t.Parallel()
	_, url := oneActivityTenant(t, "colo")
	ctx := t.Context()

	args := apiArgs(t, url)
	token := clientToken(t, "colo")
	withLoops := func(loops string) []string { return slices.Concat(args, []string{"--dispatcher-loops", loops}) }
	refused := rootCommand()
	refused.SetArgs(append(withLoops("-1"), "--ops-addr", ""))
	refused.SetOut(io.Discard)
	refused.SetErr(io.Discard)
	require.ErrorContains(t, refused.ExecuteContext(ctx), "--dispatcher-loops -1")
	refused = rootCommand()
	refused.SetArgs(append(withLoops("1"), "--ops-addr", "", "--calls-in-flight", "0"))
	refused.SetOut(io.Discard)
	refused.SetErr(io.Discard)
	require.ErrorContains(t, refused.ExecuteContext(ctx), "--calls-in-flight 0")

	ops := freeAddr(t)
	a := withLoops("1")
	addr := a[4]
	cmdCtx, stop := context.WithCancel(ctx)
	done := runCommand(cmdCtx, append(a, "--ops-addr", ops)...)

	client := sdk.NewClient("http://"+addr, sdk.WithToken(token))
	w := sdk.NewWorker(client, "q")
	sdk.Register(w, "echo", func(_ context.Context, s string) (string, error) { return s, nil })
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { _ = w.Run(wctx) }()
	eventuallyCLI(t, "the API to serve", func() bool {
		_, err := client.Start(ctx, "one", "hello", sdk.WithInstanceID("i"))
		return err == nil
	})
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	in, err := client.Wait(wait, "i")
	require.NoError(t, err)
	require.Equal(t, sdk.StatusCompleted, in.Status, in.Error)
	var out string
	require.NoError(t, in.DecodeOutput(&out))
	require.Equal(t, "hello", out)
	eventuallyCLI(t, "the turns in the API's /metrics", func() bool {
		body := metrics(t, ops)
		return strings.Contains(body, `orchard_dispatcher_turns_total{`) && strings.Contains(body, `outcome="Completed"`)
	})

	stopWorker()
	stop()
	stopped(t, done, "the API")
}

// An API and a dispatcher in processes of their own, with --hints members
// (the hints that work on CockroachDB): the API's starts and task results
// reach the dispatcher, the dispatcher's tasks and ends reach the API, as
// their /metrics count; misconfigurations are refused.
func TestAPIAndDispatcherHintEachOther(t *testing.T) {
	t.Parallel()
	_, url := oneActivityTenant(t, "mem")
	ctx := t.Context()
	members := []string{"--hints", "members", "--hints-secret", "a secret of the test deployment"}
	for _, bad := range []struct {
		args []string
		err  string
	}{
		{[]string{"--hints", "members", "--ops-addr", freeAddr(t)}, "--hints-secret"},
		{slices.Concat(members, []string{"--ops-addr", ""}), "--ops-addr"},
		{[]string{"--hints", "loud"}, `"loud"`},
	} {
		refused := rootCommand()
		refused.SetArgs(append([]string{"dispatcher", "--database-url", url}, bad.args...))
		refused.SetOut(io.Discard)
		refused.SetErr(io.Discard)
		require.ErrorContains(t, refused.ExecuteContext(ctx), bad.err)
	}

	cmdCtx, stop := context.WithCancel(ctx)
	dispOps, apiOps := freeAddr(t), freeAddr(t)
	disp := runCommand(cmdCtx, append([]string{"dispatcher", "--database-url", url, "--ops-addr", dispOps, "--loops", "2"}, members...)...)
	a := slices.Concat(apiArgs(t, url), []string{"--ops-addr", apiOps}, members)
	api := runCommand(cmdCtx, a...)

	client := sdk.NewClient("http://"+a[4], sdk.WithToken(clientToken(t, "mem")))
	w := sdk.NewWorker(client, "q")
	sdk.Register(w, "echo", func(_ context.Context, s string) (string, error) { return s, nil })
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { _ = w.Run(wctx) }()
	// The processes learn of each other at their heartbeats; until then an
	// orchestration completes by the polls. Each takes a second at most.
	n := 0
	eventuallyCLI(t, "hints both ways", func() bool {
		n++
		id := fmt.Sprintf("i%d", n)
		if _, err := client.Start(ctx, "one", "hello", sdk.WithInstanceID(id)); err != nil {
			return false // not serving yet
		}
		wait, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		in, err := client.Wait(wait, id)
		require.NoError(t, err)
		require.Equal(t, sdk.StatusCompleted, in.Status, in.Error)
		return received(t, dispOps) >= 2 && received(t, apiOps) >= 2
	})

	stopWorker()
	stop()
	stopped(t, api, "the API")
	stopped(t, disp, "the dispatcher")
}

// apiArgs are the arguments of an `orchard api` on the database at url,
// listening on a free port (the fifth argument), with the test's keys.
func apiArgs(t *testing.T, url string) []string {
	_, pubPEM := testKeys()
	pubFile := filepath.Join(t.TempDir(), "public.pem")
	require.NoError(t, os.WriteFile(pubFile, pubPEM, 0o600))
	return []string{"api", "--database-url", url, "--listen", freeAddr(t), "--jwt-public-key-file", pubFile,
		"--jwt-issuer", "iss", "--jwt-audience", "aud", "--secret", "s"}
}

// testKeys is the key pair of the tests' tokens (private, public; PEM).
var testKeys = sync.OnceValues(func() ([]byte, []byte) {
	priv, pub, err := tenancy.GenerateKeyPairPEM()
	if err != nil {
		panic(err)
	}
	return priv, pub
})

// clientToken is a token of the client and worker roles for tenant.
func clientToken(t *testing.T, tenant string) string {
	privPEM, _ := testKeys()
	priv, err := tenancy.ParsePrivateKeyPEM(privPEM)
	require.NoError(t, err)
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: priv, Issuer: "iss", Audience: "aud"})
	require.NoError(t, err)
	token, err := minter.Mint(tenancy.Claims{Tenant: tenant, Subject: "test", Roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker}}, time.Hour)
	require.NoError(t, err)
	return token
}

// runCommand runs the command line args until ctx ends; the channel has its error.
func runCommand(ctx context.Context, args ...string) <-chan error {
	done := make(chan error, 1)
	go func() {
		root := rootCommand()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		done <- root.ExecuteContext(ctx)
	}()
	return done
}

// stopped waits for a command runCommand ran to end without an error.
func stopped(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop", what)
	}
}

// metrics is the /metrics page of the ops endpoint at addr.
func metrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

var receivedRE = regexp.MustCompile(`(?m)^orchard_hints_total\{[^}]*outcome="received"[^}]*\} (\d+)$`)

// received is how many hints the process whose ops endpoint is at addr
// took from the others.
func received(t *testing.T, addr string) int {
	m := receivedRE.FindStringSubmatch(metrics(t, addr))
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// The address a member advertises: the one given, the ops address when it
// names a host, or the address it reaches the database from.
func TestHintsAddress(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 1)
	for _, c := range []struct{ address, ops, want string }{
		{"pod.example:9465", ":9465", "pod.example:9465"},
		{"", "10.0.0.7:9464", "10.0.0.7:9464"},
	} {
		got, err := hintsAddress(t.Context(), pool, c.address, c.ops)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%+v", c)
	}
	for _, ops := range []string{":9465", "0.0.0.0:9465"} {
		got, err := hintsAddress(t.Context(), pool, "", ops)
		require.NoError(t, err)
		host, port, err := net.SplitHostPort(got)
		require.NoError(t, err)
		ip := net.ParseIP(host)
		require.True(t, ip != nil && !ip.IsUnspecified(), "%s: the address of a connection to the database", got)
		require.Equal(t, "9465", port)
	}
	_, err := hintsAddress(t.Context(), pool, "", "no port")
	require.ErrorContains(t, err, "--ops-addr")
}
