package gemma3_test

import (
	"context"
	"testing"

	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// TestMLXImages: on MLX (MLX's CPU build where libmlxc is installed) the tower's features and
// every row's logits of a prompt with two images (the image rows attending to each other:
// AttentionSpans, metal/vision.go) match the CPU backend's within 1e-4.
func TestMLXImages(t *testing.T) {
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	cpuModel := visionModel(t)
	m, err := model.Load(cpuModel.Dir, mlxtest.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Vision() == nil {
		t.Fatal("the tower was not loaded on MLX")
	}
	a, b := testImage(40, 30, 1), testImage(30, 40, 2)
	ctx := context.Background()
	want, err := cpuModel.EncodeImages(ctx, []vision.Image{a, b})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.EncodeImages(ctx, []vision.Image{a, b})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		r := modeltest.MaxRel(got[i].Rows, want[i].Rows)
		if r > 1e-4 {
			t.Errorf("image %d: MLX's features are %.3g from the CPU backend's", i, r)
		}
		t.Logf("image %d: features within %.2g of the CPU backend's (%s)", i, r, m.Backend().Name())
	}
	logits := func(m *model.Model) []float32 {
		ids, md := modeltest.TwoImagePrompt(t, m, a, b)
		return modeltest.ForwardMediaRows(t, m, ids, md)
	}
	r := modeltest.MaxRel(logits(m), logits(cpuModel))
	if r > 1e-4 {
		t.Errorf("MLX's logits with images are %.3g from the CPU backend's", r)
	}
	t.Logf("every row's logits with two images within %.2g of the CPU backend's", r)
}
