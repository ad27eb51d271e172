package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

// WorkerConfig is a worker process's setup (`mlxg worker`).
type WorkerConfig struct {
	// Hostfile is the MLX hostfile listing every rank's address, rank 0 first.
	Hostfile string
	// Rank is this process's, 1 or more; below 0: MLX_RANK's.
	Rank int
	// Threads are the CPU threads of the backend (0: all cores).
	Threads int
	// KV is this machine's memory policy: it plans the KV of this rank's layers.
	KV *kvstore.Policy
	// Prefix, when set, is this rank's prefix cache (Worker.Prefix).
	Prefix *kvstore.PrefixCache
	Log    *slog.Logger
}

// RunWorker runs one worker rank until rank 0 stops it (nil) or the group fails: it
// joins the hostfile's group and follows rank 0's messages (Worker), loading each model's
// stage on a backend of its own, planned by this machine's memory policy. It ends the
// process when rank 0 goes away, since the transfer it is blocked in would never return.
func RunWorker(ctx context.Context, c WorkerConfig) error {
	log, policy, prefix, hostfile, rank := c.Log, c.KV, c.Prefix, c.Hostfile, c.Rank
	if log == nil {
		log = slog.Default()
	}
	if policy == nil {
		policy = &kvstore.Policy{Log: log}
	}
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
	choice, err := backend.Select(backend.Options{Threads: c.Threads, Logger: log})
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
	w := &Worker{
		Wire:   g,
		Log:    log,
		Prefix: prefix,
		Open: func(dir string, s Stage) (*model.Model, error) {
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
			m, err := LoadStage(local, b, s)
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
	s, _ := StageOf(m)
	return StageShape(shape, s, m.WeightBytes()), nil
}

// ctxOr is the context rank 0 loaded a model for, or 4096 when it did not say.
func ctxOr(n int) int {
	if n <= 0 {
		return 4096
	}
	return n
}
