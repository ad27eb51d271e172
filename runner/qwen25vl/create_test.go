package qwen25vl_test

import (
	"context"
	"encoding/json"
	"os"
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
// The same with transformers 5's save_pretrained layout (text_config, model.language_model.*,
// model.visual.*), what testdata/vision_ref.py writes.
func TestCreateKeepsTower(t *testing.T) {
	for _, tf5 := range []bool{false, true} {
		t.Run(map[bool]string{false: "qwen", true: "transformers5"}[tf5], func(t *testing.T) { createKeepsTower(t, tf5) })
	}
}

func createKeepsTower(t *testing.T, tf5 bool) {
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
	if tf5 {
		hf = transformers5(t, hf, filepath.Join(root, "tf5"))
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
		ids, md := modeltest.MediaAt(m, text, []int{2}, sp, img)
		return modeltest.ForwardMedia(t, m, ids, md)
	}
	if r := modeltest.MaxRel(logits(a, sa), logits(b, sb)); r > 1e-6 {
		t.Errorf("logits of the converted checkpoint differ by %.3g", r)
	}
}

// transformers5 rewrites the Qwen-layout checkpoint src as transformers 5 saves it: the text
// fields under text_config, the language model under model.language_model.*, the tower
// under model.visual.*.
func transformers5(t *testing.T, src, dst string) string {
	t.Helper()
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		tn, _ := ck.Tensor(name)
		c := *tn
		switch {
		case strings.HasPrefix(name, "visual."):
			c.Name = "model." + name
		case strings.HasPrefix(name, "model."):
			c.Name = "model.language_model." + strings.TrimPrefix(name, "model.")
		}
		ts = append(ts, c)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	top := map[string]any{"text_config": map[string]any{}}
	for k, v := range cfg {
		switch k {
		case "model_type", "architectures", "vision_config", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id":
			top[k] = v
		case "rope_scaling", "rope_parameters": // replaced below, after the loop, whatever the map's order
		default:
			top["text_config"].(map[string]any)[k] = v
		}
	}
	rp, _ := cfg["rope_scaling"].(map[string]any)
	top["text_config"].(map[string]any)["rope_parameters"] = map[string]any{"rope_type": "default",
		"rope_theta": cfg["rope_theta"], "mrope_section": rp["mrope_section"]}
	top["text_config"].(map[string]any)["model_type"] = "qwen2_5_vl_text"
	raw, _ = json.Marshal(top)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	pre, err := os.ReadFile(filepath.Join(src, "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "preprocessor_config.json"), pre, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
