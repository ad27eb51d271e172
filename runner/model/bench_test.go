package model_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// benchCheckpoint returns a Qwen2-0.5B-shaped random checkpoint converted to MLX 4-bit
// (group 64; $MLXG_BENCH_BITS=8 for 8-bit), made once under $MLXG_BENCH_DIR (default: the
// system temp dir) and reused by later runs.
func benchCheckpoint(b *testing.B) string {
	root := os.Getenv("MLXG_BENCH_DIR")
	if root == "" {
		root = filepath.Join(os.TempDir(), "mlxg-bench")
	}
	bits := 4
	if os.Getenv("MLXG_BENCH_BITS") == "8" {
		bits = 8
	}
	dst := filepath.Join(root, fmt.Sprintf("qwen2-0.5b-q%d", bits))
	if _, err := os.Stat(filepath.Join(dst, "config.json")); err == nil {
		return dst
	}
	src := filepath.Join(root, "qwen2-0.5b-bf16")
	if err := randmodel.Generate(src, randmodel.Qwen2_0_5B(), randmodel.Options{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), src, dst, create.Options{Bits: bits, GroupSize: 64}); err != nil {
		b.Fatal(err)
	}
	os.RemoveAll(src)
	return dst
}

// loadBench loads the bench checkpoint on the CPU backend with 2 threads (MLXG_BENCH_THREADS
// sets another number).
func loadBench(b *testing.B) *model.Model {
	threads := 2
	if v, err := strconv.Atoi(os.Getenv("MLXG_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	be := cpu.New(threads)
	switch os.Getenv("MLXG_CPU_INT8") { // the server's switch (runner/backend)
	case "1":
		be.UseInt8(true)
	case "0":
	default:
		be.UseInt8Batches(true)
	}
	m, err := model.Load(benchCheckpoint(b), be)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkQwen2_0_5B_Q4 measures prefill and decode tokens/s with 2 threads, the
// setting of the comparison with Ollama (q4_K_M: ~200 tok/s prefill, 47-50
// tok/s decode on this machine class):
//
//	go test -run '^$' -bench Qwen2_0_5B -benchtime 1x ./runner/model/
//	MLXG_BENCH_BITS=8 go test -run '^$' -bench Qwen2_0_5B -benchtime 1x ./runner/model/
func BenchmarkQwen2_0_5B_Q4(b *testing.B) {
	m := loadBench(b)
	defer m.Close()
	const promptLen, decode = 256, 32
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(1000 + i*37%50000)
	}
	// CPU time is reported too: on a shared machine the wall clock also counts time the
	// process waited for a core; tok/cpu-s × threads is the wall-clock rate on idle cores.
	var prefill, dec, prefillCPU, decCPU time.Duration
	for i := 0; i < b.N; i++ {
		caches, _ := m.NewCaches(false)
		start, cpu0 := time.Now(), cpuTime()
		logits, err := m.Forward(context.Background(), prompt, caches, false)
		if err != nil {
			b.Fatal(err)
		}
		prefill += time.Since(start)
		prefillCPU += cpuTime() - cpu0
		start, cpu0 = time.Now(), cpuTime()
		for j := 0; j < decode; j++ {
			best := 0
			for k, v := range logits {
				if v > logits[best] {
					best = k
				}
			}
			if logits, err = m.Forward(context.Background(), []int32{int32(best)}, caches, false); err != nil {
				b.Fatal(err)
			}
		}
		dec += time.Since(start)
		decCPU += cpuTime() - cpu0
	}
	b.ReportMetric(float64(promptLen*b.N)/prefill.Seconds(), "prefill-tok/s")
	b.ReportMetric(float64(decode*b.N)/dec.Seconds(), "decode-tok/s")
	b.ReportMetric(float64(promptLen*b.N)/prefillCPU.Seconds(), "prefill-tok/cpu-s")
	b.ReportMetric(float64(decode*b.N)/decCPU.Seconds(), "decode-tok/cpu-s")
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBatchDecode measures batched decode steps (Model.ForwardBatch, one token per
// sequence per step) of 1, 2, 4 and 8 sequences after a 128-token prompt each, on the
// Qwen2-0.5B shape with 2 threads and fp16 caches: aggregate tokens/s, the product side of
// the bench's --streams scenario without the server, sampling or long contexts (the
// prompts are prefilled untimed). With float inputs each sequence's products cost about
// the same in a batch as alone, so the gain over one sequence is small on a few cores (see
// docs/concurrency.md).
//
//	go test -run '^$' -bench BatchDecode -benchtime 1x ./runner/model/
//	MLXG_CPU_INT8=0 MLXG_BENCH_PROMPT=2048 go test -run '^$' -bench BatchDecode -benchtime 1x ./runner/model/  (float inputs everywhere; longer prompts, whose prefill is not timed)
//	(MLXG_CPU_INT8 as the server reads it: unset, 8-bit inputs in batched passes only; 1, in every decode product; 0, none)
//	(MLXG_BENCH_STEPS sets the steps, MLXG_BENCH_SEQS=1,8 the sequence counts, MLXG_BENCH_KV=k8v4
//	quantized caches, MLXG_BENCH_PROFILE=FILE a profile of the steps)
func BenchmarkBatchDecode(b *testing.B) {
	m := loadBench(b)
	defer m.Close()
	promptLen, steps := 128, 24
	if v, err := strconv.Atoi(os.Getenv("MLXG_BENCH_PROMPT")); err == nil {
		promptLen = v
	}
	if v, err := strconv.Atoi(os.Getenv("MLXG_BENCH_STEPS")); err == nil {
		steps = v
	}
	counts := []int{1, 2, 4, 8}
	if v := os.Getenv("MLXG_BENCH_SEQS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("MLXG_BENCH_SEQS=%q: want sequence counts like 1,8", v)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("seqs-%d", n), func(b *testing.B) {
			var dec time.Duration
			for range b.N {
				seqs := make([]model.Sequence, n)
				for s := range seqs {
					caches, err := benchCaches(m)
					if err != nil {
						b.Fatal(err)
					}
					prompt := make([]int32, promptLen)
					for i := range prompt {
						prompt[i] = int32(1000 + (i*37+s*7919)%50000)
					}
					for i := 0; i < promptLen; i += 512 { // the server's num_batch chunks
						if _, err := m.Forward(context.Background(), prompt[i:min(i+512, promptLen)], caches, false); err != nil {
							b.Fatal(err)
						}
					}
					seqs[s] = model.Sequence{Tokens: []int32{int32(2000 + s)}, Caches: caches}
				}
				// MLXG_BENCH_PROFILE=FILE: a CPU profile of the decode steps alone (the last
				// sequence count's), without the prefills before them.
				if f := os.Getenv("MLXG_BENCH_PROFILE"); f != "" {
					out, err := os.Create(f)
					if err != nil {
						b.Fatal(err)
					}
					pprof.StartCPUProfile(out)
					defer func() { pprof.StopCPUProfile(); out.Close() }()
				}
				start := time.Now()
				for range steps {
					for s, r := range m.ForwardBatch(context.Background(), seqs) {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
						seqs[s].Tokens = []int32{int32(3000 + s)}
					}
				}
				dec += time.Since(start)
			}
			b.ReportMetric(float64(n*steps*b.N)/dec.Seconds(), "tok/s")
		})
	}
}

// benchCaches are fp16 KV caches, or with MLXG_BENCH_KV=k8v4 the server's default layout
// without its boundary layers: keys 8-bit in groups of 64, values 4-bit in groups of 32.
func benchCaches(m *model.Model) ([]kvstore.Layer, error) {
	if os.Getenv("MLXG_BENCH_KV") != "k8v4" {
		return m.NewCaches(false)
	}
	spec := kvstore.Spec{K: kvstore.AffineFormat(8, 64), V: kvstore.AffineFormat(4, 32)}
	caches := make([]kvstore.Layer, m.Config.NumLayers)
	for i := range caches {
		c, err := kvstore.NewQuantized(m.Config.NumKVHeads, m.Config.HeadDim, m.Config.HeadDim, spec, 0)
		if err != nil {
			return nil, err
		}
		caches[i] = c
	}
	return caches, nil
}

// BenchmarkPrefillLength measures prefill tokens/s of a 128-token prompt and of a 4096-token
// one fed in the server's 512-token chunks (num_batch), on the Qwen2-0.5B shape with 2
// threads and K8/V4 caches (benchCaches' layout, whatever MLXG_BENCH_KV says), and the
// ratio of the two in the same run: the bench's "4096 vs 128" row without the server.
// Medians over b.N runs (-benchtime 3x or more):
//
//	go test -run '^$' -bench PrefillLength -benchtime 3x ./runner/model/
func BenchmarkPrefillLength(b *testing.B) {
	b.Setenv("MLXG_BENCH_KV", "k8v4")
	m := loadBench(b)
	defer m.Close()
	rate := func(n int) (wall, cpu float64) {
		prompt := make([]int32, n)
		for i := range prompt {
			prompt[i] = int32(1000 + i*37%50000)
		}
		caches, err := benchCaches(m)
		if err != nil {
			b.Fatal(err)
		}
		start, cpu0 := time.Now(), cpuTime()
		for i := 0; i < n; i += 512 {
			if _, err := m.Forward(context.Background(), prompt[i:min(i+512, n)], caches, false); err != nil {
				b.Fatal(err)
			}
		}
		return float64(n) / time.Since(start).Seconds(), float64(n) / (cpuTime() - cpu0).Seconds()
	}
	var short, long, shortCPU, longCPU []float64
	rate(128) // warm the weights' pages
	for b.Loop() {
		w, c := rate(128)
		short, shortCPU = append(short, w), append(shortCPU, c)
		w, c = rate(4096)
		long, longCPU = append(long, w), append(longCPU, c)
	}
	b.ReportMetric(median(short), "p128-tok/s")
	b.ReportMetric(median(long), "p4096-tok/s")
	b.ReportMetric(median(long)/median(short), "ratio")
	b.ReportMetric(median(longCPU)/median(shortCPU), "cpu-ratio")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
