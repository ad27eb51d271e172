package qwen25vl_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/qwen25vl"
	"github.com/mlxg/mlxg/vision"
)

// tinyDirs writes a tiny Qwen2 checkpoint and the same weights as Qwen2.5-VL with a
// random tower (randmodel.AddQwen25Vision).
func tinyDirs(t *testing.T) (qwen2, vl string) {
	t.Helper()
	cfg := randmodel.Tiny("qwen2", 512)
	qwen2, vl = filepath.Join(t.TempDir(), "qwen2"), filepath.Join(t.TempDir(), "vl")
	for _, d := range []string{qwen2, vl} {
		if err := randmodel.Generate(d, cfg, randmodel.Options{Seed: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if err := randmodel.AddQwen25Vision(vl, randmodel.TinyQwen25Vision(), 7); err != nil {
		t.Fatal(err)
	}
	return qwen2, vl
}

func load(t *testing.T, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// testImage is a w×h image whose pixels depend on seed.
var testImage = modeltest.Image

// TestTextEqualsQwen2: without images, Qwen2.5-VL's language model computes Qwen2's
// logits on the same weights (M-RoPE at positions (i, i, i) is RoPE).
func TestTextEqualsQwen2(t *testing.T) {
	q2, vl := tinyDirs(t)
	a, b := load(t, q2), load(t, vl)
	if b.Vision() == nil || !model.HasVision(vl) || model.HasVision(q2) {
		t.Fatal("the tower was not loaded")
	}
	ctx := context.Background()
	text := modeltest.Tokens(5, 12)
	run := func(m *model.Model) []float32 {
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(ctx, text, caches, false)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if r := modeltest.MaxRel(run(a), run(b)); r > 1e-6 {
		t.Errorf("qwen2_5_vl's text logits differ from qwen2's by %.3g", r)
	}
}

// TestImagePrompts: prompts with 1 and 2 images: chunked prefill (chunks cutting through
// an image or not, decode steps after it at the rope delta's positions) gives one pass's
// logits; the image rows change the logits, and another image changes them again.
func TestImagePrompts(t *testing.T) {
	_, vl := tinyDirs(t)
	modeltest.CheckImagePrompts(t, load(t, vl), modeltest.ImagePrompts{
		Images:    [3]vision.Image{testImage(40, 48, 1), testImage(64, 32, 2), testImage(40, 48, 9)},
		Chunks:    []int{1, 7},
		FirstGrid: [3]int{1, 6, 5},
	})
}

// TestVisionMemory: the memory plan's tower figures are the tower's tensor bytes, the pixel
// budget's largest image and its features; the estimate of the CPU backend's buffers while
// encoding that image bounds what the backend counts it held at once (ActivationPeak).
func TestVisionMemory(t *testing.T) {
	_, vl := tinyDirs(t)
	m := load(t, vl)
	v := randmodel.TinyQwen25Vision()
	vm, err := model.VisionMemoryOf(vl)
	if err != nil {
		t.Fatal(err)
	}
	weights := modeltest.TowerBytes(t, vl, "")
	patches := v.MaxPixels / (v.Patch * v.Patch)
	if vm.Weights != weights || vm.MaxPatches != patches || vm.Encode <= 0 || vm.Features <= 0 {
		t.Fatalf("%+v; want weights %d, %d patches", vm, weights, patches)
	}
	vc := qwen25vl.VisionConfig{Depth: v.Depth, Hidden: v.Hidden, Act: v.Act, Intermediate: v.Intermediate, Heads: v.Heads,
		InChannels: v.InChannels, Patch: v.Patch, Merge: v.Merge, Temporal: v.Temporal, Out: m.Config.HiddenSize, Window: v.Window, FullAttn: v.FullAttn}
	buffers := qwen25vl.EncodeBuffers(vc, patches)
	side := 1
	for (side+1)*(side+1) <= v.MaxPixels {
		side++
	}
	peak, _ := modeltest.EncodePeak(t, m, testImage(side, side, 4))
	t.Logf("largest image (%d patches): the backend held at most %d bytes, estimated %d (%.2f×)", patches, peak, buffers, float64(buffers)/float64(peak))
	if buffers < peak || buffers > peak+peak/4 {
		t.Errorf("estimate %d bytes for a peak of %d", buffers, peak)
	}
}
