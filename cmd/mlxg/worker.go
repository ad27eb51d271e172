package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/pipeline"
)

const workerHelp = `Run one worker rank of a model served over several machines.

Every machine but the first runs one worker; the first runs ` + "`mlxg serve --hostfile FILE`" + `. All of them read
the same MLX hostfile (a JSON list with one ["host:port"] per rank, rank 0 first), and join one MLX
distributed group (the ring backend over Ethernet or Thunderbolt by default). Rank 0 serves the API; the
workers load the layers it assigns them of each model it loads (from the same path, or from their own
Hugging Face cache: pull the model on every machine), and run their part of every forward pass. A worker
ends when rank 0 stops or goes away.

This machine's memory policy plans the KV cache of its own layers, and its prefix cache keeps its own layers'
blocks (the --kv-* and prefix-cache flags, MLXG_KV_* and MLXG_PREFIX_* work as for serve).

Environment variables:
  MLXG_HOSTFILE, MLX_HOSTFILE         the hostfile, when --hostfile is not given
  MLX_RANK                            the rank, when --rank is not given
  MLXG_DISTRIBUTED_BACKEND            MLX's distributed backend (default "ring")
  MLXG_BACKEND                        must run MLX: metal on a Mac (the default), mlx elsewhere`

func newWorkerCmd() *cobra.Command {
	var hostfile string
	var rank, threads int
	var kv kvstore.Options
	var pc kvstore.PrefixOptions
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run one worker rank of a model split over several machines",
		Long:  workerHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWorker(cmd.Context(), cmd.ErrOrStderr(), hostfileFrom(hostfile), rank, threads, &kv, &pc)
		},
	}
	cmd.Flags().StringVar(&hostfile, "hostfile", "", "MLX hostfile listing every rank's address (rank 0 first)")
	cmd.Flags().IntVar(&rank, "rank", -1, "this machine's rank, 1 or more (default: MLX_RANK)")
	cmd.Flags().IntVar(&threads, "threads", 0, "CPU threads (0: all cores)")
	registerKVFlags(cmd.Flags(), &kv)
	registerPrefixFlags(cmd.Flags(), &pc)
	return cmd
}

// runWorker sets up the logger, the memory policy and the prefix cache as serve does,
// and runs the worker (runner/pipeline).
func runWorker(_ context.Context, logw io.Writer, hostfile string, rank, threads int, kv *kvstore.Options, pc *kvstore.PrefixOptions) error {
	log, err := newLogger(logw)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	if err := kv.ApplyEnv(os.Getenv); err != nil {
		return err
	}
	if err := pc.ApplyEnv(os.Getenv); err != nil {
		return err
	}
	if pc.Dir == "" {
		// A folder of its own by default, so that ranks sharing a machine (tests on
		// loopback) do not share one.
		d, err := kvstore.DefaultPrefixDir()
		if err != nil {
			return err
		}
		pc.Dir = fmt.Sprintf("%s-rank%d", d, rank)
	}
	prefix, err := openPrefixCache(pc, log) // this rank's layers' blocks, under the same chain of token blocks
	if err != nil {
		return err
	}
	defer prefix.Close()
	return pipeline.RunWorker(pipeline.WorkerConfig{Hostfile: hostfile, Rank: rank, Threads: threads,
		KV: &kvstore.Policy{Options: *kv, Log: log}, Prefix: prefix, Log: log})
}
