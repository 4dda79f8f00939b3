package dbserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartCockroach starts a single in-memory CockroachDB node from the given
// binary, listening on free loopback ports, and waits until it accepts SQL
// connections. Its data and its directory (logs, the URL file) go away when
// it stops, as when this process dies.
func StartCockroach(ctx context.Context, binary string) (*Server, error) {
	dir, err := os.MkdirTemp("", "orchard-crdb-")
	if err != nil {
		return nil, err
	}
	urlFile := filepath.Join(dir, "sql-url")
	args := []string{
		binary, "start-single-node", "--insecure",
		"--store=type=mem,size=1GiB",
		"--listen-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0",
		"--listening-url-file=" + urlFile,
		"--log-dir=" + dir,
	}
	proc, err := startSupervised(dir, "cockroach.log", "TERM", nil, args)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start cockroach from %s: %w", binary, err)
	}
	url, err := waitCockroach(ctx, urlFile, proc.exited)
	if err != nil {
		logTail := readTail(filepath.Join(dir, "cockroach.log"), 2000)
		proc.stop()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("cockroach did not start: %w\n%s", err, logTail)
	}
	return proc.server(url, true, true)
}

// waitCockroach waits for the node to write its SQL URL (it does once it
// serves) and to answer a query there.
func waitCockroach(ctx context.Context, urlFile string, exited <-chan error) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lastErr error
	for {
		b, err := os.ReadFile(urlFile)
		if err == nil && len(strings.TrimSpace(string(b))) > 0 {
			url := strings.TrimSpace(string(b))
			var conn *pgx.Conn
			if conn, err = pgx.Connect(ctx, url); err == nil {
				err = conn.Ping(ctx)
				_ = conn.Close(ctx)
				if err == nil {
					return url, nil
				}
			}
		}
		lastErr = err
		select {
		case <-exited:
			return "", errors.New("the server process exited")
		case <-ctx.Done():
			return "", fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
