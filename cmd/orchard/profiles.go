package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts a CPU profile into cpuPath and, at stop, writes the
// allocations since the process began into allocsPath (empty: none), for
// `go tool pprof` (-sample_index=alloc_space for the bytes).
func startProfiles(cpuPath, allocsPath string) (stop func() error, err error) {
	var cpu *os.File
	if cpuPath != "" {
		if cpu, err = os.Create(cpuPath); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			_ = cpu.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if allocsPath != "" {
			errs = append(errs, writeAllocs(allocsPath))
		}
		return errors.Join(errs...)
	}, nil
}

func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("allocation profile: %w", err)
	}
	runtime.GC() // the profile shows the allocations up to the last GC
	return errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
}
