package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one service process of the campaign, started again after
// each kill: its output goes to a log file, it dies with the campaign
// (Pdeathsig), and an exit nobody asked for is counted.
type process struct {
	name    string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killing bool
	// unexpected counts the exits the campaign did not cause.
	unexpected int
	lastExit   string
}

func newProcess(name, logPath string, args ...string) *process {
	return &process{name: name, args: args, logPath: logPath}
}

// start starts the process.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "--- chaos: start %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a Ctrl-C reaches the campaign only
	// (which then stops everything); killed if the campaign dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.killing = cmd, exited, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.killing {
			p.unexpected++
			p.lastExit = fmt.Sprint(err)
		}
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// kill sends sig (SIGKILL: kill -9; SIGTERM: a graceful stop, SIGKILL
// after grace) and waits for the process to exit.
func (p *process) kill(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.killing = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// restartIfExited starts the process again when it exited on its own, as
// a supervisor would; it reports whether it did.
func (p *process) restartIfExited() (bool, error) {
	p.mu.Lock()
	exited, killing := p.exited, p.killing
	p.mu.Unlock()
	if killing {
		return false, nil // a fault's kill: the fault starts it again
	}
	select {
	case <-exited:
		return true, p.start()
	default:
		return false, nil
	}
}

// exits returns the exits nobody asked for, and the last one's status.
func (p *process) exits() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected, p.lastExit
}

// errNoProcess: a fault aimed at a kind of process the campaign runs none of.
var errNoProcess = errors.New("no such process")
