// Package browsertest drives a real headless Chromium from Go tests, through
// the DevTools protocol (chromedp): one browser per test that asks for it,
// with a fresh profile, a page that records every console error, uncaught
// exception and failed load, and screenshots saved where a person can look
// at them.
//
// A test that needs a browser fails when none is installed: it never skips.
// Debian's package is `chromium` (apt-get install chromium); .ci/run installs
// it when missing. CHROMIUM may name the binary.
//
// It is for tests only.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/orchardhq/orchard/internal/testwait"
)

// Timeout bounds each Run of a page: long enough for a loaded machine, short
// enough that a missing element fails the test instead of hanging it.
const Timeout = 60 * time.Second

// EnvScreenshots names the variable that sets where screenshots go (default
// $TMPDIR/orchard-console-screenshots).
const EnvScreenshots = "ORCHARD_SCREENSHOTS"

// ExecPath finds the Chromium binary: $CHROMIUM, then chromium,
// chromium-browser, google-chrome on PATH.
func ExecPath() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found (install it: apt-get install chromium; or set CHROMIUM to its path)")
}

// Browser is a headless Chromium with its own throwaway profile.
type Browser struct {
	ctx context.Context // the browser's first tab; new tabs derive from it
}

// Start launches a browser that closes when the test ends. It fails the test
// when Chromium is missing or does not start.
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := ExecPath()
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	// The profile is removed once the browser has exited: Chromium's
	// helpers may still write to it for a moment after the close.
	profile, err := os.MkdirTemp("", "orchard-chromium-")
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1440, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(protocolErrors(t)))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		deadline := time.Now().Add(10 * time.Second)
		for os.RemoveAll(profile) != nil && time.Now().Before(deadline) {
			testwait.Tick()
		}
	})
	// The first Run starts the browser and ties it to the context it is
	// given: ctx itself, not one with a timeout.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("browsertest: starting %s: %v", path, err)
	}
	return &Browser{ctx: ctx}
}

// protocolErrors logs chromedp's own errors with the test, except its
// notes on protocol events newer than it knows (Chromium moves faster than
// the protocol bindings; those events carry nothing the tests use).
func protocolErrors(t testing.TB) func(string, ...any) {
	return func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unhandled node event") {
			t.Logf("chromedp: %s", msg)
		}
	}
}

// Page is a browser tab that records problems the page reports.
type Page struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

// NewPage opens a tab, closed when the test ends. Tabs of one browser share
// its profile (cookies, localStorage) but each has its own sessionStorage.
func (b *Browser) NewPage(t testing.TB) *Page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	p := &Page{t: t, ctx: ctx}
	// The first Run opens the tab for ctx (not for a child with a timeout,
	// whose end would close it).
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("browsertest: opening a tab: %v", err)
	}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range ev.Args {
					if a.Value != nil {
						parts = append(parts, string(a.Value))
					} else {
						parts = append(parts, a.Description)
					}
				}
				p.record("console." + string(ev.Type) + ": " + strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			p.record(fmt.Sprintf("uncaught exception: %s (%s:%d)", msg, d.URL, d.LineNumber))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.LevelError || ev.Entry.Level == cdplog.LevelWarning && ev.Entry.Source == cdplog.SourceSecurity {
				p.record(fmt.Sprintf("%s %s: %s %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	p.Run(chromedp.EmulateViewport(1440, 900))
	return p
}

func (p *Page) record(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.problems = append(p.problems, s)
}

// Context is the tab's context, for chromedp calls the helpers do not cover.
func (p *Page) Context() context.Context { return p.ctx }

// Run runs actions in the tab, failing the test on error or after Timeout.
func (p *Page) Run(actions ...chromedp.Action) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %v\nproblems the page reported: %q", err, p.Problems())
	}
}

// Problems returns the console errors, uncaught exceptions, failed loads and
// security (CSP) reports seen so far, and forgets them.
func (p *Page) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.problems
	p.problems = nil
	return out
}

// RequireNoProblems fails the test when the page reported any problem
// other than those matching allowed (substrings of expected ones, such as
// the 401 of a refused token).
func (p *Page) RequireNoProblems(allowed ...string) {
	p.t.Helper()
	// Console and log events come asynchronously: flush them by a round
	// trip to the page first.
	var ignored bool
	p.Run(chromedp.Evaluate(`true`, &ignored))
	var bad []string
	for _, s := range p.Problems() {
		if !slices.ContainsFunc(allowed, func(a string) bool { return strings.Contains(s, a) }) {
			bad = append(bad, s)
		}
	}
	if len(bad) > 0 {
		p.t.Fatalf("the page reported problems:\n%s", strings.Join(bad, "\n"))
	}
}

// The console replaces whole parts of the page when it renders, so a node
// found by one protocol call may be gone by the next. The helpers below read
// in one evaluation, or retry an action that found its node gone (which it
// then had not acted on).

// visibleText is a JavaScript function of a selector, a wanted text and
// whether that must be the whole (trimmed) text or may be a part of it: the
// [innerText] of the first matching node when it is visible and its text
// matches, else false (an array, since an empty text must end the wait too).
// chromedp.Text reads innerText as well.
const visibleText = `(sel, want, whole) => {
	const n = document.querySelector(sel);
	if (n === null || !(n.offsetWidth || n.offsetHeight || n.getClientRects().length)) return false;
	const t = n.textContent;
	return (whole ? t.trim() === want : t.includes(want)) ? [n.innerText] : false;
}`

// pollText waits until visibleText(sel, want, whole) answers and returns
// its text.
func (p *Page) pollText(sel, want string, whole bool) (string, error) {
	var s []string
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	err := chromedp.Run(ctx, chromedp.Poll(fmt.Sprintf(`(%s)(%q, %q, %t)`, visibleText, sel, want, whole),
		&s, chromedp.WithPollingInterval(20*time.Millisecond)))
	if err == nil && len(s) != 1 {
		err = fmt.Errorf("the page answered %q", s)
	}
	if err != nil {
		return "", err
	}
	return s[0], nil
}

// Text reads the text of the first node matching the CSS selector, waiting
// for it to be visible.
func (p *Page) Text(sel string) string {
	p.t.Helper()
	s, err := p.pollText(sel, "", false)
	if err != nil {
		p.t.Fatalf("waiting for %s to show: %v; problems: %q", sel, err, p.Problems())
	}
	return s
}

// WaitText waits until the text of the node matching sel contains want,
// and returns the text.
func (p *Page) WaitText(sel, want string) string {
	p.t.Helper()
	return p.waitText(sel, want, false)
}

// WaitWholeText waits until the text of the node matching sel, trimmed, is
// want: where an old text contains the new one ("31 matching" contains
// "1 matching"), WaitText would not wait.
func (p *Page) WaitWholeText(sel, want string) {
	p.t.Helper()
	p.waitText(sel, want, true)
}

func (p *Page) waitText(sel, want string, whole bool) string {
	p.t.Helper()
	s, err := p.pollText(sel, want, whole)
	if err != nil {
		// Where the page is and what it shows, for a wait that failed because
		// the page left the view it was on.
		var got struct{ Text, URL, Shows string }
		_ = chromedp.Run(p.ctx, chromedp.Evaluate(fmt.Sprintf(`({text: (document.querySelector(%q) || {}).textContent || "(no %s)",
			url: location.href, shows: ((document.querySelector("main") || document.body || {}).innerText || "").slice(0, 400)})`, sel, sel), &got))
		p.t.Fatalf("waiting for %q in %s: %v; it says: %q; the page is at %s and shows %q; problems: %q",
			want, sel, err, got.Text, got.URL, got.Shows, p.Problems())
	}
	return s
}

// Click is chromedp.Click, tried again when the node it found was replaced
// before the click reached it.
func Click(sel any, opts ...chromedp.QueryOption) chromedp.Action {
	return againWhenGone(chromedp.Click(sel, opts...))
}

// SetValue is chromedp.SetValue, tried again when the node it found was
// replaced before the value reached it.
func SetValue(sel any, value string, opts ...chromedp.QueryOption) chromedp.Action {
	return againWhenGone(chromedp.SetValue(sel, value, opts...))
}

// goneTries bounds the attempts of an action whose node keeps vanishing: a
// page that re-renders that often is a defect to see, not to wait out.
const goneTries = 5

func againWhenGone(action chromedp.Action) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		for range goneTries {
			if err = action.Do(ctx); err == nil || !nodeGone(err) {
				return err
			}
		}
		return err
	})
}

// nodeGone tells the DevTools errors of a node removed from the document
// after a query found it.
func nodeGone(err error) bool {
	var e *cdproto.Error
	if !errors.As(err, &e) {
		return false
	}
	return strings.Contains(e.Message, "No node with given id") || strings.Contains(e.Message, "Node is detached")
}

// Eval evaluates a JavaScript expression and decodes its result into out.
func (p *Page) Eval(expr string, out any) {
	p.t.Helper()
	p.Run(chromedp.Evaluate(expr, out))
}

// Screenshot saves the whole page as dir/<name>.png, where dir is
// ScreenshotDir.
func (p *Page) Screenshot(name string) {
	p.t.Helper()
	var png []byte
	p.Run(chromedp.FullScreenshot(&png, 100))
	path := filepath.Join(ScreenshotDir(p.t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
}

var screenshots struct {
	once sync.Once
	dir  string
	err  error
}

// ScreenshotDir is where screenshots go: $ORCHARD_SCREENSHOTS, or
// $TMPDIR/orchard-console-screenshots, made once per test binary and
// logged so a person can find the images.
func ScreenshotDir(t testing.TB) string {
	t.Helper()
	screenshots.once.Do(func() {
		dir := os.Getenv(EnvScreenshots)
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "orchard-console-screenshots")
		}
		screenshots.dir, screenshots.err = dir, os.MkdirAll(dir, 0o755)
		if screenshots.err == nil {
			t.Logf("browsertest: screenshots in %s", dir)
		}
	})
	if screenshots.err != nil {
		t.Fatalf("screenshots: %v", screenshots.err)
	}
	return screenshots.dir
}

// NodeCount counts the nodes matching a CSS selector now.
func (p *Page) NodeCount(sel string) int {
	p.t.Helper()
	var n int
	p.Eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)
	return n
}
