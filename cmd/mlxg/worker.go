package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
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

func runWorker(ctx context.Context, logw io.Writer, hostfile string, rank, threads int, kv *kvstore.Options, pc *kvstore.PrefixOptions) error {
	log, err := newLogger(logw)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	if err := kv.ApplyEnv(os.Getenv); err != nil {
		return err
	}
	policy := &kvstore.Policy{Options: *kv, Log: log}
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
	if hostfile == "" {
		return fmt.Errorf("a worker needs the hostfile: --hostfile FILE (or MLXG_HOSTFILE / MLX_HOSTFILE)")
	}
	if rank < 0 {
		k, v := envFirst("MLX_RANK")
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("a worker needs its rank: --rank N (or %s)", k)
		}
		rank = n
	}
	if rank == 0 {
		return fmt.Errorf("rank 0 is `mlxg serve --hostfile FILE`; workers are ranks 1 and up")
	}
	choice, err := backend.Select(backend.Options{Threads: threads, Logger: log})
	if err != nil {
		return err
	}
	g, hosts, err := joinGroup(choice.Backend, hostfile, rank, log)
	if err != nil {
		return err
	}
	log.Info("worker ready", "rank", rank, "ranks", len(hosts), "backend", choice.Backend.Name())
	var mu sync.Mutex
	backends := map[*model.Model]compute.Backend{}
	var live net.Conn
	var stopping atomic.Bool
	bell := make(chan struct{}, 1024)
	gone := make(chan struct{})
	w := &model.Worker{
		Wire:   g,
		Log:    log,
		Prefix: prefix,
		Open: func(dir string, s model.Stage) (*model.Model, error) {
			local, err := resolveModelDir(dir)
			if err != nil {
				return nil, err
			}
			b, err := choice.ForModel()
			if err != nil {
				return nil, err
			}
			if mb, ok := b.(*metal.Backend); ok {
				if err := mb.UseGroup(g); err != nil {
					backend.Release(b)
					return nil, err
				}
			}
			m, err := model.LoadStage(local, b, s)
			if err != nil {
				backend.Release(b)
				return nil, err
			}
			mu.Lock()
			backends[m] = b
			mu.Unlock()
			return m, nil
		},
		// This machine's memory policy plans the KV of its own layers, for the context
		// rank 0 loaded the model with, and sets the backend's limits from that plan.
		Loaded: func(m *model.Model, numCtx int) error {
			share, err := stageShape(m)
			if err != nil {
				return err
			}
			plan, err := policy.Plan(m.Dir, share, ctxOr(numCtx), true)
			if err != nil {
				return err
			}
			mu.Lock()
			b := backends[m]
			mu.Unlock()
			if prefix != nil {
				prefix.SetBudget(plan.PrefixBudget)
			}
			return backend.ApplyPlan(b, plan)
		},
		Caches: func(m *model.Model, dir string, numCtx int) ([]kvstore.Layer, error) {
			share, err := stageShape(m)
			if err != nil {
				return nil, err
			}
			caches, plan, err := policy.Caches(dir, share, ctxOr(numCtx))
			if err == nil && prefix != nil {
				prefix.SetBudget(plan.PrefixBudget)
			}
			return caches, err
		},
		Release: func(m *model.Model) {
			mu.Lock()
			b := backends[m]
			delete(backends, m)
			mu.Unlock()
			if b != nil {
				backend.Release(b)
			}
		},
		OnHello: func(addr string) error {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return fmt.Errorf("reaching rank 0 at %s: %w", addr, err)
			}
			if _, err := fmt.Fprintf(conn, "%d\n", rank); err != nil {
				conn.Close()
				return err
			}
			live = conn
			go func() {
				// Rank 0 writes a byte before each control message; the read ends when it
				// goes away, and so does the worker.
				buf := make([]byte, 64)
				for {
					n, err := conn.Read(buf)
					for range n {
						bell <- struct{}{}
					}
					if err != nil {
						break
					}
				}
				close(gone)
				if stopping.Load() {
					return
				}
				log.Error("rank 0 went away; stopping", "rank", rank)
				os.Exit(1)
			}()
			return nil
		},
		Doorbell: func() error {
			if live == nil {
				return nil // before OpHello
			}
			select {
			case <-bell:
				return nil
			case <-gone:
				return fmt.Errorf("rank 0 went away")
			}
		},
	}
	err = w.Run()
	stopping.Store(true)
	if live != nil {
		live.Close()
	}
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	log.Info("worker stopped by rank 0", "rank", rank)
	return nil
}

// stageShape is this worker's share of m's shape, for its memory policy.
func stageShape(m *model.Model) (kvstore.ModelShape, error) {
	data, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		return kvstore.ModelShape{}, err
	}
	shape, err := kvstore.ShapeFromConfig(data, 0)
	if err != nil {
		return shape, err
	}
	return model.StageShape(shape, *m.Stage(), m.WeightBytes()), nil
}

// ctxOr is the context rank 0 loaded a model for, or 4096 when it did not say.
func ctxOr(n int) int {
	if n <= 0 {
		return 4096
	}
	return n
}
