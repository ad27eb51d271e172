package qwen3next_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/qwen3next"
)

// load converts a random Qwen3-Next to the MLX layout (bits 0: float32) and loads it.
func load(t *testing.T, bits int) *model.Model {
	t.Helper()
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyQwen3Next(256), randmodel.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Load(hf, cpu.New(2)); err == nil {
		t.Fatal("the Hugging Face layout loaded; want an error asking for mlxg create")
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{Bits: bits, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(mlx, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestChunkedPrefill: a prompt split across prefill chunks of 1, 4 and 7 tokens gives
// the logits of one pass, and the caches are one State per linear layer plus a full
// cache on the fourth.
func TestChunkedPrefill(t *testing.T) {
	for _, bits := range []int{0, 4} {
		m := load(t, bits)
		p := modeltest.Tokens(3, 23)
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range caches {
			_, linear := c.(qwen3next.State)
			if linear != ((i+1)%4 != 0) {
				t.Fatalf("layer %d has a %T cache", i, c)
			}
		}
		if s := model.Seq(caches); len(s.Recurrent) != 3 || s.Layers[0] != nil || s.Layers[3] != caches[3] {
			t.Fatalf("model.Seq gives %d recurrent states and layers %v", len(s.Recurrent), s.Layers)
		}
		want := modeltest.Forward(t, m, caches, p, len(p))
		// Quantized chunks of fewer than 4 rows go through the decode kernels, which add
		// a group's products in another order than the prefill's dequantized product: the
		// two agree to float32 rounding (2.3e-5 here with AVX2, 1.5e-5 with the plain Go
		// kernels), not to the float path's 1e-5.
		tol := 1e-5
		if bits > 0 {
			tol = 5e-5
		}
		for _, chunk := range []int{1, 4, 7} {
			caches, _ := m.NewCaches(true)
			if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p, chunk), want); r > tol {
				t.Errorf("bits %d: chunks of %d differ from one pass by %.3g", bits, chunk, r)
			}
		}
	}
}

// TestResumeFromCheckpoint: rewinding every cache to a position where the recurrent
// states were checkpointed (as a prefix-cache hit does) and recomputing the rest gives
// the logits of a cold run; rewinding to a position without a checkpoint is an error.
func TestResumeFromCheckpoint(t *testing.T) {
	m := load(t, 0)
	p := modeltest.Tokens(3, 20)
	caches, _ := m.NewCaches(true)
	modeltest.Forward(t, m, caches, p[:12], 12)
	for _, c := range caches {
		if s, ok := c.(qwen3next.State); ok {
			s.Checkpoint()
		}
	}
	want := modeltest.Forward(t, m, caches, p[12:], 8)
	for _, c := range caches {
		if err := c.Truncate(12); err != nil {
			t.Fatal(err)
		}
	}
	if r := modeltest.MaxRel(modeltest.Forward(t, m, caches, p[12:], 3), want); r > 1e-5 {
		t.Errorf("resumed from the checkpoint at 12: logits differ by %.3g", r)
	}
	if err := caches[0].Truncate(5); err == nil {
		t.Error("rewinding a recurrent state to a position without a checkpoint worked")
	}
}

// TestWrongCache: full-attention caches on linear layers are an error, not a panic.
func TestWrongCache(t *testing.T) {
	m := load(t, 0)
	caches := make([]kvstore.Layer, m.Config.NumLayers)
	for i := range caches {
		caches[i], _ = kvstore.NewFull(m.Config.NumKVHeads, m.Config.HeadDim, m.Config.HeadDim, true)
	}
	if _, err := m.Forward(context.Background(), modeltest.Tokens(3, 3), caches, false); err == nil {
		t.Fatal("a full-attention cache on a linear-attention layer was accepted")
	}
}

// TestPolicyCaches: the KV policy's caches (kvstore.NewCaches over ShapeFromConfig, nil
// for linear layers, which Forward fills with the model's recurrent States) with the
// attention layer quantized to K8/V4 run a chunked prefill and decode steps, close to
// the float32 caches.
func TestPolicyCaches(t *testing.T) {
	m := load(t, 4)
	raw, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(raw, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	layout, err := kvstore.NewLayout(shape, kvstore.Spec{K: kvstore.AffineFormat(8, 32), V: kvstore.AffineFormat(4, 32)}, 0, kvstore.SpecF16)
	if err != nil {
		t.Fatal(err)
	}
	if layout.KVLayerCount != 1 {
		t.Fatalf("%d KV layers, want 1 of 4", layout.KVLayerCount)
	}
	caches, err := kvstore.NewCaches(shape, layout)
	if err != nil {
		t.Fatal(err)
	}
	p := modeltest.Tokens(3, 24)
	got := append(modeltest.Forward(t, m, caches, p[:18], 5), modeltest.Forward(t, m, caches, p[18:], 1)...)
	if _, ok := caches[0].(qwen3next.State); !ok {
		t.Fatalf("layer 0's cache is %T after Forward, want the filled-in State", caches[0])
	}
	ref, _ := m.NewCaches(true)
	if r := modeltest.MaxRel(got, modeltest.Forward(t, m, ref, p, 24)); r > 0.1 || math.IsNaN(r) {
		t.Errorf("quantized KV differs from float32 by %.3g", r)
	} else {
		t.Logf("quantized KV vs float32 caches: relative difference %.3g", r)
	}
}

// TestOutOfStep: attention caches restored without the linear layers' states (what a
// prefix-cache hit that does not carry them would leave) are an error, not wrong logits.
func TestOutOfStep(t *testing.T) {
	m := load(t, 0)
	caches, _ := m.NewCaches(false)
	modeltest.Forward(t, m, caches, modeltest.Tokens(3, 6), 6)
	fresh, _ := m.NewCaches(false)
	fresh[3] = caches[3] // the attention layer holds 6 positions, the states none
	if _, err := m.Forward(context.Background(), modeltest.Tokens(3, 2), fresh, false); err == nil {
		t.Fatal("caches out of step were accepted")
	}
}
