package runner

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// benchModel returns a Qwen2-0.5B-shaped random checkpoint converted to MLX 4-bit
// (group 64), made once under $MLXG_BENCH_DIR (default: the system temp dir) and
// shared with runner/model's benchmark.
func benchModel(b *testing.B) string {
	root := os.Getenv("MLXG_BENCH_DIR")
	if root == "" {
		root = filepath.Join(os.TempDir(), "mlxg-bench")
	}
	dst := filepath.Join(root, "qwen2-0.5b-q4")
	if _, err := os.Stat(filepath.Join(dst, "config.json")); err == nil {
		return dst
	}
	src := filepath.Join(root, "qwen2-0.5b-bf16")
	if err := randmodel.Generate(src, randmodel.Qwen2_0_5B(), randmodel.Options{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(src)
	if _, err := create.Convert(context.Background(), src, dst, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		b.Fatal(err)
	}
	return dst
}

// BenchmarkGenerateQwen2_0_5B_Q4 is the end-to-end measure: a 256-token
// prompt and 64 generated tokens through the engine (chunked prefill, Ollama's
// default sampling, the decode loop) on a Qwen2-0.5B-shaped 4-bit checkpoint with 2
// threads. It reports prefill and decode tokens/s; Ollama on the same machine class
// does ~200 and 47-50 at q4_K_M.
//
//	go test -run '^$' -bench GenerateQwen2 -benchtime 3x ./runner/
func BenchmarkGenerateQwen2_0_5B_Q4(b *testing.B) {
	e, err := LoadModel(benchModel(b), LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt := make([]int32, 256)
	for i := range prompt {
		prompt[i] = int32(1000 + i*7919%100000)
	}
	o := DefaultOptions()
	o.NumPredict, o.Seed = 64, 1
	e.eos = nil // random weights: never stop early
	var prefill, decode float64
	n := 0
	for b.Loop() {
		n++
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			b.Fatal(err)
		}
		prefill += res.PromptRate()
		decode += res.EvalRate()
	}
	b.ReportMetric(prefill/float64(n), "prefill-tok/s")
	b.ReportMetric(decode/float64(n), "decode-tok/s")
}

// decodeAllocs is what one decoded token allocates through e.GenerateTokens: the
// difference between 64 and 16 generated tokens after a 32-token prompt, per token
// (prefill and per-request set-up cancel out).
func decodeAllocs(tb testing.TB, e *Engine) (allocs, bytes float64) {
	tb.Helper()
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(1 + i*7919%(e.Model.Config.VocabSize-1))
	}
	e.eos = nil // random weights: never stop early
	measure := func(n int) (uint64, uint64) {
		o := DefaultOptions()
		o.NumPredict, o.Seed = n, 1
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil }); err != nil {
			tb.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs, after.TotalAlloc - before.TotalAlloc
	}
	measure(16) // warm-up: pools, scratch
	m16, b16 := measure(16)
	m64, b64 := measure(64)
	return (float64(m64) - float64(m16)) / 48, (float64(b64) - float64(b16)) / 48
}

// BenchmarkDecodeAllocs reports heap allocations per decoded token on the bench model.
//
//	go test -run '^$' -bench DecodeAllocs -benchtime 1x ./runner/
func BenchmarkDecodeAllocs(b *testing.B) {
	e, err := LoadModel(benchModel(b), LoadOptions{Threads: 2, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var allocs, bytes float64
	n := 0
	for b.Loop() {
		a, by := decodeAllocs(b, e)
		allocs += a
		bytes += by
		n++
	}
	b.ReportMetric(allocs/float64(n), "allocs/token")
	b.ReportMetric(bytes/float64(n), "B/token")
}
