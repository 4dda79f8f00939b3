package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Flags take their defaults from ORCHARD_* environment variables, so that a
// deployment configures the services with either. The helpers return the
// default for an unset or bad value, so that the command can still be built
// and print its help; every variable they read is registered with how it
// parses, and the root command checks them all before any command runs
// (checkEnv), so a bad value stops the process with a message naming the
// variable instead of falling back to the default.

// envKind is how a variable's value parses.
type envKind int

const (
	envKindString envKind = iota
	envKindInt
	envKindDuration
	envKindBool
	envKindList
)

var envRegistry = struct {
	sync.Mutex
	kinds map[string]envKind
}{kinds: map[string]envKind{}}

// registerEnv records that name is read as kind.
func registerEnv(name string, kind envKind) {
	envRegistry.Lock()
	defer envRegistry.Unlock()
	envRegistry.kinds[name] = kind
}

// envValue parses the value of a variable of kind, with the error a user
// reads: the variable, its value and what was expected.
func envValue(name, raw string, kind envKind) (any, error) {
	switch kind {
	case envKindInt:
		v, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s=%q: not an integer", name, raw)
		}
		if v < 0 {
			return nil, fmt.Errorf("%s=%q: must not be negative", name, raw)
		}
		return v, nil
	case envKindDuration:
		v, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s=%q: not a duration with a unit (like 30s, 5m, 1h30m)", name, raw)
		}
		if v < 0 {
			return nil, fmt.Errorf("%s=%q: must not be negative", name, raw)
		}
		return v, nil
	case envKindBool:
		v, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s=%q: not a boolean (true or false)", name, raw)
		}
		return v, nil
	case envKindList:
		var out []string
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item == "" {
				return nil, fmt.Errorf("%s=%q: empty item in the comma-separated list", name, raw)
			}
			out = append(out, item)
		}
		return out, nil
	default:
		return raw, nil
	}
}

func envString(name, def string) string {
	registerEnv(name, envKindString)
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	registerEnv(name, envKindInt)
	if raw := os.Getenv(name); raw != "" {
		if v, err := envValue(name, raw, envKindInt); err == nil {
			return v.(int)
		}
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	registerEnv(name, envKindDuration)
	if raw := os.Getenv(name); raw != "" {
		if v, err := envValue(name, raw, envKindDuration); err == nil {
			return v.(time.Duration)
		}
	}
	return def
}

func envBool(name string, def bool) bool {
	registerEnv(name, envKindBool)
	if raw := os.Getenv(name); raw != "" {
		if v, err := envValue(name, raw, envKindBool); err == nil {
			return v.(bool)
		}
	}
	return def
}

func envList(name string) []string {
	registerEnv(name, envKindList)
	if raw := os.Getenv(name); raw != "" {
		if v, err := envValue(name, raw, envKindList); err == nil {
			return v.([]string)
		}
	}
	return nil
}

// envRead are the ORCHARD_* variables read outside the helpers above (the
// token of the client verbs, the test harness's): not unknown, not checked.
var envRead = []string{"ORCHARD_TOKEN", "ORCHARD_TEST_DATABASE_URL", "ORCHARD_TESTDB_SETTINGS", "ORCHARD_SQL_CAPTURE"}

// checkEnv returns an error naming every ORCHARD_* variable whose value does
// not parse, and the set ORCHARD_* variables that nothing reads (most likely
// misspelt).
func checkEnv(environ []string) (unknown []string, err error) {
	envRegistry.Lock()
	defer envRegistry.Unlock()
	var errs []error
	for _, kv := range slices.Sorted(slices.Values(environ)) {
		name, raw, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "ORCHARD_") {
			continue
		}
		kind, ok := envRegistry.kinds[name]
		if !ok {
			if !slices.Contains(envRead, name) {
				unknown = append(unknown, name)
			}
			continue
		}
		if raw == "" {
			continue
		}
		if _, err := envValue(name, raw, kind); err != nil {
			errs = append(errs, err)
		}
	}
	return unknown, errors.Join(errs...)
}

// configError is a configuration the process cannot run with.
type configError struct{ err error }

func (e configError) Error() string { return "configuration: " + e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// checkEnvBeforeRun fails the command on a bad ORCHARD_* value and warns
// of the unknown ones.
func checkEnvBeforeRun() error {
	unknown, err := checkEnv(os.Environ())
	if err != nil {
		return configError{err}
	}
	if len(unknown) > 0 {
		slog.Warn("ignoring unknown ORCHARD_* environment variables", "names", unknown)
	}
	return nil
}
