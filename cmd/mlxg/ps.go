package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
)

// runningClient is a client of the running server, with a plain error when none answers.
func runningClient(ctx context.Context) (*api.Client, error) {
	c, err := api.ClientFromEnvironment()
	if err != nil {
		return nil, err
	}
	if err := c.Heartbeat(ctx); err != nil {
		if api.Unreachable(err) {
			return nil, fmt.Errorf("could not connect to a running mlxg server at %s: start one with `mlxg serve`", c.Base())
		}
		return nil, err
	}
	return c, nil
}

func newPsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ps",
		Short: "List running models",
		Long: `List the models the server has loaded: their memory, where they run, their context length, the KV cache
layout mlxg chose for them, and when they will be unloaded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := runningClient(cmd.Context())
			if err != nil {
				return err
			}
			ps, err := c.ListRunning(cmd.Context())
			if err != nil {
				return err
			}
			return printPs(cmd.OutOrStdout(), ps, time.Now())
		},
	}
}

func printPs(out io.Writer, ps *api.ProcessResponse, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	batching := false
	for _, m := range ps.Models {
		batching = batching || m.Batch != nil
	}
	if !batching {
		fmt.Fprintln(w, "NAME\tID\tSIZE\tPROCESSOR\tCONTEXT\tKV CACHE\tUNTIL")
	} else {
		fmt.Fprintln(w, "NAME\tID\tSIZE\tPROCESSOR\tCONTEXT\tKV CACHE\tBATCH\tUNTIL")
	}
	for _, m := range ps.Models {
		id := m.Digest[:min(12, len(m.Digest))]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t", m.Name, id, humanize.Bytes(uint64(m.Size)), processor(m), m.ContextLength, m.KVCache)
		if batching {
			fmt.Fprintf(w, "%s\t", batchColumn(m.Batch))
		}
		fmt.Fprintf(w, "%s\n", until(m.ExpiresAt, now))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, m := range ps.Models {
		if s := m.Streaming; s != nil {
			fmt.Fprintf(out, "%s %s\n", m.Name, streamingLine(s))
		}
	}
	for _, m := range ps.Models {
		if v := m.Vision; v != nil {
			fmt.Fprintf(out, "%s %s\n", m.Name, visionLine(v))
		}
	}
	for _, m := range ps.Models {
		if m.ContextReason != "" {
			fmt.Fprintf(out, "%s context %d: %s\n", m.Name, m.ContextLength, m.ContextReason)
		}
	}
	printDraftModels(out, ps)
	return printRanks(out, ps)
}

// visionLine is a model's vision tower memory: "vision tower: 0.9 GB weights, 6.2 GB to encode an
// image of up to 65,536 patches, 0.3 GB of kept features".
func visionLine(v *api.ProcessVision) string {
	line := fmt.Sprintf("vision tower: %s weights, %s to encode an image of up to %s patches, %s of kept features",
		humanize.Bytes(uint64(v.Weights)), humanize.Bytes(uint64(v.EncodePeak)), humanize.Comma(int64(v.MaxPatches)), humanize.Bytes(uint64(v.Features)))
	if v.Lowered {
		line += fmt.Sprintf(" (images resized within %s pixels, lowered to fit memory)", humanize.Comma(int64(v.MaxPixels)))
	}
	return line
}

// streamingLine is a model's weight residency: "streaming: 2.1 of 6.0 GB resident (expert cache
// hit rate 91%)".
func streamingLine(s *api.ProcessStreaming) string {
	line := fmt.Sprintf("streaming: %.1f of %.1f GB resident", float64(s.Resident)/1e9, float64(s.Weights)/1e9)
	if s.Layers > 0 {
		line += fmt.Sprintf(", %d of %d layers kept", s.KeptLayers, s.Layers)
		if s.Hits+s.Misses > 0 {
			line += fmt.Sprintf(" (layer hit rate %.0f%%)", 100*s.HitRate)
		}
		return line
	}
	if s.Hits+s.Misses > 0 {
		line += fmt.Sprintf(" (expert cache hit rate %.0f%%)", 100*s.HitRate)
	}
	return line
}

// printDraftModels names the draft models loaded with models, after the table (whose columns stay
// Ollama's).
func printDraftModels(out io.Writer, ps *api.ProcessResponse) {
	for _, m := range ps.Models {
		if m.Draft != "" {
			fmt.Fprintf(out, "%s is drafted by %s\n", m.Name, m.Draft)
		}
	}
}

// printRanks lists the machines of the models split over several (mlxg serve --hostfile).
func printRanks(out io.Writer, ps *api.ProcessResponse) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	header := false
	for _, m := range ps.Models {
		for _, r := range m.Ranks {
			if !header {
				fmt.Fprintln(w, "\nMODEL\tRANK\tHOST\tLAYERS\tSTATE")
				header = true
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", m.Name, r.Rank, r.Host, r.Layers, r.State)
		}
	}
	return w.Flush()
}

// batchColumn is a model's continuous batch: sequences running of the most it batches, and waiting ones.
func batchColumn(b *api.ProcessBatch) string {
	if b == nil {
		return "-"
	}
	s := fmt.Sprintf("%d/%d", b.Running, b.MaxSequences)
	if b.Waiting > 0 {
		s += fmt.Sprintf(" +%d waiting", b.Waiting)
	}
	return s
}

// processor says where a model runs, as ollama ps does.
func processor(m api.ProcessModelResponse) string {
	switch {
	case m.Size <= 0 || m.SizeVRAM <= 0:
		return "100% CPU"
	case m.SizeVRAM >= m.Size:
		return "100% GPU"
	}
	gpu := int(100 * m.SizeVRAM / m.Size)
	return fmt.Sprintf("%d%%/%d%% CPU/GPU", 100-gpu, gpu)
}

func until(t, now time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case t.Sub(now) > 100*365*24*time.Hour:
		return "Forever"
	case t.Before(now):
		return "Stopping..."
	}
	return humanize.RelTime(t, now, "ago", "from now")
}
