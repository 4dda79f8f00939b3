// Command smoke rehearses Orchard's production topology on this machine
// (`make deploy-smoke`): it renders the Helm chart, starts a database, runs
// the migration Job's `orchard migrate` twice at once, then the api, two
// dispatchers and the janitor as separate processes configured only by the
// environment, files and arguments the chart gives their containers, runs
// orchestrations through the API, sends SIGTERM to everything with
// orchestrations in flight, checks that every process exits cleanly within
// its grace period, and that a new set of processes finishes every
// orchestration with the right output: nothing lost.
//
// What stands in for Kubernetes: each process gets its own loopback ports
// for the addresses the chart sets (a pod's own IP), the files of its
// volume mounts under a directory of its own, and the Secrets an operator
// would create (the database URL) from this program.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sync/errgroup"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

const (
	helmModule  = "helm.sh/helm/v3/cmd/helm@v3.22.0"
	kubeVersion = "1.30.14"
	chartDir    = "deploy/helm/orchard"
	issuer      = "orchard-smoke"
	audience    = "orchard"
	tenant      = "smoke"
	// Orchestrations run before the SIGTERM, and left in flight by it.
	finishedFirst, inFlight = 10, 20
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "deploy-smoke: FAILED:", err)
		os.Exit(1)
	}
	fmt.Printf("deploy-smoke: ok in %s\n", time.Since(start).Round(100*time.Millisecond))
}

func step(format string, args ...any) {
	fmt.Printf("deploy-smoke: "+format+"\n", args...)
}

func run(ctx context.Context) error {
	work, err := os.MkdirTemp("", "orchard-smoke-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The database may run as another user (postgres, when this runs as root).
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}

	bin := filepath.Join(work, "orchard")
	t := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin,
		"-ldflags", "-X main.version=smoke -X main.buildDate="+time.Now().UTC().Format(time.RFC3339), "./cmd/orchard")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	step("built orchard (%s)", time.Since(t).Round(100*time.Millisecond))

	t = time.Now()
	db, err := dbserver.StartPostgres(ctx, dbserver.PostgresOptions{Dir: filepath.Join(work, "db")})
	if err != nil {
		return err
	}
	defer db.Stop()
	step("started PostgreSQL (%s)", time.Since(t).Round(100*time.Millisecond))

	privPEM, pubPEM, err := tenancy.GenerateKeyPairPEM()
	if err != nil {
		return err
	}
	objs, err := render(ctx, work, string(pubPEM))
	if err != nil {
		return err
	}
	// The Secrets an operator creates before installing.
	k := &cluster{objs: objs, work: work, bin: bin, secrets: map[string]map[string]string{
		"orchard-db": {"url": db.URL},
	}}
	for _, o := range objs {
		if o.Kind == "Secret" {
			data := map[string]string{}
			for key, v := range o.Data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return err
				}
				data[key] = string(b)
			}
			k.secrets[o.Metadata.Name] = data
		}
	}

	// The migration hook, twice at once (two upgrades racing).
	t = time.Now()
	job, err := k.workload("Job", "smoke-orchard-migrate")
	if err != nil {
		return err
	}
	var g errgroup.Group
	for i := range 2 {
		g.Go(func() error {
			p, err := k.start(job, fmt.Sprintf("migrate-%d", i))
			if err != nil {
				return err
			}
			if err := p.wait(5 * time.Minute); err != nil {
				return err
			}
			if p.exit != 0 {
				return fmt.Errorf("%s exited %d:\n%s", p.name, p.exit, p.tail())
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	step("two concurrent migrations succeeded (%s)", time.Since(t).Round(100*time.Millisecond))

	api, err := k.workload("Deployment", "smoke-orchard-api")
	if err != nil {
		return err
	}
	dispatcher, err := k.workload("Deployment", "smoke-orchard-dispatcher")
	if err != nil {
		return err
	}
	janitor, err := k.workload("Deployment", "smoke-orchard-janitor")
	if err != nil {
		return err
	}
	workloads := []*workload{api, dispatcher, dispatcher}
	if hasCommand(bin, "janitor") {
		workloads = append(workloads, janitor)
	} else {
		step("the janitor is NOT rehearsed: this orchard has no janitor command yet")
	}
	t = time.Now()
	procs, err := k.startAll(ctx, workloads, "1")
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	step("%d processes ready (%s)", len(procs), time.Since(t).Round(100*time.Millisecond))
	if err := checkJSONLogs(procs[0]); err != nil {
		return err
	}

	// Orchestrations through the API.
	base := "http://" + procs[0].env["ORCHARD_API_ADDR"]
	key, err := tenancy.ParsePrivateKeyPEM(privPEM)
	if err != nil {
		return err
	}
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: key, Issuer: issuer, Audience: audience, MaxTTL: time.Hour})
	if err != nil {
		return err
	}
	token := func(c tenancy.Claims) string {
		s, err := minter.Mint(c, time.Hour)
		if err != nil {
			panic(err)
		}
		return s
	}
	admin := sdk.NewAdminClient(base, sdk.WithToken(token(tenancy.Claims{Subject: "smoke-admin", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}})))
	if _, err := admin.CreateTenant(ctx, tenant); err != nil {
		return fmt.Errorf("create tenant: %w", err)
	}
	client := sdk.NewClient(base, sdk.WithToken(token(tenancy.Claims{Tenant: tenant, Subject: "smoke-client",
		Roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleTenantAdmin}})))
	def := `{"name":"smoke","version":"1","steps":[
		{"id":"a","activity":{"name":"double","task_queue":"smoke","input":"${ input }"}},
		{"timer":"${ input % 2 == 0 ? '2s' : '3s' }"}],
		"output":"${ steps.a.output }"}`
	if _, err := client.RegisterDefinition(ctx, []byte(def)); err != nil {
		return fmt.Errorf("register definition: %w", err)
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	worker := sdk.NewWorker(sdk.NewClient(base, sdk.WithToken(token(tenancy.Claims{Tenant: tenant, Subject: "smoke-worker",
		Roles: []tenancy.Role{tenancy.RoleWorker}}))), "smoke", sdk.WithLogger(slog.New(slog.DiscardHandler)))
	sdk.Register(worker, "double", func(_ context.Context, n int) (int, error) { return 2 * n, nil })
	go func() { _ = worker.Run(workerCtx) }()

	t = time.Now()
	ids := map[string]int{}
	for n := range finishedFirst {
		id, err := client.Start(ctx, "smoke", n, sdk.WithInstanceID(fmt.Sprintf("first-%d", n)))
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		ids[id] = n
	}
	if err := waitAll(ctx, client, ids); err != nil {
		return err
	}
	step("%d orchestrations completed (%s)", finishedFirst, time.Since(t).Round(100*time.Millisecond))
	t = time.Now()
	if err := checkHints(ctx, client, procs); err != nil {
		return err
	}
	step("hints went between the api and the dispatchers (%s)", time.Since(t).Round(100*time.Millisecond))

	// In flight: their timers run when the SIGTERM comes.
	flying := map[string]int{}
	for n := range inFlight {
		id, err := client.Start(ctx, "smoke", n, sdk.WithInstanceID(fmt.Sprintf("flying-%d", n)))
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		flying[id] = n
	}
	if err := terminate(procs); err != nil {
		return err
	}
	stopWorker()

	// A new set of processes finishes everything.
	t = time.Now()
	procs, err = k.startAll(ctx, workloads, "2")
	if err != nil {
		return err
	}
	base = "http://" + procs[0].env["ORCHARD_API_ADDR"]
	client = sdk.NewClient(base, sdk.WithToken(token(tenancy.Claims{Tenant: tenant, Subject: "smoke-client", Roles: []tenancy.Role{tenancy.RoleClient}})))
	worker = sdk.NewWorker(sdk.NewClient(base, sdk.WithToken(token(tenancy.Claims{Tenant: tenant, Subject: "smoke-worker",
		Roles: []tenancy.Role{tenancy.RoleWorker}}))), "smoke", sdk.WithLogger(slog.New(slog.DiscardHandler)))
	sdk.Register(worker, "double", func(_ context.Context, n int) (int, error) { return 2 * n, nil })
	workerCtx, stopWorker = context.WithCancel(ctx)
	defer stopWorker()
	go func() { _ = worker.Run(workerCtx) }()
	if err := waitAll(ctx, client, flying); err != nil {
		return err
	}
	step("after the restart, the %d orchestrations in flight at SIGTERM completed (%s)", inFlight, time.Since(t).Round(100*time.Millisecond))
	stopWorker()
	return terminate(procs)
}

// checkHints waits until the api and a dispatcher have each taken hints
// from the other processes (the chart's --hints members), as their
// /metrics count them. The processes learn of each other at their
// heartbeats, so an orchestration at a time runs until then.
func checkHints(ctx context.Context, client *sdk.Client, procs []*process) error {
	deadline := time.Now().Add(time.Minute)
	for n := 0; ; n++ {
		var api, dispatchers int
		for _, p := range procs {
			got, err := hintsReceived(ctx, p)
			if err != nil {
				return err
			}
			switch {
			case p.w.name == "smoke-orchard-api":
				api += got
			case p.w.name == "smoke-orchard-dispatcher":
				dispatchers += got
			}
		}
		if api > 0 && dispatchers > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hints taken after a minute: %d by the api, %d by the dispatchers; want some by each", api, dispatchers)
		}
		id, err := client.Start(ctx, "smoke", n, sdk.WithInstanceID(fmt.Sprintf("hinted-%d", n)))
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		if err := waitAll(ctx, client, map[string]int{id: n}); err != nil {
			return err
		}
	}
}

var hintsReceivedRE = regexp.MustCompile(`(?m)^orchard_hints_total\{[^}]*outcome="received"[^}]*\} (\d+)$`)

// hintsReceived is the count of hints p took from the others.
func hintsReceived(ctx context.Context, p *process) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.env["ORCHARD_OPS_ADDR"]+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s /metrics: %w", p.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s /metrics: %w", p.name, err)
	}
	m := hintsReceivedRE.FindSubmatch(body)
	if m == nil {
		return 0, nil
	}
	return strconv.Atoi(string(m[1]))
}

// waitAll waits for every instance to complete with twice its input.
func waitAll(ctx context.Context, client *sdk.Client, ids map[string]int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for id, n := range ids {
		in, err := client.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", id, err)
		}
		if in.Status != sdk.StatusCompleted || string(in.Output) != fmt.Sprint(2*n) {
			return fmt.Errorf("%s: %s with output %s (error %q), want Completed with %d", id, in.Status, in.Output, in.Error, 2*n)
		}
	}
	return nil
}

// terminate sends SIGTERM to every process and checks that each exits 0
// within its grace period.
func terminate(procs []*process) error {
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	var errs []error
	for _, p := range procs {
		if err := p.wait(p.w.grace); err != nil {
			errs = append(errs, err)
			continue
		}
		if p.exit != 0 {
			errs = append(errs, fmt.Errorf("%s exited %d after SIGTERM:\n%s", p.name, p.exit, p.tail()))
			continue
		}
		step("%s exited cleanly %s after SIGTERM (grace %s)", p.name, p.stoppedIn.Round(10*time.Millisecond), p.w.grace)
	}
	return errors.Join(errs...)
}

// checkJSONLogs checks that the chart's log format reached the process.
func checkJSONLogs(p *process) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for line := range strings.Lines(p.out.String()) {
		var rec map[string]any
		if strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				return fmt.Errorf("%s: a log line is not JSON: %s", p.name, line)
			}
			if _, ok := rec["level"]; ok {
				return nil
			}
		}
	}
	return fmt.Errorf("%s wrote no JSON log line:\n%s", p.name, p.out.String())
}

func hasCommand(bin, name string) bool {
	return exec.Command(bin, name, "--help").Run() == nil
}

// object is the part of a rendered manifest the rehearsal reads.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	Containers                    []struct {
		Args    []string `yaml:"args"`
		EnvFrom []struct {
			ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
			SecretRef    *struct{ Name string } `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef    *struct{ Name, Key string } `yaml:"secretKeyRef"`
				ConfigMapKeyRef *struct{ Name, Key string } `yaml:"configMapKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
	Volumes []struct {
		Name      string                 `yaml:"name"`
		ConfigMap *struct{ Name string } `yaml:"configMap"`
		Secret    *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
		EmptyDir any `yaml:"emptyDir"`
	} `yaml:"volumes"`
}

// render runs helm template with the rehearsal's values.
func render(ctx context.Context, work, publicKeys string) ([]object, error) {
	values := map[string]any{
		"database": map[string]any{"urlSecret": map[string]any{"name": "orchard-db", "key": "url"}, "tls": map[string]any{"enabled": false}},
		"jwt":      map[string]any{"issuer": issuer, "audience": audience, "publicKeys": publicKeys},
		"log":      map[string]any{"format": "json", "level": "info"},
		// A rehearsal need not wait for load balancers.
		"api": map[string]any{"shutdownDelaySeconds": 1},
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(work, "values.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "run", helmModule, "template", "smoke", chartDir, "-f", file, "--kube-version", kubeVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w\n%s", err, stderr.String())
	}
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o object
		if err := dec.Decode(&o); err != nil {
			if err.Error() == "EOF" {
				return objs, nil
			}
			return nil, err
		}
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
}

// cluster stands in for Kubernetes: the rendered objects and the Secrets.
type cluster struct {
	objs    []object
	work    string
	bin     string
	secrets map[string]map[string]string
}

// workload is what a process of a Deployment or Job is started with.
type workload struct {
	name  string
	spec  podSpec
	grace time.Duration
}

func (k *cluster) workload(kind, name string) (*workload, error) {
	for _, o := range k.objs {
		if o.Kind == kind && o.Metadata.Name == name {
			grace := 30 * time.Second // Kubernetes' default
			if g := o.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * time.Second
			}
			return &workload{name: name, spec: o.Spec.Template.Spec, grace: grace}, nil
		}
	}
	return nil, fmt.Errorf("the chart renders no %s %s", kind, name)
}

func (k *cluster) configMap(name string) (map[string]string, error) {
	for _, o := range k.objs {
		if o.Kind == "ConfigMap" && o.Metadata.Name == name {
			return o.Data, nil
		}
	}
	return nil, fmt.Errorf("no ConfigMap %s", name)
}

func (k *cluster) secret(name string) (map[string]string, error) {
	s, ok := k.secrets[name]
	if !ok {
		return nil, fmt.Errorf("no Secret %s", name)
	}
	return s, nil
}

// process is one running container.
type process struct {
	name      string
	w         *workload
	env       map[string]string
	cmd       *exec.Cmd
	mu        sync.Mutex
	out       bytes.Buffer
	done      chan struct{}
	exit      int
	termAt    time.Time
	stoppedIn time.Duration
}

// start starts a process of w the way the kubelet would start its
// container: the environment, the mounted files and the arguments of the
// pod spec, nothing else.
func (k *cluster) start(w *workload, name string) (*process, error) {
	c := w.spec.Containers[0]
	root := filepath.Join(k.work, "pods", name)
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		var data map[string]string
		var err error
		switch {
		case from.ConfigMapRef != nil:
			data, err = k.configMap(from.ConfigMapRef.Name)
		case from.SecretRef != nil:
			data, err = k.secret(from.SecretRef.Name)
		}
		if err != nil {
			return nil, err
		}
		for key, v := range data {
			env[key] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			s, err := k.secret(e.ValueFrom.SecretKeyRef.Name)
			if err != nil {
				return nil, err
			}
			env[e.Name] = s[e.ValueFrom.SecretKeyRef.Key]
		case e.ValueFrom.ConfigMapKeyRef != nil:
			m, err := k.configMap(e.ValueFrom.ConfigMapKeyRef.Name)
			if err != nil {
				return nil, err
			}
			env[e.Name] = m[e.ValueFrom.ConfigMapKeyRef.Key]
		}
	}
	// Volume mounts: the files under the process's own directory, and the
	// paths in the environment pointed there.
	for _, m := range c.VolumeMounts {
		local := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, err
		}
		for _, v := range w.spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			var files map[string]string
			var err error
			switch {
			case v.ConfigMap != nil:
				files, err = k.configMap(v.ConfigMap.Name)
			case v.Secret != nil:
				files, err = k.secret(v.Secret.SecretName)
			}
			if err != nil {
				return nil, err
			}
			for f, content := range files {
				if err := os.WriteFile(filepath.Join(local, f), []byte(content), 0o600); err != nil {
					return nil, err
				}
			}
		}
		for key, v := range env {
			if strings.HasPrefix(v, m.MountPath+"/") {
				env[key] = filepath.Join(local, strings.TrimPrefix(v, m.MountPath))
			}
		}
	}
	// Each pod has its own IP: here, its own loopback ports.
	for key, v := range env {
		if strings.HasSuffix(key, "_ADDR") && strings.HasPrefix(v, ":") {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			env[key] = addr
		}
	}
	cmd := exec.Command(k.bin, c.Args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root}
	for key, v := range env {
		cmd.Env = append(cmd.Env, key+"="+v)
	}
	slices.Sort(cmd.Env)
	p := &process{name: name, w: w, env: env, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &lockedWriter{p}, &lockedWriter{p}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		err := cmd.Wait()
		p.stoppedIn = time.Since(p.termAt)
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			p.exit = exit.ExitCode()
		} else if err != nil {
			p.exit = -1
		}
		close(p.done)
	}()
	return p, nil
}

// startAll starts a process per workload and waits until each is ready.
func (k *cluster) startAll(ctx context.Context, ws []*workload, generation string) ([]*process, error) {
	var procs []*process
	for i, w := range ws {
		p, err := k.start(w, fmt.Sprintf("%s-%s-%d", strings.TrimPrefix(w.name, "smoke-orchard-"), generation, i))
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.waitReady(ctx, time.Minute); err != nil {
			for _, q := range procs {
				q.kill()
			}
			return nil, err
		}
	}
	return procs, nil
}

// waitReady polls the readiness probe the chart configures (/readyz on
// the ops port) until it answers 200.
func (p *process) waitReady(ctx context.Context, timeout time.Duration) error {
	url := "http://" + p.env["ORCHARD_OPS_ADDR"] + "/readyz"
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited %d before it was ready:\n%s", p.name, p.exit, p.tail())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within %s:\n%s", p.name, timeout, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *process) signal(sig os.Signal) {
	p.termAt = time.Now()
	_ = p.cmd.Process.Signal(sig)
}

// wait waits for the process to exit, at most timeout (its grace period:
// then the kubelet would kill it).
func (p *process) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not exit within %s:\n%s", p.name, timeout, p.tail())
	}
}

func (p *process) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	s := bufio.NewScanner(bytes.NewReader(p.out.Bytes()))
	for s.Scan() {
		lines = append(lines, "    "+s.Text())
	}
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

type lockedWriter struct{ p *process }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
