package qwen25vl_test

import (
	"context"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

const skipMLX = "MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)"

// TestMLXImages: on MLX (MLX's CPU build where libmlxc is installed) the tower's features
// (windowed attention: each window a block of BlockAttention, block 1 over the whole
// image) and every row's logits of a prompt with two images (M-RoPE's contiguous
// sections at the images' rows and the rope delta after them) match the CPU backend's
// within 1e-4. The images' grids are not multiples of the window, so that edge windows
// are smaller than the others.
func TestMLXImages(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip(skipMLX)
	}
	_, vl := tinyDirs(t)
	cpuModel := load(t, vl)
	m, err := model.Load(vl, mlxtest.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Vision() == nil {
		t.Fatal("the tower was not loaded on MLX")
	}
	imgs := []vision.Image{testImage(40, 48, 1), testImage(64, 24, 2)}
	ctx := context.Background()
	want, err := cpuModel.EncodeImages(ctx, imgs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.EncodeImages(ctx, imgs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i].Grid != want[i].Grid {
			t.Fatalf("image %d: grid %v on MLX, %v on the CPU backend", i, got[i].Grid, want[i].Grid)
		}
		r := modeltest.MaxRel(got[i].Rows, want[i].Rows)
		if r > 1e-4 {
			t.Errorf("image %d (grid %v): MLX's features are %.3g from the CPU backend's", i, want[i].Grid, r)
			continue
		}
		t.Logf("image %d (grid %v): features within %.2g of the CPU backend's (%s)", i, want[i].Grid, r, m.Backend().Name())
	}
	text := modeltest.Tokens(5, 12)
	logits := func(m *model.Model, spans []model.Span) []float32 {
		ids, md := mediaPrompt(m, text, []int{2, 7}, spans, imgs)
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		model.SetMedia(caches, md)
		defer model.SetMedia(caches, nil)
		l, err := m.Forward(ctx, ids, caches, true)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	g, w := logits(m, got), logits(cpuModel, want)
	if len(g) != len(w) || len(w) < 20*m.Config.VocabSize {
		t.Fatalf("%d logits on MLX, %d on the CPU backend: want every row's", len(g), len(w))
	}
	r := modeltest.MaxRel(g, w)
	if r > 1e-4 {
		t.Errorf("MLX's logits with two images are %.3g from the CPU backend's", r)
		return
	}
	t.Logf("every row's logits (%d rows) with two images within %.2g of the CPU backend's", len(w)/m.Config.VocabSize, r)
}

// TestEngineImagesOnMLX: the engine on MLX (an installed libmlxc) reads one and two images
// as on the CPU backend: the same greedy tokens, each image counted and encoded, in
// prefill chunks of 16 rows that cut through the images.
func TestEngineImagesOnMLX(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip(skipMLX)
	}
	dir := engineCheckpoint(t)
	ref, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	e, err := runner.Load(dir, runner.LoadOptions{Backend: mlxtest.Backend(t), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	o := runner.Greedy()
	o.NumPredict = 6
	o.NumBatch = 16
	img := map[string]any{"type": "image"}
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	for _, c := range []struct {
		name   string
		parts  []any
		images []vision.Image
	}{
		{"one image", []any{img, txt("What is in this picture?")}, []vision.Image{testImage(40, 48, 1)}},
		{"two images", []any{txt("Compare"), img, txt("with"), img}, []vision.Image{testImage(64, 48, 3), testImage(48, 64, 4)}},
	} {
		req := runner.Request{Messages: []template.Message{{"role": "user", "content": c.parts}}, Options: o, Images: c.images}
		want, err := ref.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatalf("%s on MLX: %v", c.name, err)
		}
		if !slices.Equal(got.Tokens, want.Tokens) || got.Images != len(c.images) || got.ImagesEncoded != len(c.images) {
			t.Errorf("%s on MLX: tokens %v, %d images (%d encoded); on the CPU backend %v", c.name, got.Tokens, got.Images, got.ImagesEncoded, want.Tokens)
			continue
		}
		t.Logf("%s: %d prompt tokens, %d image tokens, tokens %v on both", c.name, got.PromptTokens, got.ImageTokens, got.Tokens)
	}
}
