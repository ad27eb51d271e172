package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
)

func newStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop MODEL",
		Short: "Stop a running model",
		Long:  "Unload MODEL from the server now (as a request with keep_alive 0 does); requests in flight finish first.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := runningClient(ctx)
			if err != nil {
				return err
			}
			ps, err := c.ListRunning(ctx)
			if err != nil {
				return err
			}
			name := args[0]
			found := false
			for _, m := range ps.Models {
				found = found || runningMatches(m.Name, name)
			}
			if !found {
				return fmt.Errorf("couldn't find model %q to stop (mlxg ps lists the running models)", name)
			}
			return c.Generate(ctx, &api.GenerateRequest{Model: name, KeepAlive: &api.Duration{}}, func(api.GenerateResponse) error { return nil })
		},
	}
}

// runningMatches reports whether a running model's listed name is the one the user typed
// ("qwen3" is "qwen3:latest").
func runningMatches(listed, typed string) bool {
	return listed == typed || (!strings.Contains(typed, ":") && !strings.Contains(typed, "/") && listed == typed+":latest")
}
