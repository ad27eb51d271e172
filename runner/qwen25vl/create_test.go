package qwen25vl_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// TestCreateKeepsTower: `mlxg create` of a Qwen2.5-VL in Qwen's own layout (model.*,
// lm_head, visual.* with the channels-first patch kernel) writes mlx-vlm's layout
// (language_model.*, vision_tower.* in float32), which loads with its tower and computes
// the features and logits of the same weights written in that layout directly.
func TestCreateKeepsTower(t *testing.T) {
	cfg := randmodel.Tiny("qwen2", 512)
	root := t.TempDir()
	hf, out, direct := filepath.Join(root, "hf"), filepath.Join(root, "out"), filepath.Join(root, "direct")
	for _, d := range []string{hf, direct} {
		if err := randmodel.Generate(d, cfg, randmodel.Options{Seed: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if err := randmodel.AddQwen25VisionHF(hf, randmodel.TinyQwen25Vision(), 7); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddQwen25Vision(direct, randmodel.TinyQwen25Vision(), 7); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{}); err != nil {
		t.Fatal(err)
	}
	hs, err := safetensors.ReadDirHeaders(out)
	if err != nil {
		t.Fatal(err)
	}
	tower := 0
	for _, h := range hs {
		for _, tn := range h.Tensors {
			switch {
			case strings.HasPrefix(tn.Name, "vision_tower."):
				tower++
				if tn.DType != safetensors.F32 {
					t.Errorf("%s is %s: the tower stays in float32", tn.Name, tn.DType)
				}
				if tn.Name == "vision_tower.patch_embed.proj.weight" && !slices.Equal(tn.Shape, []int{32, 2, 4, 4, 3}) {
					t.Errorf("patch kernel %v: want channels-last [32 2 4 4 3]", tn.Shape)
				}
			case !strings.HasPrefix(tn.Name, "language_model."):
				t.Errorf("%s: not in mlx-vlm's layout", tn.Name)
			}
		}
	}
	if tower == 0 || !model.HasVision(out) {
		t.Fatalf("the converted checkpoint has %d tower tensors (vision %v)", tower, model.HasVision(out))
	}
	a, b := load(t, out), load(t, direct)
	ctx := context.Background()
	img := []vision.Image{testImage(40, 48, 3)}
	sa, err := a.EncodeImages(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.EncodeImages(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if r := modeltest.MaxRel(sa[0].Rows, sb[0].Rows); r > 1e-6 {
		t.Errorf("features of the converted tower differ by %.3g", r)
	}
	text := modeltest.Tokens(5, 12)
	logits := func(m *model.Model, sp []model.Span) []float32 {
		ids, md := mediaPrompt(m, text, []int{2}, sp, img)
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		model.SetMedia(caches, md)
		out, err := m.Forward(ctx, ids, caches, false)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if r := modeltest.MaxRel(logits(a, sa), logits(b, sb)); r > 1e-6 {
		t.Errorf("logits of the converted checkpoint differ by %.3g", r)
	}
}
