package testdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/testserver"
	"github.com/jackc/pgx/v5"
)

// Server is a running database server that this process started, or one it
// was pointed at.
type Server struct {
	// URL reaches the server's administrative database.
	URL string
	// Cockroach is true when the server is CockroachDB.
	Cockroach bool

	stop func() error
}

// Stop shuts the server down and, for a throwaway server, removes its files.
// It is safe to call more than once.
func (s *Server) Stop() error {
	if s.stop == nil {
		return nil
	}
	stop := s.stop
	s.stop = nil
	return stop()
}

// PostgresOptions configures StartPostgres.
type PostgresOptions struct {
	// Dir holds the cluster (Dir/data) and its log (Dir/postgres.log). Empty:
	// a temporary directory that Stop removes, as does the death of this process.
	Dir string
	// Port to bind on 127.0.0.1; 0 picks a free one.
	Port int
	// Durable keeps fsync on. Tests leave it off: they need speed, not crash safety.
	Durable bool
}

// ErrNoPostgres says that no PostgreSQL server binaries could be found.
var ErrNoPostgres = errors.New("no PostgreSQL server binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin")

// postgresBinDir finds the directory that holds initdb and postgres.
func postgresBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			dir = filepath.Dir(resolved)
		}
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first.
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNoPostgres
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// serverUser is the account PostgreSQL runs as: itself, unless this process is
// root, which PostgreSQL refuses to run as.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and no 'postgres' or 'nobody' account to run PostgreSQL as")
}

// supervisor runs postgres and waits for its standard input to close, which
// happens when Stop is called and also when this process dies in any way
// (panic, os.Exit, SIGKILL). It then stops the server and removes a
// throwaway directory, so no server and no files outlive the tests.
const supervisor = `
dir=$1; shift
"$@" </dev/null >>"$dir/postgres.log" 2>&1 &
pg=$!
while read -r _; do :; done
kill -INT "$pg" 2>/dev/null
wait "$pg"
if [ -e "$dir/` + removeMarker + `" ]; then rm -rf "$dir"; fi
`

// removeMarker in a server's directory tells its supervisor to remove the
// directory when the server stops. It is written once the server is up, so
// that a failed start (retried on another port) keeps the cluster.
const removeMarker = "remove-on-exit"

// StartPostgres starts a PostgreSQL cluster from the machine's binaries and
// waits until it accepts connections.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Server, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	remove := opts.Dir == ""
	dir := opts.Dir
	if remove {
		if dir, err = os.MkdirTemp("", "orchard-pg-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil { // the server account must reach it
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	cleanup := func() {
		if remove {
			_ = os.RemoveAll(dir)
		}
	}
	if cred != nil {
		if err := reachable(dir); err != nil {
			cleanup()
			return nil, err
		}
		if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			cleanup()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
			"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			cleanup()
			return nil, fmt.Errorf("initdb: %w\n%s", err, out)
		}
	}
	// A free port can be taken by another process before the server binds
	// it: then the server exits, or a different server answers. Try again
	// on another port.
	for attempt := 1; ; attempt++ {
		srv, err := startServer(ctx, bin, dir, data, remove, cred, opts)
		if err == nil || opts.Port != 0 || attempt == 3 {
			if err != nil {
				cleanup()
			}
			return srv, err
		}
	}
}

func startServer(ctx context.Context, bin, dir, data string, remove bool, cred *syscall.Credential, opts PostgresOptions) (*Server, error) {
	port := opts.Port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	args := []string{
		filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + dir,
		"-c", "max_connections=400",
		"-c", "shared_buffers=256MB",
		"-c", "max_pred_locks_per_transaction=256",
		// Queue tables churn: vacuum and analyze them often, or scans of
		// their index heads wade through dead entries on stale statistics.
		"-c", "autovacuum_naptime=1s",
		// Behave like CockroachDB even for statements outside the transaction helper.
		"-c", "default_transaction_isolation=serializable",
	}
	// Extra settings for a look inside, e.g.
	// ORCHARD_TESTDB_SETTINGS="shared_preload_libraries=pg_stat_statements".
	for _, kv := range strings.Fields(os.Getenv("ORCHARD_TESTDB_SETTINGS")) {
		args = append(args, "-c", kv)
	}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", supervisor, "orchard-postgres", dir}, args...)...)
	// Its own process group: a Ctrl-C aimed at the tests reaches the
	// supervisor only through its closed standard input, so it always cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	stop := func() error {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if remove {
			_ = os.RemoveAll(dir)
		}
		return nil
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	if err := waitReady(ctx, u.String(), data, exited); err != nil {
		logTail := readTail(filepath.Join(dir, "postgres.log"), 2000)
		_ = stdin.Close()
		<-exited
		return nil, fmt.Errorf("postgres did not start: %w\n%s", err, logTail)
	}
	if remove {
		if err := os.WriteFile(filepath.Join(dir, removeMarker), nil, 0o644); err != nil {
			_ = stop()
			return nil, err
		}
	}
	return &Server{URL: u.String(), stop: stop}, nil
}

// waitReady waits until the server answers, and checks that it is ours.
func waitReady(ctx context.Context, dsn, data string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lastErr error
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			var dir string
			err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
			_ = conn.Close(ctx)
			if err == nil && dir != data {
				return fmt.Errorf("another server (%s) answers on this port", dir)
			}
			if err == nil {
				return nil
			}
		}
		lastErr = err
		select {
		case <-exited:
			return errors.New("the server process exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// reachable reports, with a remedy, a directory that the server's account
// (another user than ours) cannot reach because a parent keeps others out.
func reachable(dir string) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the database runs as another user, who cannot reach %s: %s is mode %v; "+
				"choose a directory under a path others may traverse (for example /tmp) or run as a non-root user", dir, p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func chownTree(root string, uid, gid int) error {
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func readTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// StartCockroach starts a single in-memory CockroachDB node from the given
// binary with cockroach-go's testserver, which never downloads anything when
// handed a binary.
func StartCockroach(binary string) (*Server, error) {
	ts, err := testserver.NewTestServer(testserver.CockroachBinaryPathOpt(binary))
	if err != nil {
		return nil, fmt.Errorf("start cockroach from %s: %w", binary, err)
	}
	return &Server{URL: ts.PGURL().String(), Cockroach: true, stop: func() error { ts.Stop(); return nil }}, nil
}
