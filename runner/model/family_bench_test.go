package model_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// BenchmarkFamilyDecode measures decode tokens/s and peak RSS on the CPU backend (2
// threads, MLX 4-bit weights in groups of 64, fp16 caches) of a random checkpoint of a
// family's real shape cut to a few layers (MLXG_BENCH_LAYERS, default 4; randmodel's Cut,
// which keeps every expert and may keep a few more layers where the family's pattern
// needs them): the family's own kernels (windows, latent attention, experts, query
// scales, longrope, fused projections, vocabulary) at a size this machine holds.
// MLXG_BENCH_FAMILY picks one of randmodel.Shapes (gpt-oss-20b, glm-4.7-flash,
// gemma4-e4b, qwen3-8b, ...); the checkpoint is made once under $MLXG_BENCH_DIR. Peak RSS
// is the process's high water mark from the load on (the generator's memory is released
// and the mark reset first: /proc/self/clear_refs).
//
//	MLXG_BENCH_FAMILY=phi4-mini go test -run '^$' -bench FamilyDecode -benchtime 1x ./runner/model/
func BenchmarkFamilyDecode(b *testing.B) {
	name := os.Getenv("MLXG_BENCH_FAMILY")
	shape, ok := randmodel.Shapes[name]
	if !ok {
		names := slices.Sorted(maps.Keys(randmodel.Shapes))
		b.Skipf("MLXG_BENCH_FAMILY=%q: set it to one of %s", name, strings.Join(names, ", "))
	}
	layers := 4
	if v, err := strconv.Atoi(os.Getenv("MLXG_BENCH_LAYERS")); err == nil && v > 0 {
		layers = v
	}
	root := os.Getenv("MLXG_BENCH_DIR")
	if root == "" {
		root = filepath.Join(os.TempDir(), "mlxg-bench")
	}
	cfg := shape().Cut(layers)
	dst := filepath.Join(root, fmt.Sprintf("%s-%dl-q4", name, cfg.NumLayers))
	if _, err := os.Stat(filepath.Join(dst, "config.json")); err != nil {
		src := dst + "-bf16"
		if err := randmodel.Generate(src, cfg, randmodel.Options{Seed: 1}); err != nil {
			b.Fatal(err)
		}
		if _, err := create.Convert(context.Background(), src, dst, create.Options{Bits: 4, GroupSize: 64}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(src)
	}
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0o600) // resets VmHWM where Linux allows
	m, err := model.Load(dst, cpu.New(2))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const promptLen, decode = 128, 32
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(1000 + i*37%20000)
	}
	var dec time.Duration
	for range b.N {
		caches, _ := m.NewCaches(false)
		logits, err := m.Forward(context.Background(), prompt, caches, false)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for range decode {
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
	}
	b.ReportMetric(float64(decode*b.N)/dec.Seconds(), "decode-tok/s")
	b.ReportMetric(float64(cfg.NumLayers), "layers")
	b.ReportMetric(float64(m.WeightBytes())/(1<<20), "weights-MiB")
	if hwm := vmHWM(); hwm > 0 {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	}
}

// vmHWM is the process's peak resident set in bytes (/proc/self/status), 0 where unknown.
func vmHWM() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
