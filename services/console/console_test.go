package console_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/browsertest"
	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/internal/testworker"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/console"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Definitions the tests run.
var definitions = []string{testsystem.FamilyDef, testsystem.EchoDef, testsystem.QuickDef, testsystem.WaiterDef,
	testsystem.LoopDef, testsystem.StuckDef}

// env is the system (internal/testsystem) serving the console too, with a
// dispatcher and a worker for task queue q, and one browser.
type env struct {
	*testsystem.System
	t       *testing.T
	browser *browsertest.Browser
}

func quiet() *slog.Logger { return testsystem.Quiet() }

func newEnv(t *testing.T) *env {
	s := testsystem.New(t, testsystem.Options{Dispatchers: 1, Configure: func(_ *testsystem.System, cfg *api.Config) {
		cfg.Console = console.New(console.Config{Logger: quiet()})
	}})
	w := testworker.Start(context.Background(), testworker.Config{Store: s.Store, TaskQueues: []string{"q"}, Loops: 2,
		Handler: func(_ context.Context, task *store.WorkItem) (any, error) { return json.RawMessage(task.Input), nil }})
	t.Cleanup(w.Stop)
	return &env{System: s, t: t, browser: browsertest.Start(t)}
}

// tenant creates a tenant with the test definitions and returns a token
// with the given roles.
func (e *env) tenant(t *testing.T, id string, roles ...tenancy.Role) string {
	require.NoError(t, e.Store.CreateTenant(t.Context(), &store.CreateTenantParams{TenantID: id}))
	admin := sdk.NewClient(e.URL, sdk.WithToken(e.token(t, id, tenancy.RoleTenantAdmin)))
	for _, doc := range definitions {
		_, err := admin.RegisterDefinition(t.Context(), []byte(doc))
		require.NoError(t, err)
	}
	if len(roles) == 0 {
		return ""
	}
	return e.token(t, id, roles...)
}

func (e *env) token(t *testing.T, tenant string, roles ...tenancy.Role) string {
	return e.Token(t, tenant, roles...)
}

func (e *env) client(t *testing.T, tenant string) *sdk.Client {
	return sdk.NewClient(e.URL, sdk.WithToken(e.token(t, tenant, tenancy.RoleClient)))
}

// start starts an instance and waits until it is terminal, unless wait is false.
func start(t *testing.T, c *sdk.Client, name, id string, input any, wait bool, opts ...sdk.StartOption) {
	t.Helper()
	_, err := c.Start(t.Context(), name, input, append(opts, sdk.WithInstanceID(id))...)
	require.NoError(t, err)
	if wait {
		inst, err := c.Wait(t.Context(), id)
		require.NoError(t, err)
		require.NotEqual(t, sdk.StatusRunning, inst.Status, id)
	}
}

// signIn opens the console in a new tab and signs in with token.
func (e *env) signIn(t *testing.T, token string) *browsertest.Page {
	p := e.browser.NewPage(t)
	p.Run(chromedp.Navigate(e.URL+console.Path), chromedp.WaitVisible("#token", chromedp.ByQuery),
		browsertest.SetValue("#token", token, chromedp.ByQuery), browsertest.Click("#signin-button", chromedp.ByQuery),
		chromedp.WaitVisible("#who-tenant", chromedp.ByQuery))
	return p
}

func (e *env) open(p *browsertest.Page, route string) {
	p.Run(chromedp.Navigate(e.URL + console.Path + route))
}

func TestConsole(t *testing.T) {
	e := newEnv(t)

	t.Run("instances list, counts, filters and pages", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "acme", tenancy.RoleTenantAdmin, tenancy.RoleClient)
		c := e.client(t, "acme")
		for i := range 30 {
			start(t, c, "quick", fmt.Sprintf("quick-%02d", i), map[string]any{"i": i}, false, sdk.WithTags(map[string]string{"batch": "b1"}))
		}
		start(t, c, "waiter", "waiting-1", nil, false)
		p := e.signIn(t, tok)
		require.Equal(t, "acme", p.Text("#who-tenant"))
		require.Equal(t, "tenant-admin, client", p.Text("#who-roles"))
		p.WaitWholeText("#counts .total", "31 matching")
		p.WaitText("#instances", "waiting-1")
		p.Screenshot("instances")

		// Running only, through the status chip.
		p.Run(browsertest.Click(`#counts a.st-running`, chromedp.ByQuery))
		p.WaitWholeText("#counts .total", "1 matching")
		p.WaitText("#instances", "waiting-1")
		require.NotContains(t, p.Text("#instances"), "quick-")

		// A tag filter and page size 25: two pages.
		e.open(p, "#/instances?tag=batch%3Db1&size=25&order=CREATED_ASC")
		p.WaitWholeText("#counts .total", "30 matching")
		first := p.WaitText("#instances", "quick-00")
		require.NotContains(t, first, "quick-25")
		p.Run(browsertest.Click("#next-page", chromedp.ByQuery))
		second := p.WaitText("#instances", "quick-29")
		require.NotContains(t, second, "quick-00")
		p.Run(browsertest.Click("#prev-page", chromedp.ByQuery))
		p.WaitText("#instances", "quick-00")

		// A filter the API rejects shows its reason.
		e.open(p, "#/instances?created_after=2030-01-02T00%3A00&created_before=2030-01-01T00%3A00")
		p.WaitText("#instances", "created_after must be before created_before")
		p.RequireNoProblems(`status of 400`)
	})

	t.Run("instance detail: history, executions, tree, pending", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "detail", tenancy.RoleClient)
		c := e.client(t, "detail")
		start(t, c, "family", "fam-1", map[string]any{"x": 1}, true)
		start(t, c, "loop", "loop-1", map[string]any{"n": 0}, true)
		start(t, c, "stuck", "stuck-1", map[string]any{"y": 2}, false)
		p := e.signIn(t, tok)

		e.open(p, "#/instance/fam-1")
		p.WaitText("#history", "Sub-orchestration started")
		p.WaitText("#history", "fam-1-a")
		p.WaitText("#history", "Execution completed")
		require.Contains(t, p.Text(".overview"), "Completed")
		p.Screenshot("instance-history")

		p.Run(browsertest.Click("#tab-tree", chromedp.ByQuery))
		p.WaitText("#tree-size", "3 instances in this tree")
		p.WaitText("#tree", "fam-1-b")
		p.Screenshot("instance-tree")

		e.open(p, "#/instance/loop-1?tab=executions")
		p.WaitText("#tab-panel", "Continued as new")
		require.Equal(t, 4, p.NodeCount("#tab-panel tbody tr"), "three continued executions and the current one")

		e.open(p, "#/instance/stuck-1?tab=pending")
		p.WaitText("#tab-panel", "nobody-runs-this")
		p.Screenshot("instance-pending")
		p.RequireNoProblems()
	})

	t.Run("actions: raise event, cancel, prune", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "acts", tenancy.RoleClient)
		c := e.client(t, "acts")
		start(t, c, "waiter", "w-event", nil, false)
		start(t, c, "waiter", "w-cancel", nil, false)
		start(t, c, "loop", "loop-2", map[string]any{"n": 0}, true)
		p := e.signIn(t, tok)

		e.open(p, "#/instance/w-event")
		p.Run(browsertest.Click("#raise", chromedp.ByQuery), chromedp.WaitVisible("#event-name", chromedp.ByQuery),
			browsertest.SetValue("#event-name", "go", chromedp.ByQuery), browsertest.SetValue("#event-payload", `{"ok": true}`, chromedp.ByQuery),
			browsertest.Click("#event-send", chromedp.ByQuery))
		p.WaitText("#flash", "Event go queued")
		inst, err := c.Wait(t.Context(), "w-event")
		require.NoError(t, err)
		require.Equal(t, sdk.StatusCompleted, inst.Status)
		require.JSONEq(t, `{"ok": true}`, string(inst.Output))

		e.open(p, "#/instance/w-cancel")
		p.Run(browsertest.Click("#cancel", chromedp.ByQuery), chromedp.WaitVisible("#cancel-reason", chromedp.ByQuery),
			browsertest.SetValue("#cancel-reason", "no longer needed", chromedp.ByQuery), browsertest.Click("#cancel-confirm", chromedp.ByQuery))
		p.WaitText("#flash", "Cancel requested")
		inst, err = c.Wait(t.Context(), "w-cancel")
		require.NoError(t, err)
		require.Equal(t, sdk.StatusCancelled, inst.Status)
		p.Run(browsertest.Click("#refresh", chromedp.ByQuery))
		p.WaitText("#instance-error", "no longer needed")

		e.open(p, "#/instance/loop-2")
		p.Run(browsertest.Click("#prune", chromedp.ByQuery), chromedp.WaitVisible("#prune-keep", chromedp.ByQuery),
			browsertest.SetValue("#prune-keep", "1", chromedp.ByQuery), browsertest.Click("#prune-confirm", chromedp.ByQuery))
		p.WaitText("#flash", "Pruned 3 executions")
		execs, err := c.Executions(t.Context(), "loop-2")
		require.NoError(t, err)
		require.Len(t, execs, 1)
		p.RequireNoProblems()
	})

	t.Run("delete with cascade; a sub-orchestration is refused; force for running", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "del", tenancy.RoleClient, tenancy.RoleTenantAdmin)
		c := e.client(t, "del")
		start(t, c, "family", "fam-2", nil, true)
		start(t, c, "waiter", "wait-2", nil, false)
		p := e.signIn(t, tok)

		e.open(p, "#/instance/fam-2-a")
		p.Run(browsertest.Click("#delete", chromedp.ByQuery))
		p.WaitText("#delete-refused", "sub-orchestration of fam-2")
		p.Run(browsertest.Click("dialog .actions button", chromedp.ByQuery))

		e.open(p, "#/instance/fam-2")
		p.Run(browsertest.Click("#delete", chromedp.ByQuery))
		p.WaitText("#delete-what", "and its 2 sub-orchestrations")
		p.Screenshot("delete-confirm")
		p.Run(browsertest.Click("#delete-confirm", chromedp.ByQuery))
		p.WaitText("#flash", "Deleted fam-2: 3 instances")
		n, err := c.Count(t.Context(), sdk.Filter{IDPrefix: "fam-2"})
		require.NoError(t, err)
		require.Zero(t, n.Total)

		e.open(p, "#/instance/wait-2")
		p.Run(browsertest.Click("#delete", chromedp.ByQuery))
		p.WaitText("#delete-what", "1 instance of this tree is running")
		var disabled bool
		p.Eval(`document.querySelector('#delete-confirm').disabled`, &disabled)
		require.True(t, disabled, "no delete of a running tree without force")
		p.Run(browsertest.Click("#delete-force", chromedp.ByQuery), browsertest.Click("#delete-confirm", chromedp.ByQuery))
		p.WaitText("#flash", "Deleted wait-2: 1 instances")

		// Both deletes are in the tenant's audit log.
		e.open(p, "#/audit?action=delete_instance")
		p.WaitText("#audit", "delete_instance")
		require.Equal(t, 2, p.NodeCount("#audit tbody tr"))
		p.Run(browsertest.Click("#audit tbody tr:last-child button", chromedp.ByQuery))
		p.WaitText("dialog pre", "fam-2")
		p.Screenshot("audit-log")
		p.RequireNoProblems()
	})

	t.Run("bulk delete with a dry run and progress", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "bulk", tenancy.RoleClient)
		c := e.client(t, "bulk")
		for i := range 12 {
			start(t, c, "quick", fmt.Sprintf("old-%02d", i), nil, false)
		}
		start(t, c, "family", "fam-3", nil, true)
		start(t, c, "waiter", "wait-3", nil, false)
		testwait.Until(t, 30*time.Second, "the quick instances to complete", func() bool {
			n, err := c.Count(t.Context(), sdk.Filter{Name: "quick", Statuses: []sdk.Status{sdk.StatusCompleted}})
			require.NoError(t, err)
			return n.Total == 12
		})
		p := e.signIn(t, tok)
		e.open(p, "#/instances?name_prefix=")
		p.WaitWholeText("#counts .total", "16 matching")
		p.Run(browsertest.Click("#bulk-delete", chromedp.ByQuery))
		// 12 quick and fam-3 are terminal roots; its children go with it;
		// the waiter runs and stays.
		require.Equal(t, "13", p.Text("#dry-run-count"))
		p.Screenshot("bulk-dry-run")
		p.Run(browsertest.Click("#bulk-confirm", chromedp.ByQuery))
		p.WaitText("#bulk-status", "Done: 15 instances (sub-orchestrations included)")
		var progress, max float64
		p.Eval(`document.querySelector('#bulk-progress').value`, &progress)
		p.Eval(`document.querySelector('#bulk-progress').max`, &max)
		require.Equal(t, max, progress)
		p.Screenshot("bulk-done")
		n, err := c.Count(t.Context(), sdk.Filter{})
		require.NoError(t, err)
		require.Equal(t, int64(1), n.Total, "only the running waiter is left")
		p.RequireNoProblems()
	})

	t.Run("tenant-controlled strings render as text", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "xss", tenancy.RoleClient, tenancy.RoleTenantAdmin)
		c := e.client(t, "xss")
		script := `<script>window.__xss=1</script>`
		img := `"><img src=x onerror="window.__xss=2">`
		start(t, c, "quick", "xss-1", map[string]any{"a": script, "b": img}, true,
			sdk.WithTags(map[string]string{"note": img, "other": script}))
		start(t, c, "waiter", "xss-2", nil, false)
		require.NoError(t, c.RaiseEvent(t.Context(), "xss-2", "go", map[string]string{"p": img}))
		start(t, c, "waiter", "xss-3", nil, false)
		require.NoError(t, c.Cancel(t.Context(), "xss-3", script+img))
		_, err := c.Wait(t.Context(), "xss-3")
		require.NoError(t, err)

		p := e.signIn(t, tok)
		e.open(p, "#/instance/xss-1")
		p.WaitText(".overview", `"a": "<script>window.__xss=1</script>"`)
		p.WaitText(".overview", `note="><img src=x onerror="window.__xss=2">`)
		p.WaitText("#history", script)
		p.Screenshot("xss-instance")
		e.open(p, "#/instance/xss-2")
		p.WaitText("#history", `onerror=\"window.__xss=2\"`)
		e.open(p, "#/instance/xss-3")
		p.WaitText("#instance-error", script+img)
		// A definition whose name is markup: refused, and the reasons show as text.
		e.open(p, "#/definitions")
		doc := "name: '" + strings.ReplaceAll(img, "'", "''") + "'\nversion: '<b>1</b>'\nsteps:\n  - return: '" + script + "'\n"
		p.Run(browsertest.SetValue("#definition-source", doc, chromedp.ByQuery), browsertest.Click("#register", chromedp.ByQuery))
		p.WaitText("#register-result", "Not registered")
		p.WaitText("#register-result", "document.name")
		p.Screenshot("xss-definition")

		var injected int
		p.Eval(`document.querySelectorAll('img, main script, main [onerror]').length`, &injected)
		require.Zero(t, injected, "no element was made of tenant text")
		var ran bool
		p.Eval(`window.__xss !== undefined`, &ran)
		require.False(t, ran, "no tenant script ran")
		p.RequireNoProblems("status of 400")
	})

	t.Run("roles decide what shows", func(t *testing.T) {
		t.Parallel()
		e.tenant(t, "roles")
		start(t, e.client(t, "roles"), "quick", "r-1", nil, true)

		p := e.signIn(t, e.token(t, "roles", tenancy.RoleWorker))
		p.WaitText("#no-sections", "worker")
		require.Zero(t, p.NodeCount("#nav a"), "a worker token has no section")
		require.Zero(t, p.NodeCount("button.danger"))
		p.Screenshot("worker-token")

		p = e.signIn(t, e.token(t, "roles", tenancy.RoleClient))
		p.WaitText("#instances", "r-1")
		nav := p.Text("#nav")
		require.Contains(t, nav, "Definitions")
		require.NotContains(t, nav, "Retention")
		require.NotContains(t, nav, "Tenants")
		e.open(p, "#/definitions")
		p.WaitText("#definitions", "family")
		require.Zero(t, p.NodeCount("#register"), "registering needs tenant-admin")

		p = e.signIn(t, e.token(t, "roles", tenancy.RoleTenantAdmin))
		nav = p.WaitText("#nav", "Retention")
		require.NotContains(t, nav, "Instances")
		require.Zero(t, p.NodeCount("#bulk-delete, #delete"))
		p.RequireNoProblems()
	})

	t.Run("a wrong token gets a clear sign-in error", func(t *testing.T) {
		t.Parallel()
		p := e.browser.NewPage(t)
		e.open(p, "")
		p.Run(chromedp.WaitVisible("#token", chromedp.ByQuery),
			browsertest.SetValue("#token", "not a token", chromedp.ByQuery), browsertest.Click("#signin-button", chromedp.ByQuery))
		p.WaitText("#signin-result", "This is not a token")

		_, other, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		stranger, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: other, Issuer: testsystem.Issuer, Audience: testsystem.Audience})
		require.NoError(t, err)
		forged, err := stranger.Mint(tenancy.Claims{Tenant: "acme", Subject: "mallory", Roles: []tenancy.Role{tenancy.RoleClient}}, time.Hour)
		require.NoError(t, err)
		p.Run(browsertest.SetValue("#token", forged, chromedp.ByQuery), browsertest.Click("#signin-button", chromedp.ByQuery))
		p.WaitText("#signin-result", "The API refused this token")
		p.Screenshot("wrong-token")
		require.Zero(t, p.NodeCount("#who-tenant"))
		var stored string
		p.Eval(`sessionStorage.getItem('orchard.console.session') || ''`, &stored)
		require.Empty(t, stored, "a refused token is not kept")
		p.RequireNoProblems("status of 401")
	})

	t.Run("tenant admin: definitions, retention, usage", func(t *testing.T) {
		t.Parallel()
		tok := e.tenant(t, "settings", tenancy.RoleTenantAdmin, tenancy.RoleClient)
		c := e.client(t, "settings")
		for i := range 3 {
			start(t, c, "quick", fmt.Sprintf("done-%d", i), nil, true)
		}
		p := e.signIn(t, tok)
		e.open(p, "#/definitions")
		p.WaitText("#definitions", "waiter")
		p.Run(browsertest.SetValue("#definition-source", "name: bad\nversion: '1'\nsteps:\n  - activity: { name: x }\n", chromedp.ByQuery),
			browsertest.Click("#register", chromedp.ByQuery))
		p.WaitText("#register-result", "document.steps[0]")
		p.Run(browsertest.SetValue("#definition-source", "name: greet\nversion: '1'\nsteps:\n  - return: ${ input }\n", chromedp.ByQuery),
			browsertest.Click("#register", chromedp.ByQuery))
		p.WaitText("#register-result", "Registered: greet version 1")
		p.Run(browsertest.Click("#register-result a", chromedp.ByQuery))
		p.WaitText("#definition-name", "greet")
		p.Screenshot("definition")

		e.open(p, "#/retention")
		// Keeping completed instances 0s would delete the three now.
		p.Run(chromedp.WaitVisible("#default-completed", chromedp.ByQuery),
			browsertest.SetValue("#default-completed", "0", chromedp.ByQuery),
			browsertest.Click("#retention-preview-button", chromedp.ByQuery))
		p.WaitText("#retention-preview", "3 instances")
		p.Screenshot("retention-preview")
		p.Run(browsertest.SetValue("#default-completed", "30d", chromedp.ByQuery),
			browsertest.SetValue("#default-keep-last", "5", chromedp.ByQuery),
			browsertest.Click("#add-rule", chromedp.ByQuery),
			browsertest.SetValue("#rule-0-name", "quick", chromedp.ByQuery),
			browsertest.SetValue("#rule-0-failed", "12h", chromedp.ByQuery),
			browsertest.Click("#retention-save", chromedp.ByQuery))
		p.WaitText("dialog #retention-preview", "0 instances")
		p.Run(browsertest.Click("dialog .actions button:last-child", chromedp.ByQuery))
		p.WaitText("#retention-result", "Saved")
		// What the API stored comes back into the form.
		p.Run(chromedp.Reload())
		var completed, failed string
		p.Run(chromedp.WaitVisible("#rule-0-failed", chromedp.ByQuery),
			chromedp.Value("#default-completed", &completed, chromedp.ByQuery), chromedp.Value("#rule-0-failed", &failed, chromedp.ByQuery))
		require.Equal(t, "30d", completed)
		require.Equal(t, "12h", failed)
		p.Screenshot("retention")

		e.open(p, "#/usage")
		p.WaitText(".overview", "History events per execution")
		p.Screenshot("usage")
		p.RequireNoProblems("status of 400")
	})

	t.Run("platform admin: tenants, usage, janitor runs", func(t *testing.T) {
		t.Parallel()
		e.tenant(t, "plat")
		p := e.signIn(t, e.token(t, "", tenancy.RolePlatformAdmin))
		require.Equal(t, "Platform", p.Text("#who-tenant"))
		p.WaitText("#tenants", "plat")
		p.Run(browsertest.SetValue("#new-tenant", "newco", chromedp.ByQuery), browsertest.Click("#create-tenant", chromedp.ByQuery))
		p.WaitText("#tenants-result", "Tenant newco created")
		p.WaitText("#tenants", "newco")
		// A limit the form does not show, which its save must keep.
		_, err := e.Store.UpdateTenant(t.Context(), &store.UpdateTenantParams{TenantID: "newco", Limits: &store.Limits{TurnBudgetMillis: 5000}})
		require.NoError(t, err)
		// Suspend newco (the row's danger button), then check with the store.
		p.Run(browsertest.Click(`//tr[td/span[text()="newco"]]//button[contains(., "Suspend")]`, chromedp.BySearch),
			chromedp.WaitVisible("dialog button.danger", chromedp.ByQuery), browsertest.Click("dialog button.danger", chromedp.ByQuery))
		p.WaitText("#tenants-result", "newco suspended")
		tn, err := e.Store.GetTenant(t.Context(), &store.GetTenantParams{TenantID: "newco"})
		require.NoError(t, err)
		require.Equal(t, store.TenantSuspended, tn.State)
		p.WaitText("#tenants", "suspended")
		p.Run(browsertest.Click(`//tr[td/span[text()="newco"]]//button[contains(., "Limits")]`, chromedp.BySearch),
			chromedp.WaitVisible("#limit-requestsPerSecond", chromedp.ByQuery),
			browsertest.SetValue("#limit-requestsPerSecond", "5", chromedp.ByQuery), browsertest.SetValue("#limit-startsPerSecond", "2", chromedp.ByQuery),
			browsertest.SetValue("#limit-startsBurst", "3", chromedp.ByQuery), browsertest.Click("#limits-save", chromedp.ByQuery))
		p.WaitText("#tenants-result", "Limits of newco saved")
		tn, err = e.Store.GetTenant(t.Context(), &store.GetTenantParams{TenantID: "newco"})
		require.NoError(t, err)
		require.Equal(t, store.Limits{RequestsPerSecond: 5, StartsPerSecond: 2, StartsBurst: 3, TurnBudgetMillis: 5000}, tn.Limits)
		p.Screenshot("platform-tenants")

		e.open(p, "#/platform-usage")
		p.WaitText("#platform-usage", "plat")
		p.Screenshot("platform-usage")
		e.open(p, "#/janitor")
		p.Run(chromedp.WaitVisible("#janitor-runs table, #janitor-runs .empty", chromedp.ByQuery))
		p.Screenshot("platform-janitor")
		e.open(p, "#/platform-audit")
		p.Run(chromedp.WaitVisible("#audit table, #audit .empty", chromedp.ByQuery))
		p.RequireNoProblems()
	})
}

// The console's files carry the security headers, and nothing but its files
// and (when enabled) the sign-in exchange is served.
func TestHeadersAndSignInLinks(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	minted := 0
	c := console.New(console.Config{Logger: quiet(), Now: func() time.Time { return now }, LinkTTL: time.Minute,
		SignIn: func(context.Context) ([]string, error) { minted++; return []string{"tok-a", "tok-b"}, nil }})
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	for _, path := range []string{"/console/", "/console/js/main.js", "/console/console.css"} {
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		csp := res.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'")
		require.Contains(t, csp, "script-src 'self'")
		require.NotContains(t, csp, "unsafe-")
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	}
	res, err := http.Get(srv.URL + "/console/nope.js")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	link, err := c.SignInLink(srv.URL)
	require.NoError(t, err)
	prefix := srv.URL + "/console/#signin="
	require.True(t, strings.HasPrefix(link, prefix), link)
	code := strings.TrimPrefix(link, prefix)
	post := func(ct, body string) (int, string) {
		res, err := http.Post(srv.URL+"/console/signin", ct, strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
		return res.StatusCode, string(b)
	}
	status, _ := post("application/x-www-form-urlencoded", "code="+code)
	require.Equal(t, http.StatusUnsupportedMediaType, status, "a form cannot spend a code")
	status, body := post("application/json", `{"code":"`+code+`"}`)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"tokens":["tok-a","tok-b"]}`, body)
	status, _ = post("application/json", `{"code":"`+code+`"}`)
	require.Equal(t, http.StatusGone, status, "a code works once")

	link, err = c.SignInLink(srv.URL)
	require.NoError(t, err)
	now = now.Add(time.Minute)
	status, _ = post("application/json", `{"code":"`+strings.TrimPrefix(link, prefix)+`"}`)
	require.Equal(t, http.StatusGone, status, "a code expires")
	require.Equal(t, 1, minted)

	noLinks := httptest.NewServer(console.New(console.Config{Logger: quiet()}))
	t.Cleanup(noLinks.Close)
	res, err = http.Post(noLinks.URL+"/console/signin", "application/json", strings.NewReader(`{"code":"x"}`))
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode, "no sign-in links unless enabled")
}
