package main

// The client verbs of the orchard command (token, definition, start, event,
// cancel, instance, instances, tenant) talk to an API server through
// pkg/sdk. This file holds what they share: the connection flags, output
// (tables, JSON, JSON lines and YAML), the parsing of times, durations, tags, statuses and
// payloads, and the one mapping from failures to exit codes.
//
// Output. By default a verb prints a human table (or a few "Key: value"
// lines for one object) to stdout; `--output json` prints one JSON document
// instead: an object, or an array for listings; `-o jsonl` prints one
// compact JSON object a line (each item of a listing on its own line), and
// `-o yaml` the same document as YAML, keys in the same order. The JSON is stable: fields
// are named like the API's JSON (lowerCamelCase: instanceId, createdAt...),
// statuses as the SDK names them (Running, Completed, Failed, Cancelled,
// ContinuedAsNew), times are RFC 3339 in UTC, durations are Go durations
// ("720h0m0s"), payloads (input, output, event payloads, documents) are
// embedded as JSON, and empty optional fields are omitted. Fields may be
// added; none is renamed or removed. Progress and hints go to stderr.
//
// Exit codes, for scripts:
//
//	0  ok
//	1  any other error (also: already exists, a --wait'ed instance that failed or was cancelled)
//	2  usage: bad flags or arguments, including those the API rejects as invalid
//	3  not found
//	4  failed precondition (a running instance deleted without --force, a sub-orchestration deleted alone)
//	5  unauthenticated or permission denied (no token, a bad one, the wrong role, a suspended tenant)
//	6  unavailable (the API cannot be reached)

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// Exit codes of the client verbs.
const (
	exitOther        exitError = 1
	exitUsage        exitError = 2
	exitNotFound     exitError = 3
	exitPrecondition exitError = 4
	exitAuth         exitError = 5
	exitUnavailable  exitError = 6
)

const exitCodesHelp = `Exit codes: 0 ok; 1 other error; 2 usage (bad flags or arguments, or a
request the API rejects as invalid); 3 not found; 4 failed precondition (for
example deleting a running instance without --force); 5 unauthenticated or
permission denied; 6 unavailable (the API cannot be reached).`

// addClientFlags adds the flags of the client verbs to each of them (not to
// the servers'): where the API is, the token, and the output format.
func addClientFlags(f *pflag.FlagSet) {
	f.String("addr", envString("ORCHARD_ADDR", "http://127.0.0.1:8080"), "URL of the Orchard API, for the client verbs (env ORCHARD_ADDR)")
	f.String("token", "", "token (JWT) the client verbs send (env ORCHARD_TOKEN)")
	f.StringP("output", "o", "table", "output format: table, json, jsonl (one object a line) or yaml")
}

// cli is what a client verb runs with, read from its flags.
type cli struct {
	addr, token string
	// json is true for every machine-readable format (json, jsonl, yaml):
	// the verbs build one value and printJSON prints it in format.
	json        bool
	format      string
	out, errOut io.Writer
	in          io.Reader
}

func newCLI(cmd *cobra.Command) (*cli, error) {
	c := &cli{out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), in: cmd.InOrStdin()}
	if f := cmd.Flag("addr"); f != nil {
		c.addr = f.Value.String()
	}
	if f := cmd.Flag("token"); f != nil {
		c.token = f.Value.String()
	}
	if c.token == "" {
		c.token = os.Getenv(sdk.TokenEnv)
	}
	if !strings.Contains(c.addr, "://") {
		c.addr = "http://" + c.addr
	}
	output := "table"
	if f := cmd.Flag("output"); f != nil {
		output = f.Value.String()
	}
	switch output {
	case "table", "":
		c.format = "table"
	case "json", "jsonl", "yaml":
		c.json, c.format = true, output
	default:
		return nil, usageErrorf("--output must be table, json, jsonl or yaml, not %q", output)
	}
	return c, nil
}

func (c *cli) client() *sdk.Client { return sdk.NewClient(c.addr, sdk.WithToken(c.token)) }
func (c *cli) tenantClient() *sdk.TenantClient {
	return sdk.NewTenantClient(c.addr, sdk.WithToken(c.token))
}
func (c *cli) adminClient() *sdk.AdminClient {
	return sdk.NewAdminClient(c.addr, sdk.WithToken(c.token))
}

// printJSON prints v in the machine format asked for: indented JSON, JSON
// lines (an array's items one a line) or YAML.
func (c *cli) printJSON(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if c.format == "json" {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return err
	}
	switch c.format {
	case "jsonl":
		return writeJSONLines(c.out, buf.Bytes())
	case "yaml":
		return writeYAML(c.out, buf.Bytes())
	}
	_, err := c.out.Write(buf.Bytes())
	return err
}

// printItem prints one item of a streamed listing in a line-oriented
// format: a JSON line, or a one-item YAML sequence (which, one after
// another, make one sequence).
func (c *cli) printItem(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if c.format == "yaml" {
		return writeYAML(c.out, append(append([]byte{'['}, b...), ']'))
	}
	return writeJSONLines(c.out, b)
}

// writeJSONLines writes a JSON document compact on one line, or, when it is
// an array, each of its items on a line of its own.
func writeJSONLines(w io.Writer, doc []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(doc, &items); err != nil {
		items = []json.RawMessage{doc}
	}
	for _, item := range items {
		var buf bytes.Buffer
		if err := json.Compact(&buf, item); err != nil {
			return err
		}
		buf.WriteByte('\n')
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// writeYAML writes a JSON document as block-style YAML, keys in the
// document's order.
func writeYAML(w io.Writer, doc []byte) error {
	var node yaml.Node
	if err := yaml.Unmarshal(doc, &node); err != nil {
		return err
	}
	var block func(n *yaml.Node)
	block = func(n *yaml.Node) {
		n.Style = 0
		for _, child := range n.Content {
			block(child)
		}
	}
	block(&node)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return err
	}
	return enc.Close()
}

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func (c *cli) table(headers ...string) *table {
	t := &table{w: tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)}
	if len(headers) > 0 {
		t.row(headers...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, s := range cells {
		if s == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// fields prints "Key: value" lines, aligned.
func (c *cli) fields(kv ...string) error {
	t := c.table()
	for i := 0; i+1 < len(kv); i += 2 {
		t.row(kv[i]+":", kv[i+1])
	}
	return t.flush()
}

// Times print in UTC: RFC 3339 to the second in tables, with the fraction
// in JSON.
func tableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// humanDuration prints whole days as "30d", the rest as Go does without
// the zero units ("1h", "1h30m", "90s").
func humanDuration(d time.Duration) string {
	if d != 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// compactJSON prints a payload on one line, cut to max runes.
func compactJSON(b []byte, limit int) string {
	if len(b) == 0 {
		return ""
	}
	s := string(b)
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		s = buf.String()
	}
	if limit > 0 && len([]rune(s)) > limit {
		s = string([]rune(s)[:limit-1]) + "…"
	}
	return s
}

var daysPrefix = regexp.MustCompile(`^(\d+)d(.*)$`)

// parseDuration parses a Go duration ("720h", "90m") that may start with
// whole days ("30d", "1d12h"). It refuses negative durations.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		days, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d = time.Duration(days) * 24 * time.Hour
		s = m[2]
		if s == "" {
			return d, nil
		}
	}
	rest, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use 90m, 720h, 30d or 1d12h)", s)
	}
	if rest < 0 {
		return 0, fmt.Errorf("invalid duration %q: negative", s)
	}
	return d + rest, nil
}

// parseTime parses an RFC 3339 time, a date (UTC midnight), "now", or a
// duration meaning "that long before now" ("720h", "30d").
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "now") {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time %q (use RFC 3339 like 2024-05-01T12:00:00Z, a date like 2024-05-01, now, or a duration ago like 720h or 30d)", s)
	}
	return now.Add(-d), nil
}

// timeValue is a flag holding a time (parseTime, against the clock when
// the flag is parsed).
type timeValue struct {
	t   **time.Time // set only when the flag is given
	raw string
}

func (v *timeValue) String() string { return v.raw }
func (v *timeValue) Type() string   { return "time" }
func (v *timeValue) Set(s string) error {
	t, err := parseTime(s, time.Now())
	if err != nil {
		return err
	}
	*v.t, v.raw = &t, s
	return nil
}

// timeFlag is a time bound: nil unless the flag is given, then the time as
// given (the zero time included).
func timeFlag(f *pflag.FlagSet, p **time.Time, name, usage string) {
	f.Var(&timeValue{t: p}, name, usage+" (RFC 3339, a date, now, or a duration ago: 720h, 30d)")
}

// durationValue is a flag holding a duration (parseDuration).
type durationValue struct {
	d   *time.Duration
	raw string
}

func (v *durationValue) String() string { return v.raw }
func (v *durationValue) Type() string   { return "duration" }
func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d, v.raw = d, s
	return nil
}

func durationFlag(f *pflag.FlagSet, p *time.Duration, name, usage string) {
	f.Var(&durationValue{d: p}, name, usage)
}

// tagsValue is a repeatable k=v flag.
type tagsValue struct{ m *map[string]string }

func (v *tagsValue) String() string {
	var parts []string
	for k, val := range *v.m {
		parts = append(parts, k+"="+val)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
func (v *tagsValue) Type() string { return "key=value" }
func (v *tagsValue) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("a tag is key=value, not %q", s)
	}
	if *v.m == nil {
		*v.m = map[string]string{}
	}
	(*v.m)[k] = val
	return nil
}

// statusNames are the statuses flags accept, in lower case: every status by
// its name, and a few spellings people type.
var statusNames = func() map[string]sdk.Status {
	m := map[string]sdk.Status{"canceled": sdk.StatusCancelled, "continued-as-new": sdk.StatusContinuedAsNew}
	for _, s := range sdk.Statuses() {
		m[strings.ToLower(string(s))] = s
	}
	return m
}()

// statusValue is a repeatable (and comma-separated) status flag.
type statusValue struct{ s *[]sdk.Status }

func (v *statusValue) String() string {
	var parts []string
	for _, s := range *v.s {
		parts = append(parts, string(s))
	}
	return strings.Join(parts, ",")
}
func (v *statusValue) Type() string { return "status" }
func (v *statusValue) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		st, ok := statusNames[strings.ToLower(strings.TrimSpace(part))]
		if !ok {
			return fmt.Errorf("unknown status %q (running, completed, failed, cancelled, continued-as-new)", part)
		}
		if !slices.Contains(*v.s, st) {
			*v.s = append(*v.s, st)
		}
	}
	return nil
}

// readPayload reads a JSON flag value: the JSON itself, @file, or @- for
// stdin. Empty is no payload.
func (c *cli) readPayload(flag, v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	b := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = c.readFile(name); err != nil {
			return nil, err
		}
	}
	if !json.Valid(b) {
		return nil, usageErrorf("--%s is not valid JSON", flag)
	}
	return json.RawMessage(b), nil
}

// readFile reads a file, or stdin for "-".
func (c *cli) readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(c.in)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, &codedError{msg: err.Error(), err: err, code: exitUsage}
	}
	return b, nil
}

// codedError is an error with the exit code the process ends with: main
// finds the exitError in its chain.
type codedError struct {
	msg  string
	err  error
	code exitError
}

func (e *codedError) Error() string   { return e.msg }
func (e *codedError) Unwrap() []error { return []error{e.err, e.code} }

func usageErrorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &codedError{msg: err.Error(), err: err, code: exitUsage}
}

// exitCodes maps the API's codes to exit codes.
var exitCodes = map[connect.Code]exitError{
	connect.CodeInvalidArgument:    exitUsage,
	connect.CodeOutOfRange:         exitUsage,
	connect.CodeNotFound:           exitNotFound,
	connect.CodeFailedPrecondition: exitPrecondition,
	connect.CodeUnauthenticated:    exitAuth,
	connect.CodePermissionDenied:   exitAuth,
	connect.CodeUnavailable:        exitUnavailable,
}

// failure is the one place where a client verb's error becomes what the
// user sees and the exit code: an API error prints its code, message and
// field violations (one a line); anything else prints as it is.
func failure(err error) error {
	if err == nil {
		return nil
	}
	var coded *codedError
	if errors.As(err, &coded) {
		return err
	}
	var e *sdk.Error
	if !errors.As(err, &e) {
		return &codedError{msg: err.Error(), err: err, code: exitOther}
	}
	var b strings.Builder
	code := strings.ReplaceAll(e.Code.String(), "_", " ")
	b.WriteString(code)
	if msg := strings.TrimPrefix(e.Message, code+": "); msg != "" {
		b.WriteString(": " + msg)
	}
	for _, v := range e.FieldViolations {
		if line := v.Field + ": " + v.Description; !strings.Contains(e.Message, line) {
			b.WriteString("\n  " + line)
		}
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, "\n  retry after %v", e.RetryAfter)
	}
	if e.Code == connect.CodeUnauthenticated && !strings.Contains(e.Message, "token") {
		b.WriteString("\n  (set ORCHARD_TOKEN or --token)")
	}

	exit, ok := exitCodes[e.Code]
	if !ok {
		exit = exitOther
	}
	return &codedError{msg: b.String(), err: err, code: exit}
}

// verb finishes a tree of client commands: every failure goes through
// failure, and bad flags and arguments exit with the usage code.
func verb(cmd *cobra.Command) *cobra.Command {
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%v\nSee '%s --help'.", err, c.CommandPath())
	})
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageErrorf("%v\nUsage: %s", err, c.UseLine())
			}
			return nil
		}
	}
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, a []string) error { return failure(run(c, a)) }
	} else if cmd.HasSubCommands() {
		// A group: its help without a verb, a usage error for an unknown one.
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(c *cobra.Command, a []string) error {
			if len(a) == 0 {
				return c.Help()
			}
			return usageErrorf("unknown command %q for %q\nSee '%s --help'.", a[0], c.CommandPath(), c.CommandPath())
		}
	}
	switch {
	case cmd.Long != "":
		cmd.Long += "\n\n" + exitCodesHelp
	case !cmd.HasSubCommands():
		cmd.Long = cmd.Short + ".\n\n" + exitCodesHelp
	}
	for _, sub := range cmd.Commands() {
		verb(sub)
	}
	return cmd
}

// clientCommands are the client verbs.
func clientCommands() []*cobra.Command {
	cmds := []*cobra.Command{
		tokenCommand(), definitionCommand(), startCommand(), eventCommand(), cancelCommand(),
		instanceCommand(), instancesCommand(), tenantCommand(), auditCommand(),
	}
	for _, c := range cmds {
		verb(c)
	}
	return cmds
}

// run adapts a verb's body to cobra: it reads the common flags first. A
// call refused for want of a token says where to get one.
func run(body func(c *cli, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := newCLI(cmd)
		if err != nil {
			return err
		}
		err = body(c, cmd, args)
		var e *sdk.Error
		if c.token == "" && errors.As(err, &e) && e.Code == connect.CodeUnauthenticated {
			return &codedError{msg: noTokenHelp, err: err, code: exitAuth}
		}
		return err
	}
}

// noTokenHelp is the error of a client verb run without a token.
const noTokenHelp = "no token: set ORCHARD_TOKEN or --token; `orchard dev` writes its tokens to .orchard/dev/tokens/ " +
	"(export ORCHARD_TOKEN=$(cat .orchard/dev/tokens/client))"
