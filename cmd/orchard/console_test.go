package main

import (
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/browsertest"
	"github.com/orchardhq/orchard/pkg/sdk"
)

// checkDevConsole follows, in a real browser, the one-time console link
// that `orchard dev --demo` printed in its banner: it signs in as the demo
// tenant's admin and client without a token in the URL, shows what the
// demo ran (the fan-out's tree included), switches to the platform admin,
// and the link does not work twice. TestCLITour calls it on its dev server.
func checkDevConsole(t *testing.T, banner, base, clientToken string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^console: +(http://\S+/console/#signin=[A-Za-z0-9_-]+) `).FindStringSubmatch(banner)
	require.NotNil(t, m, "the banner has no console link:\n%s", banner)
	link := m[1]
	// The tree below needs the fan-out's child, started near its end.
	_, err := sdk.NewClient(base, sdk.WithToken(clientToken)).Wait(t.Context(), "demo-album")
	require.NoError(t, err)

	b := browsertest.Start(t)
	p := b.NewPage(t)
	p.Run(chromedp.Navigate(link))
	require.Equal(t, "demo", p.Text("#who-tenant"))
	require.Equal(t, "tenant-admin, client", p.Text("#who-roles"))
	var href string
	p.Eval(`location.href`, &href)
	require.NotContains(t, href, "signin", "the code leaves the address bar")
	for _, id := range []string{"demo-order-1", "demo-album", "demo-report"} {
		p.WaitText("#instances", id)
	}
	p.Screenshot("dev-instances")

	p.Run(chromedp.Navigate(base + "/console/#/instance/demo-album?tab=tree"))
	p.WaitText("#tree", "publish-summer")
	p.WaitText("#tree-size", "2 instances")
	p.Screenshot("dev-demo-album-tree")

	p.Run(browsertest.SetValue("#who-switch", "1", chromedp.ByQuery))
	p.Eval(`document.querySelector('#who-switch').dispatchEvent(new Event('change'))`, nil)
	p.WaitText("#who-tenant", "Platform")
	p.WaitText("#tenants", "demo")
	p.RequireNoProblems()

	again := b.NewPage(t)
	again.Run(chromedp.Navigate(link))
	again.WaitText("#signin-result", "expired or was already used")
	again.RequireNoProblems("status of 410")
}
