package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List models",
		Long: `List the models on this machine: every MLX checkpoint in the Hugging Face cache (whoever downloaded
it), models made with mlxg create, and aliases made with mlxg cp. ID is the snapshot's commit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withModels(cmd.Context(), func(m modelService) error {
				list, err := m.List(cmd.Context())
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 4, ' ', 0)
				fmt.Fprintln(w, "NAME\tID\tSIZE\tMODIFIED")
				for _, l := range list.Models {
					id := l.Digest[:min(12, len(l.Digest))]
					modified := "never"
					if !l.ModifiedAt.IsZero() {
						modified = humanize.Time(l.ModifiedAt)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.Name, id, humanize.Bytes(uint64(l.Size)), modified)
				}
				return w.Flush()
			})
		},
	}
}
