package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/mcpserver"
	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/sched"
)

const serveHelp = `Start the mlxg server: Ollama's API (/api/*) and OpenAI's (/v1/*) on 127.0.0.1:11434.

Environment variables:
  MLXG_HOST, OLLAMA_HOST              address to listen on (default 127.0.0.1:11434)
  MLXG_ORIGINS, OLLAMA_ORIGINS        extra allowed browser origins, comma-separated ("*" allows all)
  MLXG_KEEP_ALIVE, OLLAMA_KEEP_ALIVE  how long an idle model stays loaded (default "5m"; negative: forever)
  MLXG_NUM_PARALLEL, OLLAMA_NUM_PARALLEL  requests served at once per model (default 1; the rest queue); above 1
                                        their decode steps run as one batched forward pass
  MLXG_MAX_QUEUE, OLLAMA_MAX_QUEUE    requests allowed to wait (default 512; more get 503)
  MLXG_CONTEXT_LENGTH, OLLAMA_CONTEXT_LENGTH  default num_ctx (default: sized from memory at load, up to the model's maximum)
  MLXG_NUM_DRAFT                      default num_draft, as --num-draft (0: no speculative decoding)
  MLXG_DRAFT_MODEL                    default draft model, as --draft-model
  MLXG_MAX_MEMORY                     memory all loaded models may take (e.g. "24GiB"; default 90% of RAM)
  MLXG_LOG_FORMAT                     "text" (default) or "json"
  MLXG_DEBUG                          1 logs at debug level
  MLXG_BACKEND                        cpu, metal or mlx (default: metal on a Mac when libmlxc loads, else cpu)
  MLXG_WEIGHT_BUDGET                  load models in streaming mode (experts, or a dense model's layers, read from
                                      disk), at most this much of their weights in memory (e.g. "2GiB"; default: only a model that does not fit streams)
  MLXG_WEIGHT_POLICY                  the expert cache's eviction policy: frequency (default), lru or lfu
  MLXG_KV_*, OLLAMA_KV_CACHE_TYPE     the KV cache, as the --kv-* flags
  MLXG_PREFIX_DIR, MLXG_PREFIX_MAX_SIZE, MLXG_PROMPT_CACHE_HOT  the prefix cache, as --block-ssd-cache-dir,
                                      --block-ssd-cache-max-size and --prompt-cache-hot`

func newServeCmd() *cobra.Command {
	var kv kvstore.Options
	var pc kvstore.PrefixOptions
	var threads int
	var grace time.Duration
	var hostfile string
	var numDraft int
	var draftModel string
	cmd := &cobra.Command{
		Use:     "serve",
		Aliases: []string{"start"},
		Short:   "Start mlxg (Ollama and OpenAI APIs)",
		Long:    serveHelp + "\n" + clusterEnvHelp,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			draft, err := serveNumDraft(cmd.Flags(), numDraft, os.Getenv)
			if err != nil {
				return err
			}
			dm, err := serveDraftModel(cmd.Flags(), draftModel, os.Getenv)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cmd.ErrOrStderr(), &kv, &pc, threads, grace, hostfileFrom(hostfile), draft, dm)
		},
	}
	registerKVFlags(cmd.Flags(), &kv)
	registerPrefixFlags(cmd.Flags(), &pc)
	cmd.Flags().IntVar(&threads, "threads", 0, "CPU threads per model (0: all cores)")
	cmd.Flags().DurationVar(&grace, "shutdown-grace", 10*time.Second, "time requests in flight get to finish on shutdown")
	registerDraftFlags(cmd.Flags(), &numDraft, "default")
	cmd.Flags().StringVar(&draftModel, "draft-model", "", "default draft model (a model in the store with the same tokenizer) for models whose Modelfile names none (PARAMETER draft_model)")
	cmd.Flags().StringVar(&hostfile, "hostfile", "", "MLX hostfile: serve models split over these machines (rank 0 here, \"mlxg worker\" on the others)")
	return cmd
}

// newLogger is log/slog, text or JSON as MLXG_LOG_FORMAT says.
func newLogger(w io.Writer) (*slog.Logger, error) {
	level := slog.LevelInfo
	if v := os.Getenv("MLXG_DEBUG"); v != "" && v != "0" && v != "false" {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f := strings.ToLower(strings.TrimSpace(os.Getenv("MLXG_LOG_FORMAT"))); f {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("MLXG_LOG_FORMAT=%q: want text or json", f)
	}
}

func envFirst(keys ...string) (string, string) {
	for _, k := range keys {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return k, v
		}
	}
	return keys[0], ""
}

func serve(ctx context.Context, logw io.Writer, kv *kvstore.Options, pc *kvstore.PrefixOptions, threads int, grace time.Duration, hostfile string, numDraft int, draftModel string) error {
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
	sc, err := sched.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	ctxLen := 0 // each model's context sized from memory when it loads, up to its maximum
	if k, v := envFirst("MLXG_CONTEXT_LENGTH", "OLLAMA_CONTEXT_LENGTH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%s=%q: want a number of tokens, such as 8192", k, v)
		}
		ctxLen = n
	}
	mem, err := sysmem.System().Read()
	if err != nil {
		log.Warn("cannot read the machine's memory; no memory budget", "error", err)
	} else {
		sc.MemoryBudget = int64(mem.Total) / 10 * 9
	}
	if v := strings.TrimSpace(os.Getenv("MLXG_MAX_MEMORY")); v != "" {
		n, err := humanize.ParseBytes(v)
		if err != nil || n == 0 {
			return fmt.Errorf("MLXG_MAX_MEMORY=%q: want a size such as 24GiB or 16000MB", v)
		}
		sc.MemoryBudget = int64(n)
	}
	store, err := registry.DefaultStore()
	if err != nil {
		return err
	}
	choice, err := backend.Select(backend.Options{Threads: threads, Logger: log})
	if err != nil {
		return err
	}
	forModel := choice.ForModel
	var cl *pipeline.Cluster
	if hostfile != "" {
		if cl, err = pipeline.Start(choice.Backend, hostfile, log); err != nil {
			return err
		}
		defer cl.Close()
		cl.ExitIfStuck(ctx, grace, func() { exitStuck() })
		forModel = cl.ForModel(choice.ForModel)
	}
	prefix, err := openPrefixCache(pc, log)
	if err != nil {
		return err
	}
	defer prefix.Close()
	loader := &server.EngineLoader{Backend: choice.Backend, ForModel: forModel, Threads: threads, KV: &kvstore.Policy{Options: *kv, Log: log}, Logger: log, Prefix: prefix, Parallel: sc.NumParallel}
	if loader.WeightBudget, loader.StreamPolicy, err = weightStreaming(); err != nil {
		return err
	}
	if cl != nil {
		loader.Pipeline = cl.Leader()
		loader.Shape = cl.Leader().Plan // rank 0 plans its own layers' KV; each worker plans its own
	}
	srv, err := server.NewServer(server.ServerConfig{
		Store:         store,
		Loader:        loader,
		Sched:         sc,
		Origins:       server.OriginsFromEnv(os.Getenv),
		ContextLength: ctxLen,
		NumDraft:      numDraft,
		DraftModel:    draftModel,
		Version:       version,
		Logger:        log,
		NoDashboard:   envOff("MLXG_DASHBOARD"),
	})
	if err != nil {
		return err
	}
	prometheus.Register(srv.Collector()) // loaded models, memory pressure (once per process)
	host := api.Host()
	l, err := net.Listen("tcp", host.Host)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (is another server, mlxg or Ollama, running? set MLXG_HOST to use another address)", host.Host, err)
	}
	if !envOff("MLXG_MCP") {
		srv.Mount("/mcp", mcpserver.HTTPHandler(mcpOptions(selfClient(l.Addr())))) // the MCP tools over streamable HTTP
	}
	log.Info("Listening on "+l.Addr().String()+" (version "+version+")", "keep_alive", sc.DefaultKeepAlive,
		"num_parallel", sc.NumParallel, "max_queue", sc.MaxQueue, "memory_budget", humanize.IBytes(uint64(max(sc.MemoryBudget, 0))),
		"num_ctx", ctxLen, "models", store.HubCache, "kv", kv.Explicit())
	return srv.Serve(ctx, l, grace)
}
