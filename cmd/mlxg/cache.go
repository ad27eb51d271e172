package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/kvstore"
)

// openPrefixCache opens the server's prefix cache and exports its metrics. An SSD folder
// that cannot be used leaves a RAM-only cache, with a warning: serving goes on.
func openPrefixCache(o *kvstore.PrefixOptions, log *slog.Logger) (*kvstore.PrefixCache, error) {
	cfg, err := o.Config(log)
	if err != nil {
		return nil, err
	}
	p, err := kvstore.NewPrefixCache(cfg)
	if err != nil {
		log.Warn("prefix cache: no SSD tier", "error", err)
		cfg.Dir = ""
		if p, err = kvstore.NewPrefixCache(cfg); err != nil {
			return nil, err
		}
	}
	if err := prometheus.Register(server.NewPrefixCollector(p)); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil, err
	}
	log.Info("prefix cache", "dir", cfg.Dir, "max_size", humanize.Bytes(uint64(cfg.MaxDiskBytes)), "hot", cfg.Hot)
	return p, nil
}

func newCacheCmd() *cobra.Command {
	var o kvstore.PrefixOptions
	cmd := &cobra.Command{
		Use:   "cache [show|clear]",
		Short: "Show or clear the prefix cache",
		Long: `Show the prefix cache's tiers (blocks, bytes, hit rate, oldest block) or clear them.

The SSD tier is read from its folder (--block-ssd-cache-dir, MLXG_PREFIX_DIR, default ~/.cache/mlxg/prefix);
the RAM tier and the hit rate come from the running server's /metrics (at MLXG_HOST or OLLAMA_HOST).
clear deletes every SSD block file and empties the running server's RAM tier (blocks that requests in
flight hold stay until they finish).`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"show", "clear"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.ApplyEnv(os.Getenv); err != nil {
				return err
			}
			dir, err := o.ResolvedDir()
			if err != nil {
				return err
			}
			action := "show"
			if len(args) == 1 {
				action = args[0]
			}
			switch action {
			case "show":
				return showCache(cmd.Context(), cmd.OutOrStdout(), dir)
			case "clear":
				return clearCache(cmd.Context(), cmd.OutOrStdout(), dir)
			}
			return fmt.Errorf("mlxg cache %s: unknown action; use show or clear", action)
		},
	}
	registerPrefixFlags(cmd.Flags(), &o)
	return cmd
}

func clearCache(ctx context.Context, w io.Writer, dir string) error {
	if n, base, err := clearServerRAM(ctx); err != nil {
		fmt.Fprintf(w, "RAM tier: %v\n", err)
	} else {
		fmt.Fprintf(w, "Cleared %d blocks from the RAM tier of the server at %s.\n", n, base)
	}
	if dir == "" {
		fmt.Fprintln(w, "The SSD tier is off.")
		return nil
	}
	blocks, bytes, _, err := kvstore.DiskUsage(dir)
	if err != nil {
		return fmt.Errorf("reading the prefix cache at %s: %w", dir, err)
	}
	if err := kvstore.ClearDisk(dir); err != nil {
		return err
	}
	fmt.Fprintf(w, "Deleted %d blocks (%s) from %s.\n", blocks, humanize.IBytes(uint64(bytes)), dir)
	return nil
}

func showCache(ctx context.Context, w io.Writer, dir string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "TIER\tBLOCKS\tSIZE\tOLDEST BLOCK\tWHERE")
	m, merr := serverMetrics(ctx)
	if merr == nil {
		fmt.Fprintf(tw, "RAM\t%.0f\t%s\t\tthe running server\n", m["mlxg_prefix_cache_blocks{tier=\"ram\"}"],
			humanize.IBytes(uint64(m["mlxg_prefix_cache_bytes{tier=\"ram\"}"])))
	} else {
		fmt.Fprintf(tw, "RAM\t-\t-\t\tno server: %v\n", merr)
	}
	if dir == "" {
		fmt.Fprintln(tw, "SSD\t-\t-\t\toff")
	} else {
		blocks, bytes, oldest, err := kvstore.DiskUsage(dir)
		if err != nil {
			return fmt.Errorf("reading the prefix cache at %s: %w", dir, err)
		}
		old := ""
		if !oldest.IsZero() {
			old = oldest.Format(time.DateTime) + " (" + humanize.Time(oldest) + ")"
		}
		fmt.Fprintf(tw, "SSD\t%d\t%s\t%s\t%s\n", blocks, humanize.IBytes(uint64(bytes)), old, dir)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if merr == nil {
		lookups := m["mlxg_prefix_cache_lookups_total"]
		rate := 0.0
		if lookups > 0 {
			rate = 100 * (lookups - m["mlxg_prefix_cache_misses_total"]) / lookups
		}
		fmt.Fprintf(w, "\nHit rate: %.0f%% of %.0f requests reused a prefix (blocks: %.0f from RAM, %.0f from SSD); %s written to SSD, %s read.\n",
			rate, lookups, m["mlxg_prefix_cache_hits_total{tier=\"ram\"}"], m["mlxg_prefix_cache_hits_total{tier=\"ssd\"}"],
			humanize.IBytes(uint64(m["mlxg_prefix_cache_ssd_written_bytes_total"])), humanize.IBytes(uint64(m["mlxg_prefix_cache_ssd_read_bytes_total"])))
	}
	return nil
}

// clearServerRAM asks the running server to empty its RAM tier.
func clearServerRAM(ctx context.Context) (int, string, error) {
	c, err := api.ClientFromEnvironment()
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.Base().JoinPath("api", "prefix-cache").String(), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("no server at %s", c.Base())
	}
	defer resp.Body.Close()
	var out struct {
		Cleared int `json:"cleared"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return 0, "", fmt.Errorf("the server at %s did not clear it (%s)", c.Base(), resp.Status)
	}
	return out.Cleared, c.Base().String(), nil
}

// serverMetrics reads the running server's mlxg_prefix_cache_* metrics, keyed by name
// and labels as the text format spells them.
func serverMetrics(ctx context.Context) (map[string]float64, error) {
	c, err := api.ClientFromEnvironment()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base().JoinPath("metrics").String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach %s", c.Base())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", c.Base(), resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "mlxg_prefix_cache_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if _, ok := out["mlxg_prefix_cache_lookups_total"]; !ok && sc.Err() == nil {
		return nil, errors.New("the server exports no prefix-cache metrics")
	}
	return out, sc.Err()
}
