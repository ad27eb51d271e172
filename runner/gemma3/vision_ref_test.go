package gemma3_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// visionRefs is testdata/vision/refs.json, written by testdata/vision_ref.py.
type visionRefs struct {
	Transformers string `json:"transformers"`
	Images       []struct {
		File         string    `json:"file"`
		PixelValues  []float32 `json:"pixel_values"`
		Features     []float32 `json:"features"`
		FeatureShape []int     `json:"feature_shape"`
	} `json:"images"`
	Cases []struct {
		Name         string    `json:"name"`
		Images       []int     `json:"images"`
		InputIDs     []int32   `json:"input_ids"`
		Logits       []float32 `json:"logits"`
		LogitsCausal []float32 `json:"logits_causal"`
	} `json:"cases"`
}

// refDir is where vision_ref.py writes.
var refDir = filepath.Join("testdata", "vision")

// TestVisionReference checks Gemma 3's image input against transformers: pixel_values of
// the images (Pillow's bilinear resize reproduced), the image features, and the last
// position's logits for prompts with 0, 1 and 2 images, on the checkpoint vision_ref.py
// saved, converted by `mlxg create`; with images the logits must also be far from
// transformers' without the bidirectional image mask.
func TestVisionReference(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(refDir, "refs.json"))
	if err != nil {
		t.Skip("no transformers reference: run python3 runner/gemma3/testdata/vision_ref.py (transformers 5, torch, Pillow)")
	}
	var refs visionRefs
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatal(err)
	}
	mlx := filepath.Join(t.TempDir(), "mlx")
	if _, err := create.Convert(context.Background(), filepath.Join(refDir, "ckpt"), mlx, create.Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(mlx, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v := m.Vision()
	if v == nil {
		t.Fatal("the converted checkpoint's tower was not loaded")
	}
	var spans []model.Span
	var imgs []vision.Image
	for _, ri := range refs.Images {
		data, err := os.ReadFile(filepath.Join(refDir, ri.File))
		if err != nil {
			t.Fatal(err)
		}
		rgb, err := vision.Decode(data, vision.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		px, err := v.Processor().Process(rgb)
		if err != nil {
			t.Fatal(err)
		}
		if d := modeltest.MaxAbs(px.Values, ri.PixelValues); d > 1e-6 {
			t.Errorf("%s: pixel_values differ from transformers' by %.3g", ri.File, d)
		}
		im := vision.NewImage(rgb)
		sp, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		r := modeltest.MaxRel(sp[0].Rows, ri.Features)
		if len(sp[0].Rows) != len(ri.Features) || r > 1e-4 {
			t.Errorf("%s: features differ from transformers' by %.3g (%d values, want %v)", ri.File, r, len(sp[0].Rows), ri.FeatureShape)
		}
		t.Logf("%s: pixel_values within %.2g, features within %.2g of transformers'", ri.File, modeltest.MaxAbs(px.Values, ri.PixelValues), r)
		spans, imgs = append(spans, sp[0]), append(imgs, im)
	}
	imageToken := v.ImageTokenID()
	for _, c := range refs.Cases {
		ids, md := modeltest.MediaPrompt(t, c.Name, c.InputIDs, imageToken, c.Images, spans, imgs, m.Config.HiddenSize)
		logits := modeltest.ForwardMedia(t, m, ids, md)
		r := modeltest.MaxRel(logits, c.Logits)
		if r > 1e-4 {
			t.Errorf("%s: last-position logits differ from transformers' by %.3g", c.Name, r)
		}
		t.Logf("%s (%d images): logits within %.2g of transformers %s", c.Name, len(c.Images), r, refs.Transformers)
		if c.LogitsCausal != nil {
			if rc := modeltest.MaxRel(logits, c.LogitsCausal); rc < 10*r || rc < 1e-3 {
				t.Errorf("%s: logits are %.3g from transformers' without the image mask, %.3g from those with it: the mask is not tested", c.Name, rc, r)
			}
		}
	}
}
