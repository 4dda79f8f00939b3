// Package console serves Orchard's web console at /console/: static assets
// (plain ES modules and one stylesheet, embedded in the binary, no build
// step) that run in the browser and call the public Connect API of the same
// origin with the user's bearer token, exactly as the SDK does. The console
// holds no privilege of its own: what a page shows and what it can change is
// what the token's roles allow the API to answer.
//
// Every response carries a Content-Security-Policy without unsafe-inline or
// unsafe-eval (scripts and styles come only from these files), refuses
// framing, and is never cached by shared caches. The browser code inserts
// every string it did not write itself as text (textContent), never as HTML.
//
// For `orchard dev` the console can also issue one-time sign-in links: a
// random code, short-lived and good for one use, placed in the URL's
// fragment (which browsers never send to a server) and exchanged by POST
// for tokens that SignIn mints. Tokens therefore never appear in a URL or a
// server log. Production servers leave SignIn unset and have no such path.
//
// This package must never accept a token in a URL, log a token or a code,
// or serve anything but its embedded files and the sign-in exchange.
package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Path is where the console is served; mount the Console at it.
const Path = "/console/"

//go:embed assets
var assets embed.FS

// securityPolicy allows the console's own files and calls to its own
// origin, nothing else: no inline script or style, no eval, no framing, no
// plugins, no forms posted elsewhere.
const securityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Config configures a Console. Zero fields take the defaults.
type Config struct {
	// SignIn mints the tokens a one-time sign-in link signs in with, the
	// first being the one the console starts with. Nil: no sign-in links.
	SignIn func(ctx context.Context) ([]string, error)
	// LinkTTL is how long a sign-in link works (default 15 minutes).
	LinkTTL time.Duration
	// Logger receives sign-in exchanges (never the code or the tokens);
	// default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Console is the web console's HTTP handler.
type Console struct {
	cfg   Config
	files http.Handler

	mu    sync.Mutex
	codes map[string]time.Time // sign-in code -> when it stops working
}

// New returns a console for cfg.
func New(cfg Config) *Console {
	cfg.LinkTTL = cmp.Or(cfg.LinkTTL, 15*time.Minute)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &Console{
		cfg:   cfg,
		files: http.StripPrefix(Path, http.FileServerFS(sub)),
		codes: map[string]time.Time{},
	}
}

// SignInLink makes a one-time sign-in link to the console served at base
// (for example "http://127.0.0.1:8080"). It fails when Config.SignIn is
// unset.
func (c *Console) SignInLink(base string) (string, error) {
	if c.cfg.SignIn == nil {
		return "", errors.New("console: sign-in links are not enabled")
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	code := base64.RawURLEncoding.EncodeToString(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	for k, until := range c.codes {
		if !now.Before(until) {
			delete(c.codes, k)
		}
	}
	c.codes[code] = now.Add(c.cfg.LinkTTL)
	return strings.TrimSuffix(base, "/") + Path + "#signin=" + code, nil
}

// ServeHTTP serves the console's files under Path and, when sign-in links
// are enabled, the exchange of a code for tokens (POST Path + "signin").
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", securityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
	if r.URL.Path == Path+"signin" {
		c.signIn(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	c.files.ServeHTTP(w, r)
}

// signIn exchanges a sign-in code for tokens, once. The request must be
// JSON, which a cross-site form cannot send without the browser asking this
// origin first.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if c.cfg.SignIn == nil {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		http.Error(w, "send JSON", http.StatusUnsupportedMediaType)
		return
	}
	var req struct {
		Code string `json:"code"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1024)).Decode(&req); err != nil || req.Code == "" {
		http.Error(w, "send {\"code\": ...}", http.StatusBadRequest)
		return
	}
	if !c.takeCode(req.Code) {
		c.cfg.Logger.InfoContext(r.Context(), "console: sign-in link refused (unknown, used or expired)")
		writeJSON(w, http.StatusGone, map[string]string{
			"error": "This sign-in link has expired or was already used. Restart `orchard dev` for a new one, or paste a token.",
		})
		return
	}
	tokens, err := c.cfg.SignIn(r.Context())
	if err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: minting sign-in tokens", slog.Any("error", err))
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "the server could not mint tokens"})
		return
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: signed in with a one-time link")
	writeJSON(w, http.StatusOK, map[string][]string{"tokens": tokens})
}

// takeCode reports whether code is a live sign-in code, and spends it.
func (c *Console) takeCode(code string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	for k, until := range c.codes {
		if subtle.ConstantTimeCompare([]byte(k), []byte(code)) == 1 {
			delete(c.codes, k)
			return now.Before(until)
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
