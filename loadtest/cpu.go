package loadtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUReport is the server's CPU over the measured window: the processes
// named to the generator and their descendants, split into the database's
// (processes called postgres or cockroach) and Orchard's (the rest); and the
// generator's own, which shares the machine when it runs beside the server.
type CPUReport struct {
	Pids                            []int   `json:"pids"`
	OrchardCores                    float64 `json:"orchard_cores"`
	DatabaseCores                   float64 `json:"database_cores"`
	GeneratorCores                  float64 `json:"generator_cores"`
	OrchardMillisPerOrchestration   float64 `json:"orchard_ms_per_orchestration"`
	DatabaseMillisPerOrchestration  float64 `json:"database_ms_per_orchestration"`
	GeneratorMillisPerOrchestration float64 `json:"generator_ms_per_orchestration"`
	// The generator's machine over the window: its CPUs, the cores left
	// idle, and the cores its hypervisor gave to other guests (steal). Time
	// stolen slows every process here alike, so a sitting with much of it
	// reads worse than the code is.
	MachineCores int     `json:"machine_cores,omitempty"`
	IdleCores    float64 `json:"idle_cores"`
	StolenCores  float64 `json:"stolen_cores"`
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times:
// 100 on every Linux the generator is meant for.
const clockTicks = 100

// cpuSample is the CPU time, so far, of the process trees under some
// roots (Orchard's and the database's), of the generator, and of the
// machine.
type cpuSample struct {
	orchard, database, generator time.Duration
	machine                      machineTicks
}

// machineTicks is the machine's CPU time so far, all its CPUs together, in
// ticks: in all, idle (waiting for I/O included), and stolen.
type machineTicks struct {
	cpus                int
	total, idle, stolen int64
}

// parseMachineStat reads /proc/stat: the times of its "cpu" line (user,
// nice, system, idle, iowait, irq, softirq, steal; the guest times after
// them are within user and nice) and the number of its "cpuN" lines.
func parseMachineStat(data string) (machineTicks, error) {
	var m machineTicks
	found := false
	for line := range strings.Lines(data) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || !strings.HasPrefix(f[0], "cpu"):
		case f[0] != "cpu":
			m.cpus++
		case len(f) < 9:
			return machineTicks{}, fmt.Errorf("short cpu line in /proc/stat: %q", line)
		default:
			found = true
			for i, v := range f[1:9] {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return machineTicks{}, fmt.Errorf("cpu line in /proc/stat: %w", err)
				}
				m.total += n
				switch i {
				case 3, 4:
					m.idle += n
				case 7:
					m.stolen += n
				}
			}
		}
	}
	if !found || m.cpus == 0 {
		return machineTicks{}, fmt.Errorf("no cpu lines in /proc/stat")
	}
	return m, nil
}

// procStat is what the generator reads of /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	comm      string
	// cpu is the process's user and system time, with that of its
	// children that it has waited for (exited database backends).
	cpu time.Duration
}

// parseProcStat reads one /proc/<pid>/stat line. The command name is in
// parentheses and may hold spaces and parentheses: it ends at the last ')'.
func parseProcStat(line string) (procStat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("stat line without a command: %q", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return procStat{}, err
	}
	// After the command: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(line[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("short stat line: %q", line)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, err
	}
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return procStat{}, err
		}
		ticks += n
	}
	return procStat{pid: pid, ppid: ppid, comm: line[open+1 : end], cpu: time.Duration(ticks) * time.Second / clockTicks}, nil
}

// ProcessCPU is the user and system time process pid has used so far,
// with that of the children it has waited for.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	ps, err := parseProcStat(string(bytes.TrimSpace(data)))
	return ps.cpu, err
}

// sumTrees sums the CPU of the processes under roots (roots included), and
// the generator's (process self), which is never counted as the server's.
func sumTrees(procs []procStat, roots []int, self int) cpuSample {
	children := map[int][]procStat{}
	byPID := map[int]procStat{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
		byPID[p.pid] = p
	}
	var s cpuSample
	seen := map[int]bool{}
	var walk func(p procStat)
	walk = func(p procStat) {
		if seen[p.pid] {
			return
		}
		seen[p.pid] = true
		switch {
		case p.pid == self:
			// The generator: counted apart.
		case strings.HasPrefix(p.comm, "postgres") || strings.HasPrefix(p.comm, "cockroach"):
			s.database += p.cpu
		default:
			s.orchard += p.cpu
		}
		for _, c := range children[p.pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		if p, ok := byPID[r]; ok {
			walk(p)
		}
	}
	s.generator = byPID[self].cpu
	return s
}

// sampleCPU reads the CPU time of the process trees under roots from /proc.
func sampleCPU(roots []int) (cpuSample, error) {
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return cpuSample{}, err
	}
	var procs []procStat
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		ps, err := parseProcStat(string(bytes.TrimSpace(data)))
		if err != nil {
			continue
		}
		procs = append(procs, ps)
	}
	s := sumTrees(procs, roots, os.Getpid())
	if s.orchard == 0 && s.database == 0 {
		return s, fmt.Errorf("no process found under %v", roots)
	}
	// The machine's times only add to the processes': without them the
	// report leaves the machine out (cpuReport), and keeps the rest.
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		s.machine, _ = parseMachineStat(string(data))
	}
	return s, nil
}

// cpuReport turns two samples taken elapsed apart, over which completed
// orchestrations ended, into a report.
func cpuReport(roots []int, before, after cpuSample, elapsed time.Duration, completed int64) *CPUReport {
	r := &CPUReport{Pids: roots}
	orch, db, gen := after.orchard-before.orchard, after.database-before.database, after.generator-before.generator
	if elapsed > 0 {
		r.OrchardCores, r.DatabaseCores = orch.Seconds()/elapsed.Seconds(), db.Seconds()/elapsed.Seconds()
		r.GeneratorCores = gen.Seconds() / elapsed.Seconds()
	}
	if completed > 0 {
		r.OrchardMillisPerOrchestration = float64(orch.Milliseconds()) / float64(completed)
		r.DatabaseMillisPerOrchestration = float64(db.Milliseconds()) / float64(completed)
		r.GeneratorMillisPerOrchestration = float64(gen.Milliseconds()) / float64(completed)
	}
	if ticks := after.machine.total - before.machine.total; ticks > 0 {
		cores := float64(after.machine.cpus)
		r.MachineCores = after.machine.cpus
		r.IdleCores = cores * float64(after.machine.idle-before.machine.idle) / float64(ticks)
		r.StolenCores = cores * float64(after.machine.stolen-before.machine.stolen) / float64(ticks)
	}
	return r
}
