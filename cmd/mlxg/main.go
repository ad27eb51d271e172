// Command mlxg pulls, runs and serves MLX checkpoints (see README.md and docs/architecture.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.0.0-dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mlxg",
		Short:         "Large language models from MLX checkpoints, served like Ollama",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate("mlxg version is {{.Version}} (Ollama API " + api.OllamaVersion + ")\n")
	// One line per command.
	root.AddCommand(newPullCmd())
	root.AddCommand(newListCmd())
	root.AddCommand(newShowCmd())
	root.AddCommand(newRmCmd())
	root.AddCommand(newCpCmd())
	root.AddCommand(newVersionCmd())
	root.AddCommand(newFitCmd())
	root.AddCommand(newDoctorCmd())
	root.AddCommand(newServeCmd())
	root.AddCommand(newWorkerCmd())
	root.AddCommand(newPsCmd())
	root.AddCommand(newStopCmd())
	root.AddCommand(newRunCmd())
	root.AddCommand(newCreateCmd())
	root.AddCommand(newCacheCmd())
	root.AddCommand(newMCPCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show version information",
		Long: "Show the version of the running server (at MLXG_HOST or OLLAMA_HOST) and of this client, as ollama -v does.\n" +
			"The server's /api/version reports the Ollama API version it follows (" + api.OllamaVersion + ") in \"version\" and\n" +
			"mlxg's own in \"mlxg_version\"; a server without the latter is Ollama itself.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			c, err := api.ClientFromEnvironment()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
			defer cancel()
			v, err := c.Versions(ctx)
			switch {
			case err != nil:
				fmt.Fprintf(out, "Warning: could not connect to a running mlxg server at %s\n", c.Base())
				fmt.Fprintf(out, "Warning: client version is %s\n", version)
			case v.MLXGVersion == "":
				fmt.Fprintf(out, "Warning: the server at %s is Ollama %s, not mlxg\n", c.Base(), v.Version)
				fmt.Fprintf(out, "Warning: client version is %s\n", version)
			case v.MLXGVersion != version:
				fmt.Fprintf(out, "mlxg version is %s (Ollama API %s)\n", v.MLXGVersion, v.Version)
				fmt.Fprintf(out, "Warning: client version is %s\n", version)
			default:
				fmt.Fprintf(out, "mlxg version is %s (Ollama API %s)\n", version, v.Version)
			}
			return nil
		},
	}
}

func main() {
	// Ctrl-C cancels the command's context: a pull stops cleanly, keeping its partial files for the next one.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		stop()
		os.Exit(1)
	}
}
