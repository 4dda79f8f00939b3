// Package procs runs Orchard's services as processes of this machine, as
// the fault campaign (loadtest/chaos) and the scale-out measurement
// (loadtest/scaleout) deploy them: each logs to a file of its own, dies
// with the program that started it, and is stopped with a grace; and the
// token keys and secret they share.
package procs

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

// Process is one service process, which may be started again after it
// exited; an exit nobody asked for (Kill) is counted.
type Process struct {
	Name    string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killing bool
	// unexpected counts the exits Kill did not cause.
	unexpected int
	lastExit   string
}

// New is a process that runs args, its output appended to logPath.
func New(name, logPath string, args ...string) *Process {
	return &Process{Name: name, args: args, logPath: logPath}
}

// Start starts the process.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "--- procs: start %s at %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a Ctrl-C reaches the program that
	// started it only (which then stops everything); killed if that
	// program dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
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

// Pid is the process id of the last start (0: never started).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends sig (SIGKILL: kill -9; SIGTERM: a graceful stop, SIGKILL
// after grace) and waits for the process to exit.
func (p *Process) Kill(sig syscall.Signal, grace time.Duration) {
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

// RestartIfExited starts the process again when it exited on its own, as a
// supervisor would; it reports whether it did.
func (p *Process) RestartIfExited() (bool, error) {
	p.mu.Lock()
	exited, killing := p.exited, p.killing
	p.mu.Unlock()
	if killing {
		return false, nil // killed on purpose: whoever killed it starts it again
	}
	select {
	case <-exited:
		return true, p.Start()
	default:
		return false, nil
	}
}

// Exits returns the exits nobody asked for, and the last one's status.
func (p *Process) Exits() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected, p.lastExit
}

// Keys are what the API processes of one deployment share for tokens: the
// Ed25519 key pair (files), a platform admin's token signed with it, and
// the secret that signs page and task tokens.
type Keys struct {
	PrivateFile, PublicFile string
	AdminToken              string
	Secret                  string
}

// NewKeys makes a key pair in dir, for tokens of issuer and audience, and
// a random secret.
func NewKeys(dir, issuer, audience, subject string) (Keys, error) {
	privPEM, pubPEM, err := tenancy.GenerateKeyPairPEM()
	if err != nil {
		return Keys{}, err
	}
	k := Keys{PrivateFile: filepath.Join(dir, "signing-key.pem"), PublicFile: filepath.Join(dir, "public-key.pem")}
	if err := errors.Join(os.WriteFile(k.PrivateFile, privPEM, 0o600), os.WriteFile(k.PublicFile, pubPEM, 0o644)); err != nil {
		return Keys{}, err
	}
	key, err := tenancy.ParsePrivateKeyPEM(privPEM)
	if err != nil {
		return Keys{}, err
	}
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: key, Issuer: issuer, Audience: audience})
	if err != nil {
		return Keys{}, err
	}
	if k.AdminToken, err = minter.Mint(tenancy.Claims{Subject: subject, Roles: []tenancy.Role{tenancy.RolePlatformAdmin}}, 12*time.Hour); err != nil {
		return Keys{}, err
	}
	secret := make([]byte, 32)
	_, _ = crand.Read(secret)
	k.Secret = hex.EncodeToString(secret)
	return k, nil
}

// SignalContext is the context of a program that starts processes: done at
// the first SIGINT or SIGTERM, which has the program stop them with their
// grace; a second signal ends the program at once (they die with it).
func SignalContext() context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx
}
