package model_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// BenchmarkVerifyPass times speculative decoding's verification passes (Model.ForwardRows,
// each row computed as a one-token step computes it) of 2, 4, 8 and 9 rows against a
// one-token decode step, on qwen3-tiny ($MLXG_SHARED/models/qwen3-tiny) converted to MLX
// 4-bit (group 64) under $MLXG_BENCH_DIR, 2 threads, float inputs (MLXG_CPU_INT8=1: 8-bit),
// after a 256-token prompt, the caches cut back after each pass; the passes and the step
// alternate, and it reports each pass's median time in steps (steps/pass-P: 1 would be a
// pass as cheap as one step, P one as dear as P steps):
//
//	go test -run '^$' -bench VerifyPass -benchtime 100x ./runner/model/
func BenchmarkVerifyPass(b *testing.B) {
	src := filepath.Join(os.Getenv("MLXG_SHARED"), "models", "qwen3-tiny")
	if _, err := os.Stat(filepath.Join(src, "config.json")); err != nil {
		b.Skip("no qwen3-tiny under $MLXG_SHARED/models")
	}
	root := os.Getenv("MLXG_BENCH_DIR")
	if root == "" {
		root = filepath.Join(os.TempDir(), "mlxg-bench")
	}
	dir := filepath.Join(root, "qwen3-tiny-q4")
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		if _, err := create.Convert(context.Background(), src, dir, create.Options{Bits: 4, GroupSize: 64}); err != nil {
			b.Fatal(err)
		}
	}
	be := cpu.New(2)
	be.UseInt8(os.Getenv("MLXG_CPU_INT8") == "1")
	m, err := model.Load(dir, be)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	caches, err := m.NewCaches(false)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int32, 256)
	for i := range prompt {
		prompt[i] = int32(1000 + i*37%20000)
	}
	if _, err := m.Forward(ctx, prompt, caches, false); err != nil {
		b.Fatal(err)
	}
	rows := []int{1, 2, 4, 8, 9}
	times := make([][]float64, len(rows))
	tokens := []int32{3000, 3001, 3002, 3003, 3004, 3005, 3006, 3007, 3008}
	for b.Loop() {
		for i, P := range rows {
			t0 := time.Now()
			var l []float32
			if P == 1 {
				l, err = m.Forward(ctx, tokens[:1], caches, false)
			} else {
				l, err = m.ForwardRows(ctx, tokens[:P], caches)
			}
			if err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], float64(time.Since(t0)))
			m.Recycle(l)
			for _, c := range caches {
				c.Truncate(len(prompt))
			}
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	step := med(times[0])
	b.ReportMetric(step/1e3, "us/step")
	for i, P := range rows[1:] {
		b.ReportMetric(med(times[i+1])/step, fmt.Sprintf("steps/pass-%d", P))
	}
}
