package modeltest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// qwenVisionRefs is testdata/vision/refs.json as the Qwen towers' vision_ref.py scripts write it.
type qwenVisionRefs struct {
	Transformers string `json:"transformers"`
	Images       []struct {
		File         string    `json:"file"`
		PixelValues  []float32 `json:"pixel_values"`
		Grid         [3]int    `json:"grid"`
		Features     []float32 `json:"features"`
		FeatureShape []int     `json:"feature_shape"`
	} `json:"images"`
	Cases []struct {
		Name        string    `json:"name"`
		Images      []int     `json:"images"`
		InputIDs    []int32   `json:"input_ids"`
		PositionIDs [][]int   `json:"position_ids"`
		RopeDelta   *int      `json:"rope_delta"`
		Logits      []float32 `json:"logits"`
	} `json:"cases"`
}

// CheckQwenVision checks a Qwen vision model (Qwen3.5/3.6, Qwen2.5-VL) against the
// transformers reference in testdata/vision (written by script, or skips naming it):
// pixel_values and grids of the images (Pillow's resize reproduced), the tower's features,
// get_rope_index's positions and delta, and the last position's logits for prompts with 0,
// 1 and 2 images, on the checkpoint the script saved, converted by `mlxg create` and loaded
// on backend.
func CheckQwenVision(t *testing.T, backend compute.Backend, script string) {
	dir := filepath.Join("testdata", "vision")
	raw, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Skipf("no transformers reference: run python3 %s (transformers 5, torch, Pillow)", script)
	}
	var refs qwenVisionRefs
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatal(err)
	}
	mlx := filepath.Join(t.TempDir(), "mlx")
	if _, err := create.Convert(context.Background(), filepath.Join(dir, "ckpt"), mlx, create.Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(mlx, backend)
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
		data, err := os.ReadFile(filepath.Join(dir, ri.File))
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
		if px.Grid != ri.Grid || MaxAbs(px.Values, ri.PixelValues) > 1e-6 {
			t.Errorf("%s: pixel_values differ by %.3g, grid %v, want %v", ri.File, MaxAbs(px.Values, ri.PixelValues), px.Grid, ri.Grid)
		}
		im := vision.NewImage(rgb)
		sp, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		if r := MaxRel(sp[0].Rows, ri.Features); len(sp[0].Rows) != len(ri.Features) || r > 1e-4 {
			t.Errorf("%s: features differ from transformers' by %.3g (%d values, want %v)", ri.File, r, len(sp[0].Rows), ri.FeatureShape)
		}
		t.Logf("%s: features within %.2g of transformers'", ri.File, MaxRel(sp[0].Rows, ri.Features))
		spans, imgs = append(spans, sp[0]), append(imgs, im)
	}
	imageToken := v.ImageTokenID()
	for _, c := range refs.Cases {
		ids, md := MediaPrompt(t, c.Name, c.InputIDs, imageToken, c.Images, spans, imgs, m.Config.HiddenSize)
		if len(c.PositionIDs) == 3 {
			for i := range ids {
				p := md.Position(i)
				if p[0] != c.PositionIDs[0][i] || p[1] != c.PositionIDs[1][i] || p[2] != c.PositionIDs[2][i] {
					t.Errorf("%s: position %d is %v, transformers %d %d %d", c.Name, i, p, c.PositionIDs[0][i], c.PositionIDs[1][i], c.PositionIDs[2][i])
					break
				}
			}
		}
		if c.RopeDelta != nil {
			if d := md.Position(len(ids))[0] - len(ids); d != *c.RopeDelta {
				t.Errorf("%s: rope delta %d, transformers %d", c.Name, d, *c.RopeDelta)
			}
		}
		logits := ForwardMedia(t, m, ids, md)
		r := MaxRel(logits, c.Logits)
		if r > 1e-4 {
			t.Errorf("%s: last-position logits differ from transformers' by %.3g", c.Name, r)
		}
		t.Logf("%s (%d images): logits within %.2g of transformers %s", c.Name, len(c.Images), r, refs.Transformers)
	}
}
