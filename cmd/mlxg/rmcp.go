package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
)

func newRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm MODEL [MODEL...]",
		Short: "Remove a model",
		Long: `Remove models. An alias made by cp is just removed; a repo revision loses its ref, then its snapshot
if no other revision or alias uses that commit, then the blobs no snapshot uses.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withModels(cmd.Context(), func(m modelService) error {
				for _, name := range args {
					if err := m.Delete(cmd.Context(), &api.DeleteRequest{Model: name}); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "deleted '%s'\n", name)
				}
				return nil
			})
		},
	}
}

func newCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SOURCE DESTINATION",
		Short: "Copy a model",
		Long: `Copy a model: DESTINATION, a name without '/' (mymodel or mymodel:tag), becomes an alias of
SOURCE's snapshot. The alias keeps that snapshot even if SOURCE is pulled again or removed.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withModels(cmd.Context(), func(m modelService) error {
				if err := m.Copy(cmd.Context(), &api.CopyRequest{Source: args[0], Destination: args[1]}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "copied '%s' to '%s'\n", args[0], args[1])
				return nil
			})
		},
	}
}
