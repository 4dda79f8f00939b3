package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

	privPEM, pubPEM, err := tenancy.GenerateKeyPairPEM()
	require.NoError(t, err)
	pubFile := filepath.Join(t.TempDir(), "public.pem")
	require.NoError(t, os.WriteFile(pubFile, pubPEM, 0o600))
	priv, err := tenancy.ParsePrivateKeyPEM(privPEM)
	require.NoError(t, err)
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: priv, Issuer: "iss", Audience: "aud"})
	require.NoError(t, err)
	token, err := minter.Mint(tenancy.Claims{Tenant: "colo", Subject: "test", Roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker}}, time.Hour)
	require.NoError(t, err)

	args := func(loops string) []string {
		return []string{"api", "--database-url", url, "--listen", freeAddr(t), "--jwt-public-key-file", pubFile,
			"--jwt-issuer", "iss", "--jwt-audience", "aud", "--secret", "s", "--dispatcher-loops", loops}
	}
	refused := rootCommand()
	refused.SetArgs(append(args("-1"), "--ops-addr", ""))
	refused.SetOut(io.Discard)
	refused.SetErr(io.Discard)
	require.ErrorContains(t, refused.ExecuteContext(ctx), "--dispatcher-loops -1")
	refused = rootCommand()
	refused.SetArgs(append(args("1"), "--ops-addr", "", "--calls-in-flight", "0"))
	refused.SetOut(io.Discard)
	refused.SetErr(io.Discard)
	require.ErrorContains(t, refused.ExecuteContext(ctx), "--calls-in-flight 0")

	ops := freeAddr(t)
	a := args("1")
	addr := a[4]
	cmdCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		root := rootCommand()
		root.SetArgs(append(a, "--ops-addr", ops))
		root.SetOut(io.Discard)
		done <- root.ExecuteContext(cmdCtx)
	}()

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
		resp, err := http.Get("http://" + ops + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `orchard_dispatcher_turns_total{`) && strings.Contains(string(body), `outcome="Completed"`)
	})

	stopWorker()
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the API did not stop")
	}
}
