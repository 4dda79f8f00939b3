// Command orchard is Orchard's one binary: the all-in-one dev server, the
// services, the migrator and the admin verbs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orchardhq/orchard/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "orchard:", err)
		var exit exitError
		if errors.As(err, &exit) {
			os.Exit(int(exit))
		}
		os.Exit(1)
	}
}

// addLogFlags adds --log-format and --log-level.
func addLogFlags(f *pflag.FlagSet) (format, level *string) {
	format = f.String("log-format", envString("ORCHARD_LOG_FORMAT", "text"), "log format: text or json (env ORCHARD_LOG_FORMAT)")
	level = f.String("log-level", envString("ORCHARD_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env ORCHARD_LOG_LEVEL)")
	return format, level
}

// setupLogging makes the default logger write to w in format at level.
func setupLogging(w io.Writer, format, level string) error {
	l, err := telemetry.ParseLogLevel(level)
	if err != nil {
		return configError{fmt.Errorf("--log-level (ORCHARD_LOG_LEVEL): %w", err)}
	}
	h, err := telemetry.NewLogHandler(w, format, l)
	if err != nil {
		return configError{fmt.Errorf("--log-format (ORCHARD_LOG_FORMAT): %w", err)}
	}
	slog.SetDefault(slog.New(h))
	return nil
}

// exitError carries a specific exit code.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "orchard",
		Short:         "Orchard: durable orchestrations as a service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	build := currentBuild()
	root.Version = build.Version
	root.SetVersionTemplate(build.String())
	logFormat, logLevel := addLogFlags(root.PersistentFlags())
	registerEnv(pprofEnv, envKindBool) // read by serveOps, once a server runs
	// Before any command runs: a bad ORCHARD_* value stops the process,
	// naming the variable, and the logs take their format and level.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := setupLogging(cmd.ErrOrStderr(), *logFormat, *logLevel); err != nil {
			return err
		}
		return checkEnvBeforeRun()
	}
	// The root help lists the servers and the clients apart; only the
	// clients take --addr, --token and --output.
	root.AddGroup(
		&cobra.Group{ID: "server", Title: "Servers and the migrator (they use the database directly):"},
		&cobra.Group{ID: "client", Title: "Clients (call the API at --addr with --token):"},
	)
	for _, c := range []*cobra.Command{devCommand(), apiCommand(), dispatcherCommand(), janitorCommand(), migrateCommand()} {
		c.GroupID = "server"
		root.AddCommand(c)
	}
	for _, c := range append(clientCommands(), loadtestCommand()) {
		c.GroupID = "client"
		addClientFlags(c.PersistentFlags())
		root.AddCommand(c)
	}
	root.AddCommand(versionCommand())
	return root
}
