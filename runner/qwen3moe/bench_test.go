package qwen3moe_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// benchPair returns a 4-bit qwen3_moe checkpoint (16 experts, top 4 of intermediate 384)
// and a 4-bit dense qwen3 with the same active parameters (intermediate 4×384), made
// once under $MLXG_BENCH_DIR (default: the temp dir).
func benchPair(b *testing.B) (moe, dense string) {
	root := os.Getenv("MLXG_BENCH_DIR")
	if root == "" {
		root = filepath.Join(os.TempDir(), "mlxg-bench")
	}
	d := randmodel.Tiny("qwen3", 8192)
	d.HiddenSize, d.NumLayers, d.NumHeads, d.NumKVHeads, d.HeadDim, d.DType = 768, 6, 12, 4, 64, "bfloat16"
	m := d
	m.Arch, m.NumExperts, m.TopK, m.MoEIntermediate, m.NormTopK = "qwen3_moe", 16, 4, 384, true
	d.IntermediateSize = m.TopK * m.MoEIntermediate
	var dirs [2]string
	for i, cfg := range []randmodel.Config{m, d} {
		dst := filepath.Join(root, cfg.Arch+"-active-q4")
		dirs[i] = dst
		if _, err := os.Stat(filepath.Join(dst, "config.json")); err == nil {
			continue
		}
		src := dst + "-bf16"
		if err := randmodel.Generate(src, cfg, randmodel.Options{Seed: 1}); err != nil {
			b.Fatal(err)
		}
		if _, err := create.Convert(context.Background(), src, dst, create.Options{Bits: 4, GroupSize: 64}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(src)
	}
	return dirs[0], dirs[1]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeMoEvsDense measures decode tokens per CPU-second (2 threads, 32 steps
// after a 16-token prompt) of the MoE model and of the dense model with the same active
// parameters, alternating them so machine load hits both alike, and reports their ratio:
//
//	go test -run '^$' -bench DecodeMoEvsDense -benchtime 3x ./runner/qwen3moe/
func BenchmarkDecodeMoEvsDense(b *testing.B) {
	moeDir, denseDir := benchPair(b)
	var models [2]*model.Model
	for i, dir := range []string{moeDir, denseDir} {
		m, err := model.Load(dir, cpu.New(2))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		models[i] = m
	}
	const decode = 32
	var cpuSecs [2]time.Duration
	for n := 0; n < b.N; n++ {
		for i, m := range models {
			caches, _ := m.NewCaches(false)
			prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
			if _, err := m.Forward(context.Background(), prompt, caches, false); err != nil {
				b.Fatal(err)
			}
			start := cpuTime()
			tok := int32(17)
			for s := 0; s < decode; s++ {
				logits, err := m.Forward(context.Background(), []int32{tok}, caches, false)
				if err != nil {
					b.Fatal(err)
				}
				tok = int32((s*131 + int(logits[0]*1000)&0xff) % 8192) // depends on the output
			}
			cpuSecs[i] += cpuTime() - start
		}
	}
	rate := func(i int) float64 { return float64(decode*b.N) / cpuSecs[i].Seconds() }
	b.ReportMetric(rate(0), "moe-tok/cpu-s")
	b.ReportMetric(rate(1), "dense-tok/cpu-s")
	b.ReportMetric(rate(0)/rate(1), "moe/dense")
	b.ReportMetric(float64(models[0].WeightBytes())/float64(models[1].WeightBytes()), "moe/dense-weight-bytes")
}
