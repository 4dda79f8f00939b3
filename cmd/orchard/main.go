// Command orchard is Orchard's one binary: the all-in-one dev server, the
// services, the migrator and the admin verbs.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
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
	addClientFlags(root.PersistentFlags())
	root.AddCommand(migrateCommand(), devCommand(), dispatcherCommand(), apiCommand(), janitorCommand())
	root.AddCommand(clientCommands()...)
	return root
}
