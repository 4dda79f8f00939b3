package dbserver

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

	"github.com/jackc/pgx/v5"
)

// PostgresOptions configures StartPostgres.
type PostgresOptions struct {
	// Dir holds the cluster (Dir/data) and its log (Dir/postgres.log). Empty:
	// a temporary directory that Stop removes, as does the death of this process.
	Dir string
	// Port to bind on 127.0.0.1; 0 picks one: with a Dir, the port the
	// cluster had last time when it is free (kept in Dir/port), so that its
	// URL stays the same across restarts; otherwise a free one.
	Port int
	// Durable keeps fsync on. Tests leave it off: they need speed, not crash safety.
	Durable bool
}

// ErrNoPostgres says that no PostgreSQL server binaries could be found.
var ErrNoPostgres = errors.New("no PostgreSQL server binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin")

// PostgresTool is the path of one of PostgreSQL's programs (pgbench, psql)
// beside the server binaries StartPostgres runs, so that a measurement
// against its server uses the client of the same release.
func PostgresTool(name string) (string, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(bin, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is not beside the PostgreSQL server binaries: %w", name, err)
	}
	return path, nil
}

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
	portFile := filepath.Join(dir, "port")
	last := 0
	if !remove {
		if b, err := os.ReadFile(portFile); err == nil {
			last, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	// A free port can be taken by another process before the server binds
	// it: then the server exits, or a different server answers. Try again
	// on another port.
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 && attempt == 1 && last > 0 {
			port = last
		}
		if port == 0 {
			if port, err = FreePort(); err != nil {
				cleanup()
				return nil, err
			}
		}
		srv, err := startServer(ctx, bin, dir, data, port, remove, cred, opts)
		if err == nil && !remove {
			err = os.WriteFile(portFile, []byte(strconv.Itoa(port)+"\n"), 0o644)
			if err != nil {
				_ = srv.Stop()
			}
		}
		if err == nil || opts.Port != 0 || attempt == 3 {
			if err != nil {
				cleanup()
			}
			return srv, err
		}
	}
}

// autovacuumNaptime is how often autovacuum looks at each database.
const autovacuumNaptime = "5s"

func startServer(ctx context.Context, bin, dir, data string, port int, remove bool, cred *syscall.Credential, opts PostgresOptions) (*Server, error) {
	args := []string{
		filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + dir,
		"-c", "max_connections=400",
		"-c", "shared_buffers=" + sharedBuffers(memTotal()),
		"-c", "max_pred_locks_per_transaction=256",
		// Queue tables churn: vacuum and analyze them often, or scans of
		// their index heads wade through dead entries on stale statistics.
		// Not every second: each vacuum or analyze that changes a table's
		// size in pg_class discards every connection's cached plans of the
		// statements on it, and the ack's statements take milliseconds to
		// plan again.
		"-c", "autovacuum_naptime=" + autovacuumNaptime,
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
	proc, err := startSupervised(dir, "postgres.log", "INT", cred, args)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	if err := waitReady(ctx, u.String(), data, proc.exited); err != nil {
		logTail := readTail(filepath.Join(dir, "postgres.log"), 2000)
		proc.stop()
		return nil, fmt.Errorf("postgres did not start: %w\n%s", err, logTail)
	}
	return proc.server(u.String(), false, remove)
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

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
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

// sharedBuffers sizes PostgreSQL's buffer cache from the machine's memory:
// a sixteenth of it, between 128 MB and 1 GB. PostgreSQL's own default (128
// MB) leaves the indexes of a few million instances outside it, and every
// page the janitor's deletes and the turns' lookups then find only in the
// OS's cache costs a copy and a buffer eviction; the cap keeps an embedded
// database beside the processes it serves. Unknown memory: the floor.
func sharedBuffers(mem int64) string {
	const mb = 1 << 20
	return strconv.FormatInt(min(max(mem/16, 128*mb), 1024*mb)/mb, 10) + "MB"
}

// memTotal is the machine's memory in bytes from /proc/meminfo; 0 where
// there is none.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
