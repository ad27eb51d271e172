package qwen25vl_test

import (
	"context"
	"path/filepath"
	"slices"
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

// mediaPrompt lays out text tokens with images after the given text positions.
func mediaPrompt(m *model.Model, text []int32, at []int, spans []model.Span, images []vision.Image) ([]int32, *model.Media) {
	md := &model.Media{Hidden: m.Config.HiddenSize}
	var ids []int32
	k := 0
	for i := 0; i <= len(text); i++ {
		for k < len(at) && at[k] == i {
			s := spans[k]
			s.Start = len(ids)
			md.Spans = append(md.Spans, s)
			ids = append(ids, model.MediaIDs(images[k].Hash, s.N())...)
			k++
		}
		if i < len(text) {
			ids = append(ids, text[i])
		}
	}
	return ids, md
}

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
	m := load(t, vl)
	ctx := context.Background()
	imgs := []vision.Image{testImage(40, 48, 1), testImage(64, 32, 2), testImage(40, 48, 9)}
	spans, err := m.EncodeImages(ctx, imgs)
	if err != nil {
		t.Fatal(err)
	}
	if spans[0].Grid != [3]int{1, 6, 5} {
		t.Fatalf("a 40×48 image's grid %v, want [1 6 5]", spans[0].Grid)
	}
	text := modeltest.Tokens(5, 12)
	run := func(ids []int32, md *model.Media, chunk int) []float32 {
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		model.SetMedia(caches, md)
		defer model.SetMedia(caches, nil)
		var last []float32
		for i := 0; i < len(ids); i += chunk {
			if last, err = m.Forward(ctx, ids[i:min(i+chunk, len(ids))], caches, false); err != nil {
				t.Fatal(err)
			}
		}
		return last
	}
	plain := run(text, nil, len(text))
	for _, c := range []struct {
		name   string
		at     []int
		images []int
	}{
		{"one image", []int{3}, []int{0}},
		{"two images", []int{2, 7}, []int{0, 1}},
	} {
		var sp []model.Span
		var im []vision.Image
		for _, i := range c.images {
			sp, im = append(sp, spans[i]), append(im, imgs[i])
		}
		ids, md := mediaPrompt(m, text, c.at, sp, im)
		whole := run(ids, md, len(ids))
		for _, chunk := range []int{1, 7} {
			if r := modeltest.MaxRel(run(ids, md, chunk), whole); r > 1e-5 {
				t.Errorf("%s: chunks of %d differ from one pass by %.3g", c.name, chunk, r)
			}
		}
		if r := modeltest.MaxRel(whole, plain); r < 1e-3 {
			t.Errorf("%s: the image rows changed nothing (%.3g)", c.name, r)
		}
		other := slices.Clone(sp)
		other[0] = spans[2]
		oids, omd := mediaPrompt(m, text, c.at, other, append([]vision.Image{imgs[2]}, im[1:]...))
		if r := modeltest.MaxRel(run(oids, omd, len(oids)), whole); r < 1e-4 {
			t.Errorf("%s: another image gave the same logits (%.3g)", c.name, r)
		}
	}
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
