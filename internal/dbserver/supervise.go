package dbserver

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// supervisor runs a server and waits for its standard input to close, which
// happens when Stop is called and also when this process dies in any way
// (panic, os.Exit, SIGKILL). It then stops the server with the given signal
// and removes a throwaway directory, so no server and no files outlive the
// process that started them.
const supervisor = `
dir=$1; log=$2; sig=$3; shift 3
"$@" </dev/null >>"$dir/$log" 2>&1 &
srv=$!
while read -r _; do :; done
kill -"$sig" "$srv" 2>/dev/null
wait "$srv"
if [ -e "$dir/` + removeMarker + `" ]; then rm -rf "$dir"; fi
`

// removeMarker in a server's directory tells its supervisor to remove the
// directory when the server stops. It is written once the server is up, so
// that a failed start (retried on another port) keeps the cluster.
const removeMarker = "remove-on-exit"

// supervised is a server process under its supervisor.
type supervised struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error
	dir    string
}

// startSupervised starts args under the supervisor, logging to dir/logName,
// as cred (nil: as this process).
func startSupervised(dir, logName, stopSignal string, cred *syscall.Credential, args []string) (*supervised, error) {
	cmd := exec.Command("/bin/sh", append([]string{"-c", supervisor, "orchard-" + filepath.Base(args[0]), dir, logName, stopSignal}, args...)...)
	// Its own process group: a Ctrl-C aimed at this process reaches the
	// supervisor only through its closed standard input, so it always cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &supervised{cmd: cmd, stdin: stdin, exited: make(chan error, 1), dir: dir}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// stop asks the supervisor to stop the server, and kills the whole process
// group if that takes longer than 30 seconds.
func (p *supervised) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// server is the ready server at url; with remove, its directory goes when it stops.
func (p *supervised) server(url string, cockroach, remove bool) (*Server, error) {
	if remove {
		if err := os.WriteFile(filepath.Join(p.dir, removeMarker), nil, 0o644); err != nil {
			p.stop()
			_ = os.RemoveAll(p.dir)
			return nil, fmt.Errorf("mark %s for removal: %w", p.dir, err)
		}
	}
	return &Server{URL: url, Cockroach: cockroach, stop: func() error {
		p.stop()
		if remove {
			_ = os.RemoveAll(p.dir)
		}
		return nil
	}}, nil
}
