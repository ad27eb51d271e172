package gemma3_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// TestCreateGemma3: `mlxg create` of a multimodal Gemma 3 in transformers 5's layout gives
// mlx-vlm's tensors byte for byte (the language model under language_model.model.*, the
// tower under vision_tower.* with its patch embedding channels-last, the projector under
// multi_modal_projector.*), also with --quantize 4 (the tower and projector kept in float),
// and the same image features as the checkpoint written in mlx-vlm's layout.
func TestCreateGemma3(t *testing.T) {
	dir := t.TempDir()
	hf, mlx := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	for i, d := range []string{hf, mlx} {
		if err := randmodel.Generate(d, randmodel.TinyGemma3(256), randmodel.Options{Seed: 6}); err != nil {
			t.Fatal(err)
		}
		if err := randmodel.AddGemma3Vision(d, smallVision(), 9, i == 0); err != nil {
			t.Fatal(err)
		}
	}
	want, err := safetensors.OpenDir(mlx)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	img := testImage(40, 30, 1)
	var feats [][]float32
	for _, bits := range []int{0, 4} {
		out := filepath.Join(dir, "out", string(rune('0'+bits)))
		if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: bits, GroupSize: 32}); err != nil {
			t.Fatal(err)
		}
		got, err := safetensors.OpenDir(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range want.Names() {
			w, _ := want.Tensor(name)
			g, ok := got.Tensor(name)
			switch {
			case !ok:
				t.Errorf("%d bits: no %s in the converted checkpoint", bits, name)
			case strings.HasPrefix(name, "language_model.") && bits > 0:
				// quantized or kept: only the name is checked
			case !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data):
				t.Errorf("%d bits: %s is %v, mlx-vlm's layout %v (or its bytes differ)", bits, name, g.Shape, w.Shape)
			}
		}
		got.Close()
		m, err := model.Load(out, cpu.New(2))
		if err != nil {
			t.Fatal(err)
		}
		if m.Vision() == nil {
			t.Fatalf("%d bits: the converted tower was not loaded", bits)
		}
		sp, err := m.EncodeImages(context.Background(), []vision.Image{img})
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		feats = append(feats, sp[0].Rows)
	}
	ref := visionModel(t) // mlx-vlm's layout, the same seeds
	sp, err := ref.EncodeImages(context.Background(), []vision.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range feats {
		if !slices.Equal(f, sp[0].Rows) {
			t.Errorf("converted checkpoint %d: features differ from mlx-vlm's layout's", i)
		}
	}
}
