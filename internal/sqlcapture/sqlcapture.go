// Package sqlcapture records every distinct statement our code sends through
// a pgx connection, so that tools/crdbcheck can check the statements built at
// run time with CockroachDB's parser (`make crdb-check`). internal/testdb
// installs it on the pools and migration connections it hands out when
// EnvCapture is set; CI sets it for its one `make test` run. It never changes
// what is sent, and it is never installed outside tests.
//
// Each process appends JSON lines (Statement) to its own file in the
// directory, one per distinct statement text, isolation level and calling
// function. Left out, because they are not our product's SQL:
//   - statements sent from test files: tests may stage database-specific
//     situations (reading PostgreSQL's lock table, say) and branch on the server;
//   - River's statements (any call that comes through github.com/riverqueue/):
//     River and its migrations are PostgreSQL-only by design and run through
//     River's own driver;
//   - the PostgreSQL transport of hints (pkg/notify/postgres.go: LISTEN and
//     pg_notify): it is PostgreSQL-only by design, refused on CockroachDB
//     (`--hints postgres`), and nothing correct depends on a hint;
//   - testdb's administrative statements (CREATE DATABASE ... TEMPLATE, DROP
//     DATABASE ... WITH (FORCE)), sent on connections it does not trace.
package sqlcapture

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
)

// EnvCapture names the environment variable that, set to a directory, turns
// the capture on (see Install).
const EnvCapture = "ORCHARD_SQL_CAPTURE"

// Statement is one line of a capture file. tools/crdbcheck reads the same
// format (its capturedStatement): change both together.
type Statement struct {
	SQL string `json:"sql"`
	// Isolation is the level named by the BEGIN of the transaction the
	// statement ran in ("serializable", "read committed", ...), "default"
	// for a BEGIN that names none, and "" outside a transaction block: then
	// the statement is its own transaction at the session's default,
	// SERIALIZABLE in our tests as on CockroachDB.
	Isolation string `json:"isolation"`
	// Caller lists the innermost functions of ours that sent it, innermost
	// first, with file and line.
	Caller []string `json:"caller"`
}

// Tracer is a pgx QueryTracer, BatchTracer and CopyFromTracer that records
// statements into a directory.
type Tracer struct {
	dir string

	mu     sync.Mutex
	file   *os.File
	err    error               // the first error writing the file; later statements are dropped
	seen   map[captureKey]bool // statements already written (or left out)
	stacks map[stackKey]bool   // statements and stacks already looked at
	iso    map[*pgx.Conn]string
}

type captureKey struct {
	sql, isolation string
	caller         uintptr // the first frame outside pgx
}

type stackKey struct {
	sql, isolation string
	pcs            [16]uintptr // enough to reach the first frame outside pgx
}

// New returns a Tracer that writes into dir, which must exist.
func New(dir string) *Tracer {
	return &Tracer{dir: dir, seen: map[captureKey]bool{}, stacks: map[stackKey]bool{}, iso: map[*pgx.Conn]string{}}
}

// fromEnv is the process's Tracer when EnvCapture is set, else nil.
var fromEnv = sync.OnceValue(func() *Tracer {
	if dir := os.Getenv(EnvCapture); dir != "" {
		return New(dir)
	}
	return nil
})

// Install adds the process's Tracer to a connection configuration when
// EnvCapture is set, and does nothing otherwise. A tracer already configured
// keeps running beside it.
func Install(cfg *pgx.ConnConfig) {
	if t := fromEnv(); t != nil {
		t.Install(cfg)
	}
}

// Install adds t to a connection configuration.
func (t *Tracer) Install(cfg *pgx.ConnConfig) {
	if cfg.Tracer == nil {
		cfg.Tracer = t
		return
	}
	cfg.Tracer = multitracer.New(t, cfg.Tracer)
}

// TraceQueryStart, TraceBatchStart and TraceCopyFromStart record; the other
// methods complete pgx's tracer interfaces.

func (c *Tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	iso := c.advance(conn, c.current(conn), data.SQL)
	c.mu.Unlock()
	c.record(data.SQL, iso)
	return ctx
}

func (c *Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records the statements of a batch in order, following the
// BEGIN and COMMIT it may carry (a pipelined transaction).
func (c *Tracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if data.Batch == nil {
		return ctx
	}
	c.mu.Lock()
	iso := c.current(conn)
	isos := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		iso = c.advance(conn, iso, q.SQL)
		isos[i] = iso
	}
	c.mu.Unlock()
	for i, q := range data.Batch.QueuedQueries {
		c.record(q.SQL, isos[i])
	}
	return ctx
}

func (c *Tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *Tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TraceCopyFromStart records the COPY statement that CopyFrom sends.
func (c *Tracer) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	cols := make([]string, len(data.ColumnNames))
	for i, col := range data.ColumnNames {
		cols[i] = pgx.Identifier{col}.Sanitize()
	}
	c.mu.Lock()
	iso := c.current(conn)
	c.mu.Unlock()
	c.record(fmt.Sprintf("COPY %s (%s) FROM STDIN", data.TableName.Sanitize(), strings.Join(cols, ", ")), iso)
	return ctx
}

func (c *Tracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// current returns the isolation level of the transaction open on conn, ""
// when none is. The caller holds c.mu.
func (c *Tracer) current(conn *pgx.Conn) string {
	iso, inTx := c.iso[conn]
	if inTx && conn.PgConn().TxStatus() == 'I' {
		// The transaction ended without a COMMIT or ROLLBACK seen here (a
		// failed batch): the next statement is on its own.
		delete(c.iso, conn)
		iso = ""
	}
	return iso
}

// advance returns the isolation level that sql runs at, given the level of
// the transaction open on conn before it (iso), and keeps conn's state. The
// caller holds c.mu.
func (c *Tracer) advance(conn *pgx.Conn, iso, sql string) string {
	// Only transaction control matters, and it is told by the first word:
	// look no further into other statements (this runs for every one).
	head := strings.TrimLeft(sql, " \t\r\n")
	word := head
	if i := strings.IndexAny(head, " \t\r\n;"); i >= 0 {
		word = head[:i]
	}
	switch {
	case strings.EqualFold(word, "begin") || strings.EqualFold(word, "start"):
		level := "default"
		text := " " + strings.Join(strings.Fields(strings.ToLower(head)), " ") + " "
		for _, l := range []string{"serializable", "repeatable read", "read committed", "read uncommitted"} {
			if strings.Contains(text, " isolation level "+l+" ") {
				level = l
			}
		}
		c.iso[conn] = level
		return level
	case strings.EqualFold(word, "commit") || strings.EqualFold(word, "end") || strings.EqualFold(word, "abort"):
		delete(c.iso, conn)
	case strings.EqualFold(word, "rollback"):
		if fields := strings.Fields(head); len(fields) == 1 || !strings.EqualFold(fields[1], "to") {
			delete(c.iso, conn)
		}
	}
	return iso
}

// record writes sql to the capture file unless it was written already or
// is left out (see the package comment).
func (c *Tracer) record(sql, iso string) {
	// Statements repeat from the same stacks: look the raw stack up before
	// paying for its symbols.
	stack := stackKey{sql: sql, isolation: iso}
	n := runtime.Callers(3, stack.pcs[:])
	c.mu.Lock()
	done := c.stacks[stack]
	c.stacks[stack] = true
	c.mu.Unlock()
	if done {
		return
	}
	frames := runtime.CallersFrames(stack.pcs[:n])
	var (
		first  uintptr
		caller []string
		test   bool
	)
	for {
		f, more := frames.Next()
		switch {
		case strings.HasPrefix(f.Function, "github.com/riverqueue/"):
			return // River's own SQL: see the package comment
		case strings.HasSuffix(f.File, "/pkg/notify/postgres.go"):
			return // PostgreSQL's hint transport: see the package comment
		case first == 0 && (strings.HasPrefix(f.Function, "github.com/jackc/") ||
			strings.HasPrefix(f.Function, "github.com/orchardhq/orchard/internal/sqlcapture.")):
			// pgx (and its multitracer) and this package
		case first == 0:
			first = f.PC
			test = strings.HasSuffix(f.File, "_test.go")
			fallthrough
		default:
			if len(caller) < 6 && strings.HasPrefix(f.Function, "github.com/orchardhq/") {
				caller = append(caller, fmt.Sprintf("%s %s:%d", f.Function, filepath.Base(f.File), f.Line))
			}
		}
		if !more {
			break
		}
	}
	key := captureKey{sql: sql, isolation: iso, caller: first}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[key] || c.err != nil {
		return
	}
	c.seen[key] = true
	if test {
		return
	}
	line, err := json.Marshal(Statement{SQL: sql, Isolation: iso, Caller: caller})
	if err != nil {
		c.err = err
		return
	}
	if c.file == nil {
		name := fmt.Sprintf("%s-%d.jsonl", filepath.Base(os.Args[0]), os.Getpid())
		if c.file, c.err = os.OpenFile(filepath.Join(c.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); c.err != nil {
			fmt.Fprintf(os.Stderr, "sqlcapture: %s: %v\n", EnvCapture, c.err)
			return
		}
	}
	// One write per line, straight away: test binaries end in os.Exit, which
	// would lose anything buffered.
	if _, c.err = c.file.Write(append(line, '\n')); c.err != nil {
		fmt.Fprintf(os.Stderr, "sqlcapture: %s: %v\n", EnvCapture, c.err)
	}
}
