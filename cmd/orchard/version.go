package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time by the Makefile, ko and the Dockerfile:
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=abc123 -X main.buildDate=2026-01-02T03:04:05Z"
//
// Unset, they come from the module and VCS information Go records.
var version, commit, buildDate string

// buildInfo is what `orchard version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"build_date"`
	GoVersion string `json:"go_version"`
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, BuildDate: buildDate, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && info.Main.Version != "" {
			b.Version = info.Main.Version
		}
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.BuildDate == "" {
					b.BuildDate = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && commit == "" && b.Commit != "" {
			b.Commit += "-dirty"
		}
	}
	for _, f := range []*string{&b.Version, &b.Commit, &b.BuildDate} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return b
}

func (b buildInfo) String() string {
	return fmt.Sprintf("orchard %s\ncommit: %s\nbuilt: %s\ngo: %s\n", b.Version, b.Commit, b.BuildDate, b.GoVersion)
}

func versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version (-o json for JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := currentBuild()
			if f := cmd.Flag("output"); f != nil && f.Value.String() == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), b.String())
			return err
		},
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}
