package qwen3next_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// visionModel is the tiny Qwen3-Next of load in Qwen3.5's layout with a random tower
// (registry/randmodel.AddQwenVision) and an mrope_section over its 8 rotary frequencies.
func visionModel(t testing.TB) *model.Model { return visionModelWith(t, randmodel.TinyQwenVision()) }

// visionModelWith is visionModel with a tower of shape v.
func visionModelWith(t testing.TB, v randmodel.QwenVision) *model.Model {
	t.Helper()
	next := load(t.(*testing.T), 0)
	dst := filepath.Join(t.TempDir(), "qwen35v")
	qwen35Layout(t.(*testing.T), next.Dir, dst, 2, 4, 32, 32)
	addVision(t, dst, v)
	return modeltest.LoadVision(t, dst, cpu.New(2))
}

// addVision gives the Qwen3.5 checkpoint in dst an mrope_section over its 8 rotary
// frequencies and a random tower of shape v.
func addVision(t testing.TB, dst string, v randmodel.QwenVision) {
	t.Helper()
	path := filepath.Join(dst, "config.json")
	raw, _ := os.ReadFile(path)
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1e6,
		"partial_rotary_factor": 0.25, "mrope_section": []int{3, 3, 2}, "mrope_interleaved": true}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddQwenVision(dst, v, 7); err != nil {
		t.Fatal(err)
	}
}

// testImage is a w×h image whose pixels depend on seed.
var testImage = modeltest.Image

// TestTowerBatchedEqualsAlone: images encoded together give, bit for bit, what each gives
// alone; each image's features have its grid's rows of the language model's width.
func TestTowerBatchedEqualsAlone(t *testing.T) {
	m := visionModel(t)
	ctx := context.Background()
	imgs := []vision.Image{testImage(64, 48, 1), testImage(40, 72, 2), testImage(64, 48, 3)}
	both, err := m.EncodeImages(ctx, imgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range imgs {
		alone, err := m.EncodeImages(ctx, []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		if alone[0].Grid != both[i].Grid || !slices.Equal(alone[0].Rows, both[i].Rows) {
			t.Errorf("image %d: batched %v differs from alone %v (max rel %.3g)", i, both[i].Grid, alone[0].Grid, modeltest.MaxRel(both[i].Rows, alone[0].Rows))
		}
		if len(both[i].Rows) != both[i].N()*m.Config.HiddenSize {
			t.Errorf("image %d: %d values for grid %v", i, len(both[i].Rows), both[i].Grid)
		}
	}
	// 64×48 is 8×6 tokens of 8×8 pixels; 40×72 is 5×9 (smart_resize keeps it).
	if both[0].Grid != [3]int{1, 6, 8} || both[1].Grid != [3]int{1, 9, 5} {
		t.Errorf("grids %v %v", both[0].Grid, both[1].Grid)
	}
	if slices.Equal(both[0].Rows, both[2].Rows) {
		t.Error("different images gave the same features")
	}
}

// TestImagePrompts: prompts with 0, 1 and 2 images run; chunked prefill (chunks cutting
// through an image or not) gives one pass's logits; decode steps after images go on at
// the shifted M-RoPE positions as a prefill of the same rows does; a sequence with media
// but no image rows computes plain RoPE's logits; a different image changes the logits.
func TestImagePrompts(t *testing.T) {
	modeltest.CheckImagePrompts(t, visionModel(t), modeltest.ImagePrompts{
		Images:     [3]vision.Image{testImage(32, 32, 1), testImage(48, 32, 2), testImage(32, 32, 9)},
		Chunks:     []int{1, 5, 16},
		PlainMRoPE: true, ImageFirst: true,
	})
}

// TestMediaPositions: get_rope_index's layout for text, an image of 2×3 tokens, text.
func TestMediaPositions(t *testing.T) {
	md := &model.Media{Spans: []model.Span{{Start: 2, Grid: [3]int{1, 2, 3}}}}
	var got [][3]int
	for i := range 10 {
		got = append(got, md.Position(i))
	}
	want := [][3]int{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {2, 2, 3}, {2, 2, 4}, {2, 3, 2}, {2, 3, 3}, {2, 3, 4}, {5, 5, 5}, {6, 6, 6}}
	if !slices.Equal(got, want) {
		t.Errorf("positions %v, want %v", got, want)
	}
}

// TestEncodeTime logs the time to preprocess and encode one 1024×768 image on the CPU
// backend (2 threads) with a tiny tower of Qwen3.5's patch geometry (16-pixel patches,
// 2×2 merge, a 48×48 position grid, its default pixel budget): 3,072 patches, 768 tokens.
func TestEncodeTime(t *testing.T) {
	v := randmodel.TinyQwenVision()
	v.Patch, v.NumPositions, v.MinPixels, v.MaxPixels = 16, 2304, 65536, 16777216
	m := visionModelWith(t, v)
	sp, pre, took := modeltest.EncodeTime(t, m)
	if sp.Grid != [3]int{1, 24, 32} {
		t.Fatalf("grid %v", sp.Grid)
	}
	t.Logf("1024×768 on the CPU backend (2 threads), tower of %d blocks × %d wide: %d patches, %d tokens in %v (preprocessing alone %v)",
		v.Depth, v.Hidden, 4*sp.N(), sp.N(), took, pre)
}
