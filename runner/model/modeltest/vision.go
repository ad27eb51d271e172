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

// visionRefs is testdata/vision/refs.json as the vision families' vision_ref.py scripts
// write it: each family's fields beside the common ones.
type visionRefs struct {
	Transformers string `json:"transformers"`
	Images       []struct {
		File         string    `json:"file"`
		PixelValues  []float32 `json:"pixel_values"`
		Grid         [3]int    `json:"grid"`      // Qwen
		Tokens       int       `json:"tokens"`    // Gemma 4
		Patches      int       `json:"patches"`   // Gemma 4
		Positions    []int     `json:"positions"` // Gemma 4
		Features     []float32 `json:"features"`
		FeatureShape []int     `json:"feature_shape"`
	} `json:"images"`
	Cases []struct {
		Name         string    `json:"name"`
		Images       []int     `json:"images"`
		InputIDs     []int32   `json:"input_ids"`
		PositionIDs  [][]int   `json:"position_ids"` // Qwen
		RopeDelta    *int      `json:"rope_delta"`   // Qwen
		Logits       []float32 `json:"logits"`
		LogitsCausal []float32 `json:"logits_causal"` // Gemma
	} `json:"cases"`
}

// VisionRef says which transformers reference CheckVision reads and which of its
// family's fields it checks.
type VisionRef struct {
	Script string // the vision_ref.py that writes testdata/vision, named when it is absent
	Needs  string // what the script runs on
	// MRoPE: each image's grid (Qwen's temporal, height and width in patches) and, where
	// the reference has them, each prompt's get_rope_index positions and delta must be
	// transformers'.
	MRoPE bool
	// ImageMask: where the reference has transformers' logits without the bidirectional
	// image mask (Gemma's), ours must be far from them, or the mask would go untested.
	ImageMask bool
	// Patches: each image's patch count, each patch's (x, y) and the image's token count
	// (Gemma 4's, which vary with the image's size) must be transformers'.
	Patches bool
}

// CheckVision checks a vision model against the transformers reference in testdata/vision
// (written by ref.Script, or skips naming it), on the checkpoint the script saved,
// converted by `mlxg create` and loaded on backend: the images' pixel_values (the
// processor's resize rule and Pillow's resampling reproduced) and what ref asks of their
// layout, the tower's features, and the last position's logits for prompts with 0, 1 and 2
// images; and what ref asks of the positions and the image mask.
func CheckVision(t *testing.T, backend compute.Backend, ref VisionRef) {
	dir := filepath.Join("testdata", "vision")
	raw, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Skipf("no transformers reference: run python3 %s (%s)", ref.Script, ref.Needs)
	}
	var refs visionRefs
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
		if ref.Patches && px.Rows != ri.Patches {
			t.Fatalf("%s: %d patches, transformers %d", ri.File, px.Rows, ri.Patches)
		}
		if ref.MRoPE && px.Grid != ri.Grid {
			t.Errorf("%s: grid %v, transformers %v", ri.File, px.Grid, ri.Grid)
		}
		if d := MaxAbs(px.Values, ri.PixelValues); d > 1e-6 {
			t.Errorf("%s: pixel_values differ from transformers' by %.3g", ri.File, d)
		}
		if ref.Patches {
			for r := range px.Rows { // row-major (x, y) over the grid
				if x, y := r%px.Grid[2], r/px.Grid[2]; ri.Positions[2*r] != x || ri.Positions[2*r+1] != y {
					t.Fatalf("%s: patch %d at (%d, %d), transformers (%d, %d)", ri.File, r, x, y, ri.Positions[2*r], ri.Positions[2*r+1])
				}
			}
			if n := v.Processor().ImageTokens(rgb.W, rgb.H); n != ri.Tokens {
				t.Errorf("%s: %d tokens, transformers %d", ri.File, n, ri.Tokens)
			}
		}
		im := vision.NewImage(rgb)
		sp, err := m.EncodeImages(context.Background(), []vision.Image{im})
		if err != nil {
			t.Fatal(err)
		}
		r := MaxRel(sp[0].Rows, ri.Features)
		if len(sp[0].Rows) != len(ri.Features) || r > 1e-4 {
			t.Errorf("%s: features differ from transformers' by %.3g (%d values, want %v)", ri.File, r, len(sp[0].Rows), ri.FeatureShape)
		}
		t.Logf("%s: pixel_values within %.2g, features within %.2g of transformers'", ri.File, MaxAbs(px.Values, ri.PixelValues), r)
		spans, imgs = append(spans, sp[0]), append(imgs, im)
	}
	imageToken := v.ImageTokenID()
	for _, c := range refs.Cases {
		ids, md := MediaPrompt(t, c.Name, c.InputIDs, imageToken, c.Images, spans, imgs, m.Config.HiddenSize)
		if ref.MRoPE && len(c.PositionIDs) == 3 {
			for i := range ids {
				p := md.Position(i)
				if p[0] != c.PositionIDs[0][i] || p[1] != c.PositionIDs[1][i] || p[2] != c.PositionIDs[2][i] {
					t.Errorf("%s: position %d is %v, transformers %d %d %d", c.Name, i, p, c.PositionIDs[0][i], c.PositionIDs[1][i], c.PositionIDs[2][i])
					break
				}
			}
		}
		if ref.MRoPE && c.RopeDelta != nil {
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
		if ref.ImageMask && c.LogitsCausal != nil {
			if rc := MaxRel(logits, c.LogitsCausal); rc < 10*r || rc < 1e-3 {
				t.Errorf("%s: logits are %.3g from transformers' without the image mask, %.3g from those with it: the mask is not tested", c.Name, rc, r)
			}
		}
	}
}
